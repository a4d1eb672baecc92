package e2e

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTableComparisonHelpers checks the Table tests' own rules without a
// control plane: the window rule's candidate cells, and the masking of
// kubectl's clock columns.
func TestTableComparisonHelpers(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		from, to time.Duration
		want     []string
	}{
		{name: "within one second", from: 47*time.Second + 100*ms, to: 47*time.Second + 900*ms, want: []string{`"47s"`}},
		{name: "across a second", from: 47*time.Second + 900*ms, to: 48*time.Second + 10*ms, want: []string{`"47s"`, `"48s"`}},
		{name: "across two minutes", from: 119*time.Second + 990*ms, to: 120*time.Second + 5*ms, want: []string{`"119s"`, `"2m"`}},
		{name: "just before", from: -900 * ms, to: -100 * ms, want: []string{`"0s"`}},
		{name: "long before", from: -3 * time.Second, to: -3*time.Second + 10*ms, want: []string{`"\u003cinvalid\u003e"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]bool{}
			for _, c := range tc.want {
				want[c] = true
			}
			if diff := cmp.Diff(want, humanDurations(tc.from, tc.to)); diff != "" {
				t.Errorf("humanDurations(%v, %v) (-want +got):\n%s", tc.from, tc.to, diff)
			}
		})
	}

	out := "NAMESPACE   NAME     RESTARTS       AGE   LAST SEEN\n" +
		"tbl-a       web-0    3 (5m2s ago)   4s    2m6s\n" +
		"tbl-b       db-0     0              12d   <none>\n" +
		"\n" +
		"NAME   DATA\n" +
		"x      1\n"
	want := []string{
		"NAMESPACE | NAME | RESTARTS | AGE | LAST SEEN",
		"tbl-a | web-0 | 3 (* ago) | * | *",
		"tbl-b | db-0 | 0 | * | <none>",
		"",
		"NAME | DATA",
		"x | 1",
	}
	if diff := cmp.Diff(want, kubectlRows(out, true)); diff != "" {
		t.Errorf("kubectlRows masked (-want +got):\n%s", diff)
	}
}
