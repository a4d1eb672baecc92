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
	"github.com/listproxy/listproxy/pkg/stores"
)

// coldTestLists returns a Lists whose pods store has not synced, and that
// store.
func coldTestLists(t *testing.T, wait time.Duration) (*Lists, *snapshot.Store) {
	t.Helper()
	return newServeTestListsWith(t, Config{}, stores.Config{ColdStoreWait: wait}, 0, nil, 0)
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
			if status.Reason != metav1.StatusReasonTooManyRequests || status.Message != "storage is (re)initializing" || status.Details == nil || status.Details.RetryAfterSeconds != 1 {
				t.Errorf("status %+v, want the apiserver's unready watch cache Status", status)
			}
		})
	}
}

// A namespace's first page does not wait for its store's first list, a
// list of the whole resource: it passes through at once, whatever its
// resourceVersion, and the store goes on syncing for the reads after it.
// Cluster-wide LISTs still wait (TestColdStoreAfterWait).
func TestColdStoreNamespacedListPassesThrough(t *testing.T) {
	l, _ := coldTestLists(t, time.Hour)
	for _, q := range []url.Values{
		{},
		{"resourceVersion": {"0"}},
		{"resourceVersion": {"5"}, "resourceVersionMatch": {"NotOlderThan"}},
		{"limit": {"500"}, "labelSelector": {"app=x"}},
	} {
		passed := make(chan bool, 1)
		go func() {
			served, _, _ := serveTest(l, "/api/v1/namespaces/a/pods", q, nil)
			passed <- !served
		}()
		select {
		case ok := <-passed:
			if !ok {
				t.Errorf("%v: answered by listproxy, want passed through", q)
			}
		case <-time.After(10 * time.Second): // the store's wait is an hour
			t.Fatalf("%v: still waiting for the store's first list", q)
		}
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
