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
	"github.com/listproxy/listproxy/pkg/wire"
)

func TestAdmitStart(t *testing.T) {
	tests := []struct {
		name       string
		req        startRequest
		wantReason Reason
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

// Which requests start a store (admission.go): the pods JSON store runs
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
	protobufPods := Preload{Resource: podsGVR.GroupResource(), Format: wire.Protobuf, Explicit: true}
	deny := func(context.Context, schema.GroupVersionResource) bool { return false }
	allow := func(context.Context, schema.GroupVersionResource) bool { return true }
	tests := []struct {
		name      string
		authorize func(context.Context, schema.GroupVersionResource) bool
		preload   []Preload
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
		{name: "preloaded", authorize: deny, preload: []Preload{protobufPods}, accept: accept, wantStarted: true},
		{name: "over_budget", authorize: allow, budget: 1000, accept: accept, wantRefused: ReasonStoreOverBudget, wantAsked: true},
		{name: "within_budget", authorize: allow, budget: 1001, accept: accept, wantStarted: true, wantAsked: true},
		{name: "preloaded_over_budget", authorize: deny, preload: []Preload{protobufPods}, budget: 1, accept: accept, wantStarted: true},
		{name: "running_store_serves_namespace_only", authorize: deny, budget: 1},
	}
	for _, kind := range []string{"list", "watch"} {
		for _, tc := range tests {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				var (
					mu    sync.Mutex
					asked []schema.GroupVersionResource
				)
				cfg := Config{Preload: tc.preload, MaxStoreBytes: tc.budget}
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
				cfg.Metrics = metrics
				l, _ := newServeTestLists(t, cfg, []*snapshot.Entry{testPod("a", "p1", 5)}, 7)
				l.stores[storeKey{gvr: podsGVR, format: wire.JSON}].bytes.Store(1000)
				srv := forbiddenUpstream(t)
				l.cfg.Upstream, l.client = &rest.Config{Host: srv.URL}, srv.Client()

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
					target, why, ok := l.ResolveWatch(r, "", "")
					if ok {
						target.Release()
					}
					reason, answered = why, ok || target.Reject != nil
				} else {
					rec := httptest.NewRecorder()
					answered = l.ServeList(rec, r)
					if answered && tc.accept == "" && rec.Header().Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
						t.Errorf("answered from %q, want the snapshot", rec.Header().Get(httpapi.HeaderServedFrom))
					}
				}

				l.mu.RLock()
				_, started := l.stores[storeKey{gvr: podsGVR, format: wire.Protobuf}]
				l.mu.RUnlock()
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
					if got := testutil.ToFloat64(metrics.refused.WithLabelValues("pods", refusedLabel(tc.wantRefused))); got != 1 {
						t.Errorf("listproxy_stores_refused_total{reason=%q} = %v, want 1", refusedLabel(tc.wantRefused), got)
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
