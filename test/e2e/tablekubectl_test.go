package e2e

import (
	"bytes"
	"context"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/listproxy/listproxy/test/framework"
)

// kubectlClockColumns are the printed columns relative to the clock: their
// durations are masked when two runs may have rendered them in different
// seconds.
var kubectlClockColumns = map[string]bool{
	"AGE": true, "RESTARTS": true, "LAST SEEN": true, "FIRST SEEN": true, "DURATION": true, "LAST SCHEDULE": true, "CREATED": true,
}

// kubectlDuration is a duration as duration.HumanDuration prints it.
var kubectlDuration = regexp.MustCompile(`\b\d+[smhdy](\d+[smhdy])?\b`)

// kubectlHeaderColumn is the start of a header name: the line's start, or
// after two spaces or more (kubectl pads columns with three).
var kubectlHeaderColumn = regexp.MustCompile(`(^|\s{2,})\S`)

// kubectlRows cuts kubectl's printed tables (blocks separated by blank
// lines, each under its header) into cells at the header's column starts,
// and returns each line as its cells joined by " | ", with the durations
// of clock columns masked when mask is set.
func kubectlRows(out string, mask bool) []string {
	var rows []string
	var starts []int
	var names []string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			starts = nil
			rows = append(rows, "")
			continue
		}
		if starts == nil {
			names = nil
			for _, m := range kubectlHeaderColumn.FindAllStringIndex(line, -1) {
				starts = append(starts, m[1]-1)
			}
			for i, s := range starts {
				end := len(line)
				if i+1 < len(starts) {
					end = starts[i+1]
				}
				names = append(names, strings.TrimSpace(line[s:end]))
			}
			rows = append(rows, strings.Join(names, " | "))
			continue
		}
		cells := make([]string, len(starts))
		for i, s := range starts {
			if s >= len(line) {
				continue
			}
			end := len(line)
			if i+1 < len(starts) && starts[i+1] < len(line) {
				end = starts[i+1]
			}
			cells[i] = strings.TrimSpace(line[s:end])
			if mask && kubectlClockColumns[names[i]] {
				cells[i] = kubectlDuration.ReplaceAllString(cells[i], "*")
			}
		}
		rows = append(rows, strings.Join(cells, " | "))
	}
	return rows
}

// kubectlVerbose runs kubectl with -v=8, which logs every request's URL
// and response headers, and returns its stdout and stderr; it fails the
// test if kubectl fails.
func kubectlVerbose(t *testing.T, k kubectlRunner, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, k.path, append(append(append([]string(nil), k.base...), "-v=8"), args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %.3000s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), stderr.String()
}

var (
	// kubectl's -v=8 request line: structured (1.32 on) or plain (1.31).
	kubectlRequestURL = regexp.MustCompile(`"Request" verb="GET" url="([^"]+)"|\] GET (\S+)`)
	kubectlServedFrom = regexp.MustCompile(headerServedFrom + `: (\S+)`)
)

// kubectlServed returns, from kubectl's -v=8 log, each GET's path and
// the X-Listproxy-Served-From of its response, in order.
func kubectlServed(t *testing.T, log string) [][2]string {
	t.Helper()
	var out [][2]string
	var path string
	for _, line := range strings.Split(log, "\n") {
		if m := kubectlRequestURL.FindStringSubmatch(line); m != nil {
			u, err := url.Parse(m[1] + m[2])
			if err != nil {
				t.Fatalf("kubectl request URL %q: %v", m[1]+m[2], err)
			}
			path = u.Path
		} else if m := kubectlServedFrom.FindStringSubmatch(line); m != nil {
			out = append(out, [2]string{path, m[1]})
		}
	}
	return out
}

