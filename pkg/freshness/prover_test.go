package freshness

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Without etcd, a NotOlderThan read ahead of the store waits for the store,
// and on timeout passes through (nil snapshot, nil error); it must never
// ask etcd (a nil Checker).
func TestNotOlderThanWithoutEtcd(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(nil, 10)
	p := NewProver(context.Background(), ProverConfig{Store: store, Resource: "pods"})

	if snap, rv, err := p.NotOlderThan(context.Background(), 10, 10*time.Millisecond); snap == nil || rv != 10 || err != nil {
		t.Errorf("NotOlderThan(10) = %v, %d, %v; want the snapshot at 10", snap, rv, err)
	}
	if snap, _, err := p.NotOlderThan(context.Background(), 20, 10*time.Millisecond); snap != nil || err != nil {
		t.Errorf("NotOlderThan(20) = %v, %v; want pass-through (nil, nil)", snap, err)
	}
}

// Without etcd nothing is proven: consistent reads fail as a failed probe
// and reads ahead of the store are not retained.
func TestProverWithoutEtcd(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(nil, 10)
	p := NewProver(context.Background(), ProverConfig{Store: store, Resource: "pods"})
	if snap, _, outcome := p.Consistent(context.Background()); snap != nil || outcome != ProbeFailed {
		t.Errorf("Consistent() = %v, %q; want nil, %q", snap, outcome, ProbeFailed)
	}
	if _, err := p.At(context.Background(), 20); !errors.Is(err, snapshot.ErrNotRetained) {
		t.Errorf("At(20) = %v, want ErrNotRetained", err)
	}
}

// A requested resourceVersion is the caller's: one beyond etcd's revisions
// (int64; the apiserver parses them as uint64) is never proven, and never
// reports the store as behind. Only a change etcd holds and the store lacks
// does.
func TestProverRequestedResourceVersions(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	held := put(t, client, "/registry/pods/ns/a")
	missed := put(t, client, "/registry/pods/ns/b") // never applied to the store
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{{Key: snapshot.ObjectKey("ns", "a"), RV: uint64(held)}}, uint64(held))

	var (
		mu     sync.Mutex
		behind []uint64
	)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // stops the tracker before the Checker
	const timeout = time.Second
	p := NewProver(ctx, ProverConfig{
		Checker: c, Store: store, Resource: "pods", Prefix: "/registry/pods/", Timeout: timeout,
		Behind: func(rv uint64, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			behind = append(behind, rv)
		},
	})

	reads := []struct {
		name  string
		prove func(rv uint64) bool
	}{
		{name: "Holds", prove: func(rv uint64) bool { return p.Holds(ctx, rv) }},
		{name: "At", prove: func(rv uint64) bool {
			_, err := p.At(ctx, rv)
			return err == nil
		}},
		{name: "NotOlderThan", prove: func(rv uint64) bool {
			snap, _, err := p.NotOlderThan(ctx, rv, timeout)
			return snap != nil && err == nil
		}},
	}
	tests := []struct {
		name       string
		rv         uint64
		want       bool
		wantBehind []uint64
	}{
		{name: "held", rv: uint64(held), want: true},
		{name: "max_int64", rv: math.MaxInt64},
		{name: "2^63", rv: 1 << 63},
		{name: "max_uint64", rv: math.MaxUint64},
		{name: "missed_change", rv: uint64(missed), wantBehind: []uint64{uint64(missed)}},
	}
	for _, tc := range tests {
		for _, r := range reads {
			t.Run(tc.name+"/"+r.name, func(t *testing.T) {
				mu.Lock()
				behind = nil
				mu.Unlock()
				if got := r.prove(tc.rv); got != tc.want {
					t.Errorf("%s(%d) proven = %v, want %v", r.name, tc.rv, got, tc.want)
				}
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tc.wantBehind, behind); diff != "" {
					t.Errorf("Behind calls (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// With etcd a small read is proven as any other: etcd's proofs take
// milliseconds, so ConsistentIfCheap never passes it through as
// DirectCheaper, and a store missing a change etcd holds is still caught.
func TestConsistentIfCheapWithEtcd(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	held := put(t, client, "/registry/pods/ns/a")
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{{Key: snapshot.ObjectKey("ns", "a"), RV: uint64(held)}}, uint64(held))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // stops the tracker before the Checker
	p := NewProver(ctx, ProverConfig{
		Checker: c, Store: store, Resource: "pods", Prefix: "/registry/pods/", Timeout: time.Second,
	})
	snap, rv, outcome := p.ConsistentIfCheap(ctx, true)
	if outcome != Served || snap == nil || rv < uint64(held) {
		t.Fatalf("ConsistentIfCheap(small) = %v, %d, %q; want served at %d or later", snap, rv, outcome, held)
	}
	put(t, client, "/registry/pods/ns/b") // never applied to the store
	if snap, _, outcome := p.ConsistentIfCheap(ctx, true); snap != nil || outcome != SnapshotTimeout {
		t.Fatalf("ConsistentIfCheap(small) with a change the store lacks = %v, %q; want nil, %q", snap, outcome, SnapshotTimeout)
	}
}
