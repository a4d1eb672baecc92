package watch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// podsRegistry is a registry knowing pods, whose JSON store is store (a
// nil one: a store that has not synced); it starts no other store. Reads
// wait coldWait for a store to sync.
func podsRegistry(t *testing.T, store *snapshot.Store, coldWait time.Duration) *stores.Registry {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if store == nil {
		store = snapshot.NewStore(snapshot.StoreConfig{})
	}
	reg, err := stores.NewStatic(ctx, stores.Config{ColdStoreWait: coldWait}, nil, stores.StaticStore{
		Resource: catalog.NewResource(podsGVR, "Pod", true, false), Format: wire.JSON, Store: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestHandlerPassedThrough: a watch the edge passes through unoffered is
// counted with the edge's reason, or with the reason Cacheable had.
func TestHandlerPassedThrough(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewServer(Config{Metrics: m}), podsRegistry(t, nil, 0), nil)
	tests := []struct {
		query, accept, reason   string
		wantResource, wantLabel string
	}{
		{query: "watch=1", reason: "impersonation", wantLabel: "impersonation"},
		{query: "watch=1", accept: "application/yaml", wantResource: "pods", wantLabel: "media_type"},
		{query: "watch=1&bogus=1", wantLabel: "query"},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?"+tc.query, nil)
		r.Header.Set("Accept", tc.accept)
		if tc.reason == "" && h.Cacheable(r) {
			t.Fatalf("%s: cacheable", tc.query)
		}
		h.PassedThrough(r, tc.reason)
		if got := testutil.ToFloat64(m.passThrough.WithLabelValues(tc.wantResource, tc.wantLabel)); got != 1 {
			t.Errorf("%s %q: passed_through_total{resource=%q,reason=%q} = %v, want 1", tc.query, tc.reason, tc.wantResource, tc.wantLabel, got)
		}
	}
}

// A watch of a store whose first list is in flight waits for it like a
// LIST; past --cold-store-wait it gets the apiserver's 429 for an unready
// watch cache instead of passing through.
func TestColdStoreWatch(t *testing.T) {
	t.Run("waits", func(t *testing.T) {
		store := snapshot.NewStore(snapshot.StoreConfig{})
		h := NewHandler(NewServer(Config{}), podsRegistry(t, store, time.Minute), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rec := newHookRecorder()
		done := make(chan bool, 1)
		go func() {
			done <- h.ServeWatch(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/pods?watch=1&resourceVersion=7&timeoutSeconds=60", nil))
		}()
		store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 7)
		select {
		case <-rec.wrote: // the watch's head: served from the store
		case served := <-done:
			t.Fatalf("ServeWatch returned %v before answering; want the watch served once the store synced", served)
		}
		cancel()
		if !<-done {
			t.Fatal("watch of a store that synced while it waited not served")
		}
	})
	t.Run("after_wait", func(t *testing.T) {
		h := NewHandler(NewServer(Config{}), podsRegistry(t, nil, time.Millisecond), nil)
		rec := httptest.NewRecorder()
		if !h.ServeWatch(rec, httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1", nil)) {
			t.Fatal("passed through; want the apiserver's 429 for an unready watch cache")
		}
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || status.Message != "storage is (re)initializing" {
			t.Errorf("HTTP %d, Retry-After %q, %+v; want the apiserver's 429 for an unready watch cache", rec.Code, rec.Header().Get("Retry-After"), status)
		}
	})
}

// hookRecorder is a ResponseRecorder that says when the response's head
// was sent (written and flushed).
type hookRecorder struct {
	*httptest.ResponseRecorder
	wrote chan struct{}
	once  sync.Once
}

func newHookRecorder() *hookRecorder {
	return &hookRecorder{ResponseRecorder: httptest.NewRecorder(), wrote: make(chan struct{})}
}

func (r *hookRecorder) Flush() {
	r.ResponseRecorder.Flush()
	r.once.Do(func() { close(r.wrote) })
}
