package chart_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/listproxy/listproxy/test/framework"
)

const (
	alertRules = "rules/listproxy-alerts.yaml" // in the chart
	alertTests = "testdata/alerts-test.yaml"
	runbook    = "docs/alerts.md"
	runbookURL = "https://github.com/listproxy/listproxy/blob/main/" + runbook + "#"
)

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// alerts returns the chart's alert names and their annotations.
func alerts(t *testing.T) map[string]map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), chartPath, alertRules))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	out := map[string]map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r.Annotations
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", alertRules)
	}
	return out
}

// promtool returns the pinned promtool that 'make deps' builds
// (hack/build-prometheus.sh). It fails the test when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	dir, err := framework.ToolsBinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "promtool")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("pinned promtool missing (run make deps): %v", err)
	}
	return bin
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// TestAlertRules checks the chart's alerts with the pinned promtool: the rule
// file passes 'promtool check rules' (syntax and lint), and the unit tests in
// testdata/alerts-test.yaml pass ('promtool test rules').
func TestAlertRules(t *testing.T) {
	root := repoRoot(t)
	runPromtool(t, root, "check", "rules", filepath.Join(chartPath, alertRules))
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	runPromtool(t, wd, "test", "rules", alertTests)
}

// TestAlertsTestedAndDocumented checks that every alert has a promtool case
// in which it fires and one in which it does not, and a runbook section in
// docs/alerts.md that its runbook_url points at.
func TestAlertsTestedAndDocumented(t *testing.T) {
	data, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", alertTests, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tg := range tests.Tests {
		for _, c := range tg.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), runbook))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (Listproxy\w+)$`).FindAllSubmatch(doc, -1) {
		sections[string(m[1])] = true
	}
	known := alerts(t)
	for name, annotations := range known {
		if !fires[name] {
			t.Errorf("%s: no promtool case in which it fires", name)
		}
		if !quiet[name] {
			t.Errorf("%s: no promtool case in which it does not fire", name)
		}
		if !sections[name] {
			t.Errorf("%s: no section \"## %s\" in %s", name, name, runbook)
		}
		if want := runbookURL + strings.ToLower(name); annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url = %q, want %q", name, annotations["runbook_url"], want)
		}
		if annotations["summary"] == "" || annotations["description"] == "" {
			t.Errorf("%s: want summary and description annotations", name)
		}
	}
	for name := range sections {
		if known[name] == nil {
			t.Errorf("%s documents %s, which is not an alert", runbook, name)
		}
	}
}
