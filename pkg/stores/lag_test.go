package stores

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// lagSource lists nothing at resourceVersion 10 and opens watches that
// deliver nothing, reporting each on opened.
type lagSource struct{ opened chan string }

func (s lagSource) List(context.Context, int64, string, func([]byte) error) (snapshot.ListResult, error) {
	return snapshot.ListResult{ResourceVersion: "10"}, nil
}

func (s lagSource) Watch(ctx context.Context, rv string) (snapshot.Watch, error) {
	s.opened <- rv
	return silentWatch{ctx}, nil
}

type silentWatch struct{ ctx context.Context }

func (w silentWatch) Next() (snapshot.WatchEvent, error) {
	<-w.ctx.Done()
	return snapshot.WatchEvent{}, w.ctx.Err()
}

func (silentWatch) Close() error { return nil }

func TestCheckLag(t *testing.T) {
	tests := []struct {
		name        string
		lagTimeout  time.Duration
		rv          uint64 // the revision etcd proved
		catchUp     bool   // the store reaches the proven revision in time
		wantRestart bool
		wantNoCheck bool // rv is no proof: no check starts
	}{
		{name: "store_stays_behind_restarts_watch", lagTimeout: 50 * time.Millisecond, rv: 20, wantRestart: true},
		// Far longer than the test may take: the check must end because
		// the store caught up, however slowly the test runs.
		{name: "store_catches_up_keeps_watch", lagTimeout: time.Hour, rv: 20, catchUp: true},
		// etcd's revisions are int64: anything larger is a caller's
		// resourceVersion, no proof, and never restarts a watch.
		{name: "beyond_etcd_revisions_keeps_watch", lagTimeout: 50 * time.Millisecond, rv: 1 << 63, wantNoCheck: true},
		{name: "max_uint64_keeps_watch", lagTimeout: 50 * time.Millisecond, rv: math.MaxUint64, wantNoCheck: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			store := snapshot.NewStore(snapshot.StoreConfig{})
			src := lagSource{opened: make(chan string, 4)}
			restarts := make(chan string, 4)
			feeder := snapshot.NewFeeder(snapshot.FeederConfig{
				Store: store, Source: src, Extract: func([]byte) (*snapshot.Entry, error) { return nil, errors.New("no items") },
				StallTimeout: -1, OnWatchRestart: func(r string) { restarts <- r },
			})
			done := make(chan struct{})
			go func() {
				defer close(done)
				feeder.Run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()
			<-src.opened
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return feeder.Watching(), nil
			}); err != nil {
				t.Fatal("watch never opened")
			}

			reg := &Registry{cfg: Config{WatchLagTimeout: tc.lagTimeout}}
			entry := &storeEntry{store: store, feeder: feeder, info: &catalog.Resource{GVR: podsGVR}, ctx: ctx}
			reg.checkLag(entry, tc.rv, time.Now())
			if tc.wantNoCheck {
				if entry.lagCheck.Load() {
					t.Errorf("lag check started for revision %d", tc.rv)
				}
				return
			}
			reg.checkLag(entry, tc.rv, time.Now()) // one check at a time
			if tc.catchUp {
				store.MarkProgress(tc.rv)
			}
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return !entry.lagCheck.Load(), nil
			}); err != nil {
				t.Fatal("lag check never ended")
			}
			// Restart only asks the feeder to re-establish the watch; the
			// feeder reports it from its own goroutine, later.
			if tc.wantRestart {
				select {
				case got := <-restarts:
					if got != snapshot.RestartLagging {
						t.Errorf("watch restarted for %q, want %q", got, snapshot.RestartLagging)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("watch never restarted")
				}
			}
			// The check has ended, so nothing else can ask for a restart.
			if len(restarts) != 0 {
				t.Errorf("watch restarted again for %q; want one check to restart it at most once", <-restarts)
			}
		})
	}
}

// A feeder without an open watch is already reconnecting: nothing to check.
func TestCheckLagWithoutWatch(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	feeder := snapshot.NewFeeder(snapshot.FeederConfig{Store: store, Source: lagSource{}})
	reg := &Registry{cfg: Config{WatchLagTimeout: time.Millisecond}}
	entry := &storeEntry{store: store, feeder: feeder, ctx: context.Background()}
	reg.checkLag(entry, 20, time.Now())
	if entry.lagCheck.Load() {
		t.Error("lag check started for a feeder with no open watch")
	}
}

// Without etcd nothing shows that a silent watch misses anything: it is
// quiet, not stalled, and is kept.
func TestWatchStalledWithoutEtcd(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(nil, 10)
	reg := &Registry{}
	entry := &storeEntry{store: store, info: &catalog.Resource{GVR: podsGVR}, ctx: context.Background()}
	if reg.watchStalled(context.Background(), entry) {
		t.Error("watchStalled without etcd = true, want false")
	}
}
