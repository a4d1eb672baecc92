package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Status is how one spec ended in one run.
type Status string

// The statuses a run reports; a spec absent from a run's report is missing.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
	Missing Status = "-"
)

// Result is one spec's outcome in a run, with the failure message, if any.
type Result struct {
	Status  Status
	Message string
}

// junitSuites is the part of Ginkgo's JUnit report the driver reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
}

// ParseJUnit reads a Ginkgo JUnit report and returns the outcome of each spec
// by name ("[It] " dropped). Suite nodes (BeforeSuite, ReportAfterSuite, ...)
// are left out, except that a failed one is returned under its own name, so
// that a run whose set-up failed is not mistaken for one with nothing to run.
func ParseJUnit(r io.Reader) (map[string]Result, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse JUnit report: %w", err)
	}
	results := map[string]Result{}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			res := caseResult(c)
			name, isSpec := strings.CutPrefix(c.Name, "[It] ")
			if !isSpec && res.Status != Failed {
				continue
			}
			results[name] = res
		}
	}
	return results, nil
}

// caseResult prefers Ginkgo's status attribute (passed, skipped, pending,
// failed, panicked, interrupted, aborted, timedout) and falls back to the
// child elements of reports without it.
func caseResult(c junitCase) Result {
	var msg string
	switch {
	case c.Failure != nil:
		msg = c.Failure.Message
	case c.Error != nil:
		msg = c.Error.Message
	}
	switch c.Status {
	case "passed":
		return Result{Status: Passed}
	case "skipped", "pending":
		return Result{Status: Skipped}
	case "":
	default:
		return Result{Status: Failed, Message: msg}
	}
	switch {
	case c.Failure != nil || c.Error != nil:
		return Result{Status: Failed, Message: msg}
	case c.Skipped != nil:
		return Result{Status: Skipped}
	default:
		return Result{Status: Passed}
	}
}

// Lost returns, sorted, the specs that passed in base but not in other.
func Lost(base, other map[string]Result) []string {
	var lost []string
	for name, res := range base {
		if res.Status == Passed && other[name].Status != Passed {
			lost = append(lost, name)
		}
	}
	sort.Strings(lost)
	return lost
}

// Ran returns, sorted, the specs that did not skip in at least one of runs.
func Ran(runs ...map[string]Result) []string {
	seen := map[string]bool{}
	for _, run := range runs {
		for name, res := range run {
			if res.Status != Skipped {
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Count returns how many specs of run have status s.
func Count(run map[string]Result, s Status) int {
	n := 0
	for _, res := range run {
		if res.Status == s {
			n++
		}
	}
	return n
}

// StatusOf is run's status for name, Missing when the run does not report it.
func StatusOf(run map[string]Result, name string) Status {
	res, ok := run[name]
	if !ok {
		return Missing
	}
	return res.Status
}
