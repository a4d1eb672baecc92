package lists

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// coldTestLists returns a Lists whose pods store has not synced, and that
// store.
func coldTestLists(t *testing.T, wait time.Duration) (*Lists, *snapshot.Store) {
	t.Helper()
	l, _ := newServeTestLists(t, Config{ColdStoreWait: wait}, nil, 1)
	e := l.stores[storeKey{gvr: podsGVR, format: wire.JSON}]
	e.store = snapshot.NewStore(snapshot.StoreConfig{})
	e.started = time.Now()
	return l, e.store
}

// A LIST of a store whose first list is in flight waits for it and is
// answered from the snapshot, instead of passing through beside it.
func TestColdStoreListWaitsForSync(t *testing.T) {
	l, store := coldTestLists(t, time.Minute)
	type result struct {
		served bool
		rec    *httptest.ResponseRecorder
	}
	done := make(chan result, 1)
	go func() {
		served, rec, _ := serveTest(l, "/api/v1/pods", url.Values{"resourceVersion": {"0"}}, nil)
		done <- result{served, rec}
	}()
	store.Replace([]*snapshot.Entry{testPod("a", "p1", 5)}, 7)
	res := <-done
	if !res.served || res.rec.Code != http.StatusOK {
		t.Fatalf("served %v, HTTP %d: %s; want 200 from the snapshot", res.served, res.rec.Code, res.rec.Body.String())
	}
	var list testList
	if err := json.Unmarshal(res.rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Metadata.ResourceVersion != "7" || len(list.Items) != 1 {
		t.Errorf("got resourceVersion %q and %d items, want 7 and 1", list.Metadata.ResourceVersion, len(list.Items))
	}
}

// Past --cold-store-wait, a LIST gets what the apiserver's unready watch
// cache answers: limited unfiltered lists are read from etcd (pass
// through), every other one gets 429 "storage is (re)initializing" with
// Retry-After.
func TestColdStoreAfterWait(t *testing.T) {
	l, _ := coldTestLists(t, time.Millisecond)
	tests := []struct {
		name string
		q    url.Values
		want int // 0: passes through
	}{
		{name: "rv0", q: url.Values{"resourceVersion": {"0"}}, want: http.StatusTooManyRequests},
		{name: "rv0_limit", q: url.Values{"resourceVersion": {"0"}, "limit": {"500"}}, want: 0},
		{name: "rv0_limit_selector", q: url.Values{"resourceVersion": {"0"}, "limit": {"500"}, "labelSelector": {"app=odd"}}, want: http.StatusTooManyRequests},
		{name: "not_older_than", q: url.Values{"resourceVersion": {"5"}, "resourceVersionMatch": {"NotOlderThan"}}, want: http.StatusTooManyRequests},
		{name: "exact_limit", q: url.Values{"resourceVersion": {"5"}, "limit": {"10"}}, want: 0},
		{name: "exact_field_selector", q: url.Values{"resourceVersion": {"5"}, "resourceVersionMatch": {"Exact"}, "fieldSelector": {"metadata.name=p1"}}, want: http.StatusTooManyRequests},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served, rec, _ := serveTest(l, "/api/v1/pods", tc.q, nil)
			if tc.want == 0 {
				if served {
					t.Fatalf("answered HTTP %d %s; want pass through", rec.Code, rec.Body.String())
				}
				return
			}
			if !served || rec.Code != tc.want {
				t.Fatalf("served %v, HTTP %d %s; want %d", served, rec.Code, rec.Body.String(), tc.want)
			}
			if got := rec.Header().Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatal(err)
			}
			if status.Reason != metav1.StatusReasonTooManyRequests || status.Message != storeNotReadyMessage || status.Details == nil || status.Details.RetryAfterSeconds != 1 {
				t.Errorf("status %+v, want the apiserver's unready watch cache Status", status)
			}
		})
	}
}

// A request whose client goes away stops waiting at once.
func TestColdStoreWaitEndsWithContext(t *testing.T) {
	l, _ := coldTestLists(t, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/pods?resourceVersion=0", nil)
	rec := httptest.NewRecorder()
	l.ServeList(rec, r) // returns: the test would time out otherwise
}

func TestRetryAfterUnready(t *testing.T) {
	for _, tc := range []struct {
		downtime time.Duration
		want     int
	}{
		{0, 1}, {10 * time.Second, 1}, {20 * time.Second, 3}, {time.Minute, 30}, {time.Hour, 30},
	} {
		if got := retryAfterUnready(tc.downtime); got != tc.want {
			t.Errorf("retryAfterUnready(%v) = %d, want %d", tc.downtime, got, tc.want)
		}
	}
}

func TestParsePreload(t *testing.T) {
	got, err := ParsePreload([]string{"pods", "pods/json", "endpointslices.discovery.k8s.io", "pods", " nodes "})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.String())
	}
	want := []string{"pods", "pods/json", "endpointslices.discovery.k8s.io", "nodes"}
	if len(names) != len(want) {
		t.Fatalf("got %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("got %v, want %v", names, want)
		}
	}
	for _, bad := range []string{"*", "pods/yaml", "/json", "pods/json/x"} {
		if _, err := ParsePreload([]string{bad}); err == nil {
			t.Errorf("ParsePreload(%q): no error", bad)
		}
	}
	// Without a format: what client-go's typed clients ask for.
	for _, tc := range []struct {
		p      Preload
		custom bool
		want   wire.Format
	}{
		{got[0], false, wire.Protobuf},
		{got[0], true, wire.JSON},
		{got[1], false, wire.JSON},
	} {
		if f := tc.p.formatFor(&resourceInfo{Custom: tc.custom}); f != tc.want {
			t.Errorf("%s (custom %v): format %v, want %v", tc.p, tc.custom, f, tc.want)
		}
	}
}

// A watch of a store whose first list is in flight waits for it like a
// LIST; past --cold-store-wait it gets the apiserver's 429 for an unready
// watch cache instead of passing through.
func TestColdStoreWatch(t *testing.T) {
	req := func() *http.Request {
		return httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1", nil)
	}
	t.Run("waits", func(t *testing.T) {
		l, store := coldTestLists(t, time.Minute)
		done := make(chan bool, 1)
		go func() {
			target, _, ok := l.ResolveWatch(req(), "", "")
			if ok {
				target.Release()
			}
			done <- ok
		}()
		store.Replace([]*snapshot.Entry{testPod("a", "p1", 5)}, 7)
		if !<-done {
			t.Fatal("watch of a store that synced while it waited not served")
		}
	})
	t.Run("after_wait", func(t *testing.T) {
		l, _ := coldTestLists(t, time.Millisecond)
		target, reason, ok := l.ResolveWatch(req(), "", "")
		if ok || target.Reject == nil {
			t.Fatalf("ResolveWatch = ok %v, reason %q, Reject set %v; want a rejection", ok, reason, target.Reject != nil)
		}
		rec := httptest.NewRecorder()
		target.Reject(rec)
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || status.Message != storeNotReadyMessage {
			t.Errorf("HTTP %d, Retry-After %q, %+v; want the apiserver's 429 for an unready watch cache", rec.Code, rec.Header().Get("Retry-After"), status)
		}
	})
}
