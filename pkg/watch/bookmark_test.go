package watch

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// TestBookmarkNeverOvertakesEvents: a BOOKMARK at N promises the client
// every event up to N, as the watch cache's, whose bookmarks queue behind
// the events before them. Under concurrent writes no event may arrive after
// a bookmark at or past its resourceVersion, for periodic bookmarks and the
// one shortly before a watch's deadline, with and without selectors. A
// client resuming from such a bookmark would never see that event.
func TestBookmarkNeverOvertakesEvents(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline bool // the deadline bookmark (fake clock), else periodic ones
		selector string
	}{
		{name: "periodic"},
		{name: "periodic_selector", selector: "&labelSelector=app%3Da"},
		{name: "deadline", deadline: true},
		{name: "deadline_selector", deadline: true, selector: "&labelSelector=app%3Da"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 1 << 18})
			store.Replace([]*snapshot.Entry{widget("w0", 5, "a")}, 10)
			cfg := Config{BookmarkInterval: time.Millisecond}
			query := "?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=600" + tc.selector
			watchers, limit := 4, 3000
			var clk *testingclock.FakeClock
			if tc.deadline {
				// Periodic bookmarks never come; the deadline bookmark
				// comes 2s before the 3s deadline, for every watcher at
				// the same instant of the writes.
				clk = testingclock.NewFakeClock(time.Now())
				cfg = Config{BookmarkInterval: time.Hour, Clock: clk}
				query = "?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=3" + tc.selector
				watchers, limit = 40, -1
			}
			ts := serveWith(t, store, cfg)
			decoders := make([]*wire.WatchDecoder, watchers)
			for i := range decoders {
				decoders[i] = open(t, ts.URL+query)
				defer func(d *wire.WatchDecoder) { _ = d.Close() }(decoders[i])
			}

			// progress is each reader's newest bookmark, and whether it
			// stopped reading.
			progress := make([]readerProgress, watchers)
			stop := make(chan struct{})
			var writes sync.WaitGroup
			writes.Add(1)
			go func() {
				defer writes.Done()
				for rv := uint64(11); ; rv++ {
					select {
					case <-stop:
						return
					default:
					}
					app := "a"
					if rv%3 == 0 {
						app = "b" // transitions: ADDED and DELETED for the selector
					}
					store.Apply(snapshot.Change{Entry: widget(fmt.Sprintf("w%d", rv%7), rv, app)}, rv)
					if !tc.deadline && rv%500 == 0 {
						// A watcher bookmarks only once it has read every
						// change; under writes without a pause it may
						// never have. Every 500 writes, the writes wait
						// for each reader's bookmark at rv (a bookmark
						// timer firing while nothing is written).
						waitForBookmarks(progress, rv, stop)
					}
				}
			}()

			var (
				readers    sync.WaitGroup
				mu         sync.Mutex
				violations []string
				bookmarks  int
			)
			for i, d := range decoders {
				readers.Add(1)
				go func() {
					defer readers.Done()
					defer progress[i].done.Store(true)
					bad, n := checkBookmarkOrder(d, limit, &progress[i].bookmarkRV)
					mu.Lock()
					defer mu.Unlock()
					violations = append(violations, bad...)
					bookmarks += n
				}()
			}
			if tc.deadline {
				// Every watcher's deadline and bookmark timers are set.
				timersSet := func() {
					t.Helper()
					if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
						return clk.Waiters() == 2*watchers, nil
					}); err != nil {
						t.Fatalf("timers of %d watchers: %d, want %d", watchers, clk.Waiters(), 2*watchers)
					}
				}
				timersSet()
				// Writes are under way, so that every bookmark has a
				// resourceVersion past the watch's start to carry.
				if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
					return store.Progress() > 100, nil
				}); err != nil {
					t.Fatal("the writes did not start")
				}
				clk.Step(time.Second + time.Millisecond) // the deadline bookmarks
				timersSet()                              // each watcher handled its bookmark timer
				close(stop)
				writes.Wait()
				clk.Step(2 * time.Second) // the deadlines
				readers.Wait()
			} else {
				readers.Wait()
				close(stop)
				writes.Wait()
			}
			if bookmarks == 0 {
				t.Fatal("no bookmark was sent; the test proves nothing")
			}
			if len(violations) > 0 {
				t.Errorf("%d events arrived after a bookmark at or past their resourceVersion (of %d bookmarks), e.g. %s",
					len(violations), bookmarks, violations[0])
			}
		})
	}
}

// checkBookmarkOrder reads d until it ends or limit (< 0: no limit) events
// were read, and returns the events that arrived after a bookmark at or
// past their resourceVersion, and how many bookmarks arrived.
// readerProgress is what a reader of TestBookmarkNeverOvertakesEvents
// shows its writer.
type readerProgress struct {
	bookmarkRV atomic.Uint64
	done       atomic.Bool
}

// waitForBookmarks waits until every reader still reading has had a
// bookmark at rv or later, or stop is closed.
func waitForBookmarks(progress []readerProgress, rv uint64, stop <-chan struct{}) {
	for {
		caught := true
		for i := range progress {
			if !progress[i].done.Load() && progress[i].bookmarkRV.Load() < rv {
				caught = false
			}
		}
		if caught {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// checkBookmarkOrder reads limit events (every event with limit -1) and
// returns the events that came after a bookmark at or past their
// resourceVersion, and how many bookmarks came; bookmarkRV is the newest
// bookmark's, as it comes.
func checkBookmarkOrder(d *wire.WatchDecoder, limit int, bookmarkRVSeen *atomic.Uint64) (violations []string, bookmarks int) {
	var bookmarkRV uint64
	for i := 0; limit < 0 || i < limit; i++ {
		ev, err := d.Next()
		if err != nil {
			return violations, bookmarks
		}
		rv, err := strconv.ParseUint(ev.ResourceVersion, 10, 64)
		if err != nil {
			return append(violations, fmt.Sprintf("%s without a resourceVersion", ev.Type)), bookmarks
		}
		if ev.Type == wire.Bookmark {
			bookmarks++
			bookmarkRV = max(bookmarkRV, rv)
			bookmarkRVSeen.Store(bookmarkRV)
			continue
		}
		if rv <= bookmarkRV {
			violations = append(violations, fmt.Sprintf("%s at %d after a BOOKMARK at %d", ev.Type, rv, bookmarkRV))
		}
	}
	return violations, bookmarks
}

// TestStopMatchingDeletedCarriesPreviousState: an object that stops
// matching a watcher's selector is DELETED for it with its last state that
// matched, at the change's resourceVersion, as the watch cache's
// convertToWatchEvent sends it, not with the state that no longer matches.
func TestStopMatchingDeletedCarriesPreviousState(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serve(t, store, nil)
	d := open(t, ts.URL+"?watch=1&resourceVersion=10&labelSelector=app%3Da&timeoutSeconds=600")
	defer d.Close()

	store.Apply(snapshot.Change{Entry: widget("w1", 11, "b")}, 11)
	ev, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"labels":{"app":"a"},"name":"w1","namespace":"ns","resourceVersion":"11"}}`
	if ev.Type != wire.Deleted || string(ev.Object) != want {
		t.Errorf("got %s %s, want DELETED %s", ev.Type, ev.Object, want)
	}
}
