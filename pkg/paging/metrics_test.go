package paging

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	tests := []struct {
		name     string
		observed []ContinueOutcome
		want     map[ContinueOutcome]int
	}{
		{name: "none", want: map[ContinueOutcome]int{}},
		{
			name:     "each",
			observed: []ContinueOutcome{ContinueServed, ContinueServed, ContinueDelegated, ContinueExpired, ContinueInvalid, ContinueServed},
			want:     map[ContinueOutcome]int{ContinueServed: 3, ContinueDelegated: 1, ContinueExpired: 1, ContinueInvalid: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.observed {
				m.ObserveContinue(o)
			}
			var b strings.Builder
			b.WriteString("# HELP listproxy_paging_continue_tokens_total Requests carrying a listproxy continue token, by outcome (served, delegated, expired, invalid).\n")
			b.WriteString("# TYPE listproxy_paging_continue_tokens_total counter\n")
			for _, o := range []ContinueOutcome{ContinueDelegated, ContinueExpired, ContinueInvalid, ContinueServed} {
				b.WriteString("listproxy_paging_continue_tokens_total{outcome=\"" + string(o) + "\"} " + strconv.Itoa(tc.want[o]) + "\n")
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), "listproxy_paging_continue_tokens_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestMetricsNil(t *testing.T) {
	var m *Metrics
	m.ObserveContinue(ContinueServed) // must not panic
	unregistered, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	unregistered.ObserveContinue(ContinueServed)
	if _, err := NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsRegisteredTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("second NewMetrics on one registry succeeded, want an error")
	}
}