// TestTableKubectl: the pinned kubectl of the release under test prints
// the same through listproxy as directly: equal outright when both runs
// fall within one wall-clock second, and with the durations of clock
// columns masked otherwise (always where a cell is relative to a time with
// a fraction of a second); and its Table LISTs are answered from
// snapshots where the served-from column says so (listproxy_lists_total).
func TestTableKubectl(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	w := seedTableWorld(t, cp)
	lp := startTableListproxy(t, cp)
	lpc := newRawClient(t, lp.Config())
	viaLP := newKubectlRunner(t, cp, lp.URL)
	direct := newKubectlRunner(t, cp, "")
	ctx := context.Background()
	warmTables(ctx, t, lpc, tableTargets(w), w.minor)
	// Fill both discovery caches, so that the runs below send only LISTs.
	viaLP.run(t, "api-resources")
	direct.run(t, "api-resources")

	snapshotLists := func(resource string) float64 {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_lists_total", `resource="`+resource+`"`, `source="snapshot"`)
	}
	for _, tc := range []struct {
		name string
		args []string
		// resources: the plural and listproxy_lists_total's resource
		// label of each resource listed.
		resources [][2]string
		// snapshot is the served-from column.
		snapshot servedOn
		// fractional: a printed cell is relative to a time with a
		// fraction of a second; masked even within one second.
		fractional bool
	}{
		{name: "pods", args: []string{"get", "pods", "-A"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "pods wide", args: []string{"get", "pods", "-A", "-o", "wide"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "pods show-labels", args: []string{"get", "pods", "-A", "--show-labels"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "pods label column", args: []string{"get", "pods", "-A", "-L", "app"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "pods in chunks", args: []string{"get", "pods", "-A", "--chunk-size=2"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "pods of a namespace", args: []string{"get", "pods", "-n", tableNSA, "-l", "app=web"}, resources: [][2]string{{"pods", "pods"}}, snapshot: allReleases},
		{name: "jobs cronjobs events", args: []string{"get", "jobs,cronjobs,events", "-A"}, resources: [][2]string{{"jobs", "jobs.batch"}, {"cronjobs", "cronjobs.batch"}, {"events", "events"}}, snapshot: allReleases, fractional: true},
		{name: "events.k8s.io wide", args: []string{"get", "events.events.k8s.io", "-A", "-o", "wide"}, resources: [][2]string{{"events", "events.events.k8s.io"}}, snapshot: allReleases, fractional: true},
		{name: "custom resource", args: []string{"get", "gadgets", "-A", "-o", "wide"}, resources: [][2]string{{"gadgets", "gadgets.demo.listproxy.io"}}, snapshot: allReleases},
		{name: "custom resource default columns", args: []string{"get", "plainthings", "-A", "--show-labels"}, resources: [][2]string{{"plainthings", "plainthings.demo.listproxy.io"}}, snapshot: allReleases},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantFrom := wantServedFrom(tc.snapshot, w.minor)
			before := map[string]float64{}
			for _, r := range tc.resources {
				before[r[1]] = snapshotLists(r[1])
			}
			var got, want, log string
			oneSecond := false
			for range maxPairAttempts {
				t0 := time.Now()
				got, log = kubectlVerbose(t, viaLP, tc.args...)
				want = direct.run(t, tc.args...)
				if oneSecond = t0.Unix() == time.Now().Unix(); oneSecond {
					break
				}
			}
			if diff := cmp.Diff(kubectlRows(want, true), kubectlRows(got, true)); diff != "" {
				t.Errorf("kubectl %s: listproxy prints otherwise than the apiserver, clock columns masked (-want +got):\n%s", strings.Join(tc.args, " "), diff)
			} else if oneSecond && !tc.fractional && got != want {
				t.Errorf("kubectl %s within one second: listproxy prints otherwise than the apiserver (-want +got):\n%s", strings.Join(tc.args, " "), cmp.Diff(want, got))
			}
			if len(kubectlRows(want, false)) < 2 {
				t.Errorf("kubectl %s printed no rows:\n%s", strings.Join(tc.args, " "), want)
			}
			// The served-from column, per response of the last run through
			// listproxy, and in listproxy's metrics.
			served := kubectlServed(t, log)
			for _, r := range tc.resources {
				n := 0
				for _, s := range served {
					if strings.HasSuffix(s[0], "/"+r[0]) {
						n++
						if s[1] != wantFrom {
							t.Errorf("LIST %s: %s %q, want %q", s[0], headerServedFrom, s[1], wantFrom)
						}
					}
				}
				if n == 0 {
					t.Errorf("kubectl sent no LIST of %s through listproxy; responses: %v", r[0], served)
				}
				if d := snapshotLists(r[1]) - before[r[1]]; wantFrom == "snapshot" && d == 0 {
					t.Errorf("listproxy_lists_total{resource=%q,source=\"snapshot\"} did not grow", r[1])
				}
			}
			if !oneSecond {
				t.Logf("kubectl %s: no two runs within one second; compared with clock columns masked", strings.Join(tc.args, " "))
			}
		})
	}
}
