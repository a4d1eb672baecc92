package freshness

import (
	"context"
	"errors"
	"testing"
	"time"

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
