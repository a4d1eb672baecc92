package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ginkgoReport is trimmed from a JUnit report Ginkgo v2 writes for e2e.test.
const ginkgoReport = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="1" errors="0" failures="1" time="12.5">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="5" disabled="1" skipped="0" errors="0" failures="1" time="12.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.1"></testcase>
    <testcase name="[It] [sig-api-machinery] Watchers should observe add, update, and delete watch notifications on configmaps [Conformance]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-api-machinery] Servers with support for API chunking should return chunks of results for list calls [Conformance]" classname="Kubernetes e2e suite" status="failed" time="3.4">
      <failure message="Expected&#xA;    &lt;int&gt;: 39&#xA;to equal 40" type="failed">[FAILED] details</failure>
    </testcase>
    <testcase name="[It] [sig-node] Pods should be submitted and removed" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-api-machinery] Discovery should validate PreferredVersion [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="60"></testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0.01"></testcase>
  </testsuite>
</testsuites>`

// oldReport has no status attributes, only the child elements.
const oldReport = `<testsuites><testsuite>
  <testcase name="[It] a"></testcase>
  <testcase name="[It] b"><failure message="boom"></failure></testcase>
  <testcase name="[It] c"><skipped message="skipped"></skipped></testcase>
  <testcase name="[It] d"><error message="panic"></error></testcase>
  <testcase name="[BeforeSuite]"><failure message="no nodes"></failure></testcase>
</testsuite></testsuites>`

func TestParseJUnit(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  map[string]Result
	}{
		{
			name:  "ginkgo v2 status attributes",
			input: ginkgoReport,
			want: map[string]Result{
				"[sig-api-machinery] Watchers should observe add, update, and delete watch notifications on configmaps [Conformance]":    {Status: Passed},
				"[sig-api-machinery] Servers with support for API chunking should return chunks of results for list calls [Conformance]": {Status: Failed, Message: "Expected\n    <int>: 39\nto equal 40"},
				"[sig-node] Pods should be submitted and removed":                                                                        {Status: Skipped},
				"[sig-api-machinery] Discovery should validate PreferredVersion [Conformance]":                                           {Status: Failed},
			},
		},
		{
			name:  "child elements only, with a failed suite node",
			input: oldReport,
			want: map[string]Result{
				"a":             {Status: Passed},
				"b":             {Status: Failed, Message: "boom"},
				"c":             {Status: Skipped},
				"d":             {Status: Failed, Message: "panic"},
				"[BeforeSuite]": {Status: Failed, Message: "no nodes"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJUnit(strings.NewReader(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseJUnit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseJUnitRefusesGarbage(t *testing.T) {
	if _, err := ParseJUnit(strings.NewReader("not xml")); err == nil {
		t.Error("ParseJUnit accepted a report that is not XML")
	}
}

func TestLostAndRan(t *testing.T) {
	direct := map[string]Result{
		"passes both":       {Status: Passed},
		"fails through":     {Status: Passed},
		"missing through":   {Status: Passed},
		"fails directly":    {Status: Failed},
		"skipped both":      {Status: Skipped},
		"skipped directly":  {Status: Skipped},
		"passes only there": {Status: Failed},
	}
	through := map[string]Result{
		"passes both":       {Status: Passed},
		"fails through":     {Status: Failed},
		"fails directly":    {Status: Failed},
		"skipped both":      {Status: Skipped},
		"skipped directly":  {Status: Passed},
		"passes only there": {Status: Passed},
	}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{name: "lost", got: Lost(direct, through), want: []string{"fails through", "missing through"}},
		{name: "lost reversed", got: Lost(through, direct), want: []string{"passes only there", "skipped directly"}},
		{name: "ran", got: Ran(direct, through), want: []string{"fails directly", "fails through", "missing through", "passes both", "passes only there", "skipped directly"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
