package stores

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

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
	pods := NewResource(podsGVR, "Pod", true, false)
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
