package stores

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

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

// thingResources returns n cluster-scoped custom resources things0, things1,
// ... of example.com/v1.
func thingResources(n int) []*catalog.Resource {
	var out []*catalog.Resource
	for i := range n {
		gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: fmt.Sprintf("things%d", i)}
		out = append(out, catalog.NewResource(gvr, "Thing", false, true))
	}
	return out
}

// TestBudgetReservesListingStores: a store counts against
// Config.MaxStoreBytes from the moment it is admitted, not only once its
// first list is published. With the stores holding 1000 of a 1600-byte
// budget, requests for 20 stores that arrive while the first lists run
// start only as many as the reservation of a listing store (1/16 of the
// budget: 100) leaves room for; the rest pass through as over budget. Once
// the admitted stores have listed, they count what they hold, and the room
// left starts more.
func TestBudgetReservesListingStores(t *testing.T) {
	const budget, held = 1600, 1000
	const wantStarted = (budget - held) / (budget / listingShare)
	// A list is answered once its path is released; a watch is reported
	// on watches (the feeder asks for it once its list is published) and
	// stays open, quiet, until its store stops.
	watches := make(chan string, 64)
	var mu sync.Mutex
	released := map[string]chan struct{}{}
	gate := func(path string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if released[path] == nil {
			released[path] = make(chan struct{})
		}
		return released[path]
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			watches <- r.URL.Path
			<-r.Context().Done()
			return
		}
		select {
		case <-gate(r.URL.Path):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ThingList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","resourceVersion":"5"}}]}`)
	}))
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	things := thingResources(21)
	running := things[len(things)-1]
	synced := snapshot.NewStore(snapshot.StoreConfig{})
	synced.Replace(nil, 1)
	reg, err := NewStatic(ctx, Config{
		Upstream: &rest.Config{Host: upstream.URL}, MaxStoreBytes: budget,
		Clock: testingclock.NewFakeClock(time.Now()),
	}, things[:len(things)-1], StaticStore{Resource: running, Format: wire.JSON, Store: synced, Bytes: held})
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		res    *catalog.Resource
		h      *Handle
		reason string
	}
	results := make([]result, len(things)-1)
	var wg sync.WaitGroup
	for i, res := range things[:len(things)-1] {
		wg.Go(func() {
			h, reason, _ := reg.Acquire(ctx, res, wire.JSON, false)
			results[i] = result{res, h, reason}
		})
	}
	wg.Wait()
	var started []*Handle
	for _, r := range results {
		switch {
		case r.h != nil:
			started = append(started, r.h)
		case r.reason != ReasonStoreOverBudget:
			t.Errorf("a store was refused with reason %q, want %q", r.reason, ReasonStoreOverBudget)
		}
	}
	if len(started) != wantStarted {
		t.Fatalf("%d of %d stores started while their first lists ran, want %d: the stores listing must count against the budget", len(started), len(results), wantStarted)
	}

	for _, h := range started {
		close(gate(collectionPath(h.e.info.GVR)))
	}
	for range started {
		<-watches
	}
	for _, h := range started {
		if !h.Store().Synced() {
			t.Fatal("an admitted store watches before it has synced")
		}
		h.Release()
	}
	reg.mu.RLock()
	got := reg.storeBytesLocked()
	reg.mu.RUnlock()
	want := int64(held)
	for _, h := range started {
		want += h.e.bytes.Load()
	}
	if got != want {
		t.Errorf("the stores count %d bytes after their lists, want %d: what they hold replaces their reservations", got, want)
	}
	// The room their reservations kept is free again: with the stores
	// holding got, as many more start (and list, unanswered) as
	// reservations fit below the budget.
	reservation := int64(budget / listingShare)
	wantMore := int((budget - got + reservation - 1) / reservation)
	var more int
	for _, r := range results {
		if r.h != nil {
			continue // listed already
		}
		if h, _, ok := reg.Acquire(ctx, r.res, wire.JSON, false); ok {
			more++
			h.Release()
		}
	}
	if more != wantMore {
		t.Errorf("%d more stores started after the first lists (the stores holding %d), want %d", more, got, wantMore)
	}
}

// TestBudgetReleasesFailingList: a store whose first list fails holds
// nothing, and stops counting its reservation, so that a resource listproxy
// cannot list (RBAC, a broken aggregated API) does not keep other stores
// out.
func TestBudgetReleasesFailingList(t *testing.T) {
	const budget, held = 1600, 1590
	things := thingResources(3)
	failing, other, running := things[0], things[1], things[2]
	lists := make(chan string, 16) // the paths of the lists asked
	fail := make(chan struct{})    // closed to let the lists fail
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lists <- r.URL.Path
		select {
		case <-fail:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := snapshot.NewStore(snapshot.StoreConfig{})
	synced.Replace(nil, 1)
	reg, err := NewStatic(ctx, Config{Upstream: &rest.Config{Host: upstream.URL}, MaxStoreBytes: budget},
		[]*catalog.Resource{failing, other}, StaticStore{Resource: running, Format: wire.JSON, Store: synced, Bytes: held})
	if err != nil {
		t.Fatal(err)
	}
	h, _, ok := reg.Acquire(ctx, failing, wire.JSON, false)
	if !ok {
		t.Fatal("the first store was not started below the budget")
	}
	defer h.Release()
	if _, reason, ok := reg.Acquire(ctx, other, wire.JSON, false); ok || reason != ReasonStoreOverBudget {
		t.Fatalf("Acquire while the first store lists = %q, %v; want %q: its reservation fills the budget", reason, ok, ReasonStoreOverBudget)
	}
	// The feeder marks its list failing before it retries: once the retry
	// is asked, the reservation is released.
	close(fail)
	<-lists
	<-lists
	if !h.ListFailing() {
		t.Fatal("the store's list is not failing after a retry")
	}
	if h2, reason, ok := reg.Acquire(ctx, other, wire.JSON, false); !ok {
		t.Errorf("Acquire while the first store's list fails = %q; want a store: a failing list reserves nothing", reason)
	} else {
		h2.Release()
	}
}

// TestReservationEstimate: a store reserves its share of the budget, or
// what a listed store of the same resource in another representation holds
// when that is more.
func TestReservationEstimate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := catalog.NewResource(podsGVR, "Pod", true, false)
	thing := thingResources(1)[0]
	reg, err := NewStatic(ctx, Config{MaxStoreBytes: 1600}, []*catalog.Resource{thing},
		StaticStore{Resource: pods, Format: wire.JSON, Store: snapshot.NewStore(snapshot.StoreConfig{}), Bytes: 5000})
	if err != nil {
		t.Fatal(err)
	}
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	if got := reg.reservationLocked(podsGVR); got != 5000 {
		t.Errorf("reservation of a pods store beside a JSON one of 5000 bytes = %d, want 5000", got)
	}
	if got := reg.reservationLocked(thing.GVR); got != 1600/listingShare {
		t.Errorf("reservation of a store of things = %d, want %d", got, 1600/listingShare)
	}
	reg.cfg.MaxStoreBytes = 0
	if got := reg.reservationLocked(podsGVR); got != 0 {
		t.Errorf("reservation without a budget = %d, want 0", got)
	}
}
