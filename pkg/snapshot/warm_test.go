package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakePeer lists items at rv, or fails with err; it counts its lists.
type fakePeer struct {
	rv    string
	items []string
	err   error

	mu    sync.Mutex
	lists int
}

func (p *fakePeer) List(_ context.Context, _ int64, _ string, item func([]byte) error) (ListResult, error) {
	p.mu.Lock()
	p.lists++
	p.mu.Unlock()
	if p.err != nil {
		return ListResult{}, p.err
	}
	for _, it := range p.items {
		if err := item([]byte(it)); err != nil {
			return ListResult{}, err
		}
	}
	return ListResult{ResourceVersion: p.rv}, nil
}

func (p *fakePeer) listCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists
}

// warmHarness is a feeder harness whose first list is read from peer; it
// records what OnWarm reports.
func warmHarness(t *testing.T, peer *fakePeer) (*feederHarness, chan error) {
	h := newFeederHarness(t, -1)
	outcomes := make(chan error, 4)
	h.feeder.cfg.Warm = peer
	h.feeder.cfg.OnWarm = func(err error) { outcomes <- err }
	return h, outcomes
}

func TestFeederWarmsFromPeerThenWatchesSource(t *testing.T) {
	peer := &fakePeer{rv: "20", items: []string{"ns/a/15", "ns/b/18"}}
	h, outcomes := warmHarness(t, peer)
	h.run(t)

	w := h.nextWatch(t)
	if w.rv != "20" {
		t.Fatalf("first watch from %q, want the peer list's resourceVersion 20", w.rv)
	}
	if err := <-outcomes; err != nil {
		t.Fatalf("OnWarm(%v), want nil", err)
	}
	snap, rv, err := h.store.Latest()
	if err != nil || rv != 20 || snap.Len() != 2 {
		t.Fatalf("store after the peer's list: %d objects at %d (%v), want 2 at 20", snap.Len(), rv, err)
	}
	if _, ok := snap.Get(ObjectKey("ns", "b")); !ok {
		t.Fatal("store lacks ns/b from the peer's list")
	}

	// A later relist (the watch's resourceVersion is gone) reads the
	// source, never the peer again.
	w.send(t, WatchEvent{Type: Error})
	if got := h.nextRestart(t); got != RestartGone {
		t.Fatalf("restart reason %q, want %q", got, RestartGone)
	}
	if w2 := h.nextWatch(t); w2.rv != "10" {
		t.Fatalf("watch after the relist from %q, want the source list's resourceVersion 10", w2.rv)
	}
	if n := peer.listCount(); n != 1 {
		t.Fatalf("peer listed %d times, want once", n)
	}
}

func TestFeederFallsBackToSourceAtOnceWhenPeerFails(t *testing.T) {
	peer := &fakePeer{err: errors.New("connection refused")}
	h, outcomes := warmHarness(t, peer)
	h.run(t)

	// No backoff before the source's list: the fake clock never moves.
	if w := h.nextWatch(t); w.rv != "10" {
		t.Fatalf("first watch from %q, want the source list's resourceVersion 10", w.rv)
	}
	if err := <-outcomes; err == nil {
		t.Fatal("OnWarm(nil) for a peer that failed")
	}
	if h.feeder.ListFailing() {
		t.Error("ListFailing after the source's list succeeded")
	}
}

func TestFeederPeerListWithBadItemFallsBack(t *testing.T) {
	peer := &fakePeer{rv: "20", items: []string{"not an object"}}
	h, outcomes := warmHarness(t, peer)
	h.run(t)
	if w := h.nextWatch(t); w.rv != "10" {
		t.Fatalf("first watch from %q, want the source list's resourceVersion 10", w.rv)
	}
	if err := <-outcomes; err == nil {
		t.Fatal("OnWarm(nil) for a peer list with an unreadable item")
	}
	if snap, _, _ := h.store.Latest(); snap.Len() != 0 {
		t.Fatalf("store holds %d objects of the failed peer list, want the source's 0", snap.Len())
	}
}

// OnWarm counts each outcome under its result: a list read but not shown to
// be the source's (ErrWarmRejected, wrapped) apart from one that failed.
func TestWarmOutcomeMetric(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "ok", want: "ok"},
		{name: "failed", err: errors.New("HTTP 503"), want: "failed"},
		{name: "rejected", err: fmt.Errorf("list: %w: another cluster", ErrWarmRejected), want: "rejected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			m.For("pods", "json").OnWarm(tc.err)
			got := map[string]float64{}
			for _, result := range []string{"ok", "failed", "rejected"} {
				if v := testutil.ToFloat64(m.peerLists.WithLabelValues("pods", "json", result)); v != 0 {
					got[result] = v
				}
			}
			if diff := cmp.Diff(map[string]float64{tc.want: 1}, got); diff != "" {
				t.Errorf("peer lists by result (-want +got):\n%s", diff)
			}
		})
	}
}
