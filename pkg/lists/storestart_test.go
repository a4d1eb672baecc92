package lists

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// forbiddenUpstream answers every request with the apiserver's 403, so
// that a store started against it fails its list and is never waited for.
func forbiddenUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Which requests start a store (stores.Registry.Acquire): the pods JSON store runs
// with 1000 bytes; the protobuf one does not. A LIST or watch of pods in
// protobuf starts it only for a trusted or cluster-wide caller, or
// because it is preloaded, and within the budget; otherwise it passes
// through with why, and the refusal is counted. A running store serves
// whoever the edge authorized.
func TestStoreStartPolicy(t *testing.T) {
	const (
		protobufPath = "/api/v1/namespaces/a/pods"
		accept       = "application/vnd.kubernetes.protobuf"
	)
	protobufPods := stores.Preload{Resource: podsGVR.GroupResource(), Format: wire.Protobuf, Explicit: true}
	deny := func(context.Context, schema.GroupVersionResource) bool { return false }
	allow := func(context.Context, schema.GroupVersionResource) bool { return true }
	tests := []struct {
		name      string
		authorize func(context.Context, schema.GroupVersionResource) bool
		preload   []stores.Preload
		budget    int64
		accept    string // "": JSON, the running store
		// wantStarted: the protobuf store runs afterwards; else the
		// request passed through for wantRefused.
		wantStarted bool
		wantRefused Reason
		wantAsked   bool // AuthorizeStart was asked
	}{
		{name: "sidecar", accept: accept, wantStarted: true},
		{name: "cluster_wide_reader", authorize: allow, accept: accept, wantStarted: true, wantAsked: true},
		{name: "namespace_only", authorize: deny, accept: accept, wantRefused: ReasonStoreNotAuthorized, wantAsked: true},
		{name: "preloaded", authorize: deny, preload: []stores.Preload{protobufPods}, accept: accept, wantStarted: true},
		{name: "over_budget", authorize: allow, budget: 1000, accept: accept, wantRefused: ReasonStoreOverBudget, wantAsked: true},
		{name: "within_budget", authorize: allow, budget: 1001, accept: accept, wantStarted: true, wantAsked: true},
		{name: "preloaded_over_budget", authorize: deny, preload: []stores.Preload{protobufPods}, budget: 1, accept: accept, wantStarted: true},
		{name: "running_store_serves_namespace_only", authorize: deny, budget: 1},
	}
	for _, kind := range []string{"list", "watch"} {
		for _, tc := range tests {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				var (
					mu    sync.Mutex
					asked []schema.GroupVersionResource
				)
				srv := forbiddenUpstream(t)
				cfg := stores.Config{Preload: tc.preload, MaxStoreBytes: tc.budget, Upstream: &rest.Config{Host: srv.URL}}
				if tc.authorize != nil {
					cfg.AuthorizeStart = func(ctx context.Context, gvr schema.GroupVersionResource) bool {
						mu.Lock()
						defer mu.Unlock()
						asked = append(asked, gvr)
						return tc.authorize(ctx, gvr)
					}
				}
				metrics, err := NewListMetrics(prometheus.NewRegistry())
				if err != nil {
					t.Fatal(err)
				}
				storeRegistry := prometheus.NewRegistry()
				storeMetrics, err := stores.NewMetrics(storeRegistry)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Metrics = storeMetrics
				l, _ := newServeTestListsWith(t, Config{Metrics: metrics}, cfg, 1000, []*snapshot.Entry{testPod("a", "p1", 5)}, 7)

				path := protobufPath
				if kind == "watch" {
					path += "?watch=1"
				} else {
					path += "?resourceVersion=0"
				}
				r := httptest.NewRequest(http.MethodGet, path, nil)
				if tc.accept != "" {
					r.Header.Set("Accept", tc.accept)
				}
				var reason string
				var answered bool
				if kind == "watch" {
					// The watch server's way to its store.
					res, _ := l.stores.Lookup(podsGVR)
					format := wire.JSON
					if tc.accept != "" {
						format = wire.Protobuf
					}
					h, why, ok := l.stores.Acquire(r.Context(), res, format, false)
					if ok {
						h.Release()
					}
					reason, answered = why, ok
				} else {
					rec := httptest.NewRecorder()
					answered = l.ServeList(rec, r)
					if answered && tc.accept == "" && rec.Header().Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
						t.Errorf("answered from %q, want the snapshot", rec.Header().Get(httpapi.HeaderServedFrom))
					}
				}

				started := l.stores.Store(podsGVR, wire.Protobuf) != nil
				if started != tc.wantStarted {
					t.Errorf("protobuf store started: %v, want %v", started, tc.wantStarted)
				}
				if tc.accept == "" && !answered {
					t.Errorf("the running JSON store did not answer (reason %q)", reason)
				}
				if tc.wantRefused != "" {
					if answered {
						t.Errorf("answered by listproxy; want a pass-through for %s", tc.wantRefused)
					}
					if kind == "watch" && reason != string(tc.wantRefused) {
						t.Errorf("watch passed through for %q, want %q", reason, tc.wantRefused)
					}
					if kind == "list" {
						if got := testutil.ToFloat64(metrics.decisions.WithLabelValues("pods", httpapi.SourceAPIServer, string(tc.wantRefused))); got != 1 {
							t.Errorf("listproxy_lists_total{reason=%q} = %v, want 1", tc.wantRefused, got)
						}
					}
					label := map[Reason]string{ReasonStoreNotAuthorized: "not_authorized", ReasonStoreOverBudget: "over_budget"}[tc.wantRefused]
					if got := counterValue(t, storeRegistry, "listproxy_stores_refused_total", map[string]string{"resource": "pods", "reason": label}); got != 1 {
						t.Errorf("listproxy_stores_refused_total{reason=%q} = %v, want 1", label, got)
					}
				}
				var want []schema.GroupVersionResource
				if tc.wantAsked {
					want = []schema.GroupVersionResource{podsGVR}
				}
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(want, asked); diff != "" {
					t.Errorf("AuthorizeStart asked for (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// counterValue is the value of the counter (or gauge) name with labels in
// reg; 0 when it was never counted.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
