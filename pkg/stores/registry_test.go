package stores

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// TestIdleStoresDropped: a store that no request holds is dropped once
// IdleTTL has passed since it was last released; a store held (a watch
// holds it until it ends) or preloaded never is; a peer's list is a use
// too.
func TestIdleStoresDropped(t *testing.T) {
	const ttl = time.Minute
	clk := testingclock.NewFakeClock(time.Now())
	pods := catalog.NewResource(podsGVR, "Pod", true, false)
	synced := func() *snapshot.Store {
		s := snapshot.NewStore(snapshot.StoreConfig{})
		s.Replace(nil, 1)
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := NewStatic(ctx, Config{IdleTTL: ttl, Clock: clk}, nil,
		StaticStore{Resource: pods, Format: wire.JSON, Store: synced()},
		StaticStore{Resource: pods, Format: wire.Protobuf, Store: synced()},
		StaticStore{Resource: pods, Format: wire.MetaJSON, Store: synced()},
	)
	if err != nil {
		t.Fatal(err)
	}
	reg.stores[storeKey{gvr: podsGVR, format: wire.MetaJSON}].preloaded.Store(true)
	running := func() (formats []wire.Format) {
		for _, f := range []wire.Format{wire.JSON, wire.Protobuf, wire.MetaJSON} {
			if reg.Store(podsGVR, f) != nil {
				formats = append(formats, f)
			}
		}
		return formats
	}

	held, _, ok := reg.Acquire(ctx, pods, wire.JSON, false)
	if !ok {
		t.Fatal("Acquire of a running store failed")
	}
	used, _, _ := reg.Acquire(ctx, pods, wire.Protobuf, false)
	clk.Step(ttl / 2)
	used.Release()
	clk.Step(ttl/2 + time.Second)
	reg.dropIdle()
	if got := len(running()); got != 3 {
		t.Fatalf("after %v, %d stores run, want 3: the protobuf store was released %v ago", ttl+time.Second, got, ttl/2+time.Second)
	}
	peer, _, _ := reg.Acquire(ctx, pods, wire.Protobuf, true)
	peer.Release()
	clk.Step(ttl - time.Second)
	reg.dropIdle()
	if got := len(running()); got != 3 {
		t.Fatalf("%d stores run, want 3: a peer's list used the protobuf store %v ago", got, ttl-time.Second)
	}
	clk.Step(2 * time.Second)
	reg.dropIdle()
	if got := running(); len(got) != 2 || got[0] != wire.JSON || got[1] != wire.MetaJSON {
		t.Fatalf("stores running %v, want the held JSON and the preloaded metadata store", got)
	}
	clk.Step(10 * ttl)
	reg.dropIdle()
	if got := len(running()); got != 2 {
		t.Fatalf("%d stores run, want the held and the preloaded one", got)
	}
	held.Release()
	clk.Step(ttl + time.Second)
	reg.dropIdle()
	if got := running(); len(got) != 1 || got[0] != wire.MetaJSON {
		t.Errorf("stores running %v, want the preloaded one only", got)
	}
}

// TestAcquireRacesIdleDrop: a store that a request acquires is held from
// the moment it is found or started, so the idle loop cannot drop it
// between its lookup and the hold. The hook runs the idle loop in that
// window, with the store last used more than IdleTTL ago: the store must
// survive, held, and the request must not hold a dropped store.
func TestAcquireRacesIdleDrop(t *testing.T) {
	const ttl = time.Minute
	// The apiserver of the store a request starts: its list never ends.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer upstream.Close()
	for _, tc := range []struct {
		name         string
		existingOnly bool
		start        bool // the store is started by the Acquire
	}{
		{name: "running"},
		{name: "running_existing_only", existingOnly: true},
		{name: "started", start: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Now())
			pods := catalog.NewResource(podsGVR, "Pod", true, false)
			synced := snapshot.NewStore(snapshot.StoreConfig{})
			synced.Replace(nil, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{IdleTTL: ttl, Clock: clk}
			var running []StaticStore
			if tc.start {
				cfg.Upstream = &rest.Config{Host: upstream.URL}
			} else {
				running = append(running, StaticStore{Resource: pods, Format: wire.JSON, Store: synced})
			}
			reg, err := NewStatic(ctx, cfg, []*catalog.Resource{pods}, running...)
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(ttl + time.Second) // a running store is idle since it started
			reg.acquireHook = func() {
				clk.Step(ttl + time.Second) // a started one is idle from here
				reg.dropIdle()
			}
			h, reason, ok := reg.Acquire(ctx, pods, wire.JSON, tc.existingOnly)
			if !ok {
				t.Fatalf("Acquire = %q, want the store", reason)
			}
			defer h.Release()
			if h.Dropped() {
				t.Error("the request holds a store the idle loop dropped while it was acquired")
			}
			if reg.Store(podsGVR, wire.JSON) == nil {
				t.Error("the idle loop dropped a store being acquired")
			}
			// Held, it stays however long it is held.
			reg.acquireHook = nil
			clk.Step(10 * ttl)
			reg.dropIdle()
			if h.Dropped() || reg.Store(podsGVR, wire.JSON) == nil {
				t.Error("the idle loop dropped a held store")
			}
		})
	}
}

// TestPreloadLeavesNoHold: starting a preloaded store holds it until it is
// marked preloaded (so the idle loop cannot drop it first), and then lets
// go: the store is not held by anyone afterwards, and is never idle.
func TestPreloadLeavesNoHold(t *testing.T) {
	const ttl = time.Minute
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer upstream.Close()
	clk := testingclock.NewFakeClock(time.Now())
	pods := catalog.NewResource(podsGVR, "Pod", true, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	preload, err := ParsePreload([]string{"pods/json"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewStatic(ctx, Config{IdleTTL: ttl, Clock: clk, Upstream: &rest.Config{Host: upstream.URL}, Preload: preload}, []*catalog.Resource{pods})
	if err != nil {
		t.Fatal(err)
	}
	reg.ensurePreloaded()
	reg.ensurePreloaded() // finds it running
	reg.mu.RLock()
	e := reg.stores[storeKey{gvr: podsGVR, format: wire.JSON}]
	reg.mu.RUnlock()
	if e == nil || !e.preloaded.Load() {
		t.Fatal("the preloaded store was not started and marked")
	}
	if n := e.holders.Load(); n != 0 {
		t.Errorf("the preloaded store has %d holders after preload, want 0", n)
	}
	clk.Step(10 * ttl)
	reg.dropIdle()
	if reg.Store(podsGVR, wire.JSON) == nil {
		t.Error("the idle loop dropped a preloaded store")
	}
}
