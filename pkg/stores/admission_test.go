package stores

import "testing"

func TestAdmitStart(t *testing.T) {
	tests := []struct {
		name       string
		req        startRequest
		wantReason string
		wantOK     bool
	}{
		{name: "sidecar", req: startRequest{authorized: true}, wantOK: true},
		{name: "sidecar_unbounded", req: startRequest{authorized: true, used: 1 << 40}, wantOK: true},
		{name: "cluster_wide_reader", req: startRequest{authorized: true, budget: 100, used: 99}, wantOK: true},
		{name: "namespace_only", req: startRequest{}, wantReason: ReasonStoreNotAuthorized},
		{name: "namespace_only_over_budget", req: startRequest{budget: 100, used: 100}, wantReason: ReasonStoreNotAuthorized},
		{name: "preloaded", req: startRequest{preloaded: true}, wantOK: true},
		{name: "preloaded_over_budget", req: startRequest{preloaded: true, budget: 100, used: 500}, wantOK: true},
		{name: "over_budget", req: startRequest{authorized: true, budget: 100, used: 100}, wantReason: ReasonStoreOverBudget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reason, ok := admitStart(tc.req)
			if reason != tc.wantReason || ok != tc.wantOK {
				t.Errorf("admitStart(%+v) = %q, %v; want %q, %v", tc.req, reason, ok, tc.wantReason, tc.wantOK)
			}
		})
	}
}
