package lists

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/admission"
	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// TestAdmit: a response of known weight selects its page once admitted; one
// weighed by its page selects it first, and again after waiting; one that
// finds no room gets the apiserver's 429.
func TestAdmit(t *testing.T) {
	items := []*snapshot.Entry{{Key: "a", Raw: make([]byte, 60)}, {Key: "b", Raw: make([]byte, 40)}}
	tests := []struct {
		name       string
		estimate   int64
		queueWait  time.Duration
		held       int64 // weight admitted before, released once the response queues
		wantCalls  int
		wantWeight int64
		wantErr    bool
	}{
		{name: "estimated", estimate: 70, queueWait: time.Second, wantCalls: 1, wantWeight: 70},
		{name: "estimated_waits_then_room", estimate: 70, queueWait: time.Second, held: 50, wantCalls: 1, wantWeight: 70},
		{name: "estimated_no_room", estimate: 70, held: 50, wantCalls: 0, wantErr: true},
		{name: "weighed_by_page", estimate: -1, queueWait: time.Second, wantCalls: 1, wantWeight: 100},
		{name: "weighed_by_page_waits_then_room", estimate: -1, queueWait: time.Second, held: 50, wantCalls: 2, wantWeight: 100},
		{name: "weighed_by_page_no_room", estimate: -1, held: 50, wantCalls: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := admission.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Now())
			f := admission.NewQueue(admission.Config{MaxBytes: 100, QueueWait: tc.queueWait, Clock: clk, Metrics: m})
			l := &Lists{admission: f}
			var held *admission.Slot
			if tc.held > 0 {
				held, _ = f.Admit(context.Background(), tc.held, nil)
			}
			released := make(chan struct{})
			if tc.held > 0 && tc.queueWait > 0 {
				go func() {
					defer close(released)
					// Busy until admit has queued, timing its wait (no
					// sleep): then free room.
					for !clk.HasWaiters() {
						runtime.Gosched()
					}
					held.Release()
				}()
			} else {
				close(released)
			}
			calls := 0
			pageFn := func() (snapshot.Page, int64) {
				calls++
				return snapshot.Page{Items: items}, int64(len(items))
			}
			page, total, slot, status := l.admit(context.Background(), tc.estimate, pageFn)
			<-released
			if calls != tc.wantCalls {
				t.Errorf("page selected %d times, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr {
				if status == nil || status.Status().Code != http.StatusTooManyRequests || status.Status().Reason != metav1.StatusReasonTooManyRequests ||
					status.Status().Details == nil || status.Status().Details.RetryAfterSeconds != 1 ||
					status.Status().Message != "Too many requests, please try again later." {
					t.Fatalf("admit = %#v, want the apiserver's 429 TooManyRequests with retryAfterSeconds 1", status)
				}
				return
			}
			if status != nil {
				t.Fatalf("admit = %v, want admitted", status)
			}
			if len(page.Items) != len(items) || total != int64(len(items)) || slot.Weight() != tc.wantWeight {
				t.Errorf("admitted %d items of %d, weight %d; want 2 of 2, weight %d", len(page.Items), total, slot.Weight(), tc.wantWeight)
			}
			slot.Release()
			if lists, bytes := counterValue(t, reg, "listproxy_lists_inflight", nil), counterValue(t, reg, "listproxy_lists_inflight_bytes", nil); lists != 0 || bytes != 0 {
				t.Errorf("after release: %v lists, %v bytes in flight; want none", lists, bytes)
			}
		})
	}
}

func TestEstimateWeight(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	var entries []*snapshot.Entry
	for _, k := range []struct {
		ns, name string
		size     int
	}{{"a", "1", 100}, {"a", "2", 200}, {"a", "3", 300}, {"b", "1", 400}} {
		entries = append(entries, &snapshot.Entry{Key: snapshot.ObjectKey(k.ns, k.name), Raw: make([]byte, k.size)})
	}
	store.Replace(entries, 10)
	snap, _, err := store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	const mean = 250
	tests := []struct {
		name        string
		namespace   string
		limit       int64
		selectors   bool
		action      paging.Action
		token       paging.Token
		limitForRV0 bool
		// noWatchCache: a resource the apiserver reads from etcd even at
		// resourceVersion "0" (events).
		noWatchCache bool
		want         int64
	}{
		{name: "full_list_is_exact", action: paging.ServeConsistent, want: 1000},
		{name: "namespace", namespace: "a", action: paging.ServeConsistent, want: 3 * mean},
		{name: "limit", limit: 2, action: paging.ServeConsistent, want: 2 * mean},
		{name: "limit_beyond_the_list", limit: 10, action: paging.ServeConsistent, want: 1000},
		{name: "rest_of_a_continued_list", action: paging.ServeContinue, token: paging.Token{Total: 4, Returned: 3}, want: mean},
		{name: "limit_for_rv0", limit: 1, action: paging.ServeLatest, limitForRV0: true, want: mean},
		{name: "limit_ignored_for_rv0", limit: 1, action: paging.ServeLatest, want: 1000},
		{name: "limit_for_rv0_without_watch_cache", limit: 1, action: paging.ServeLatest, noWatchCache: true, want: mean},
		{name: "selectors_decide", selectors: true, action: paging.ServeConsistent, want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lists{cfg: Config{LimitForRV0: tc.limitForRV0}}
			res := &catalog.Resource{NoWatchCache: tc.noWatchCache}
			req := listRequest{Request: collection.Request{Path: collection.Path{Namespace: tc.namespace}, Resource: res, Selective: tc.selectors}, query: listQuery{limit: tc.limit}}
			if got := l.estimateWeight(req, paging.Decision{Action: tc.action}, tc.token, snap); got != tc.want {
				t.Errorf("estimateWeight = %d, want %d", got, tc.want)
			}
		})
	}
}
