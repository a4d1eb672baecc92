package snapshot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeSource lists nothing at listRV and hands each watch it opens to the
// test through watches.
type fakeSource struct {
	listRV  string
	watches chan *fakeWatch

	mu sync.Mutex
	// hang is how many of the next watch requests never answer.
	hang int
}

func newFakeSource(listRV string) *fakeSource {
	return &fakeSource{listRV: listRV, watches: make(chan *fakeWatch, 16)}
}

func (s *fakeSource) List(context.Context, int64, string, func([]byte) error) (ListResult, error) {
	return ListResult{ResourceVersion: s.listRV}, nil
}

func (s *fakeSource) Watch(ctx context.Context, rv string) (Watch, error) {
	w := &fakeWatch{ctx: ctx, rv: rv, events: make(chan WatchEvent)}
	s.watches <- w
	s.mu.Lock()
	hang := s.hang > 0
	s.hang--
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return w, nil
}

// fakeWatch delivers what the test sends; like an HTTP body it fails once
// its request's context is done.
type fakeWatch struct {
	ctx    context.Context
	rv     string
	events chan WatchEvent
}

func (w *fakeWatch) Next() (WatchEvent, error) {
	select {
	case ev := <-w.events:
		return ev, nil
	case <-w.ctx.Done():
		return WatchEvent{}, fmt.Errorf("read watch body: %w", w.ctx.Err())
	}
}

func (w *fakeWatch) Close() error { return nil }

// send hands ev to the feeder's Next.
func (w *fakeWatch) send(t *testing.T, ev WatchEvent) {
	t.Helper()
	select {
	case w.events <- ev:
	case <-w.ctx.Done():
		t.Fatalf("watch from %s ended before event %s %s was read", w.rv, ev.Type, ev.ResourceVersion)
	case <-time.After(10 * time.Second):
		t.Fatalf("event %s %s not read within 10s", ev.Type, ev.ResourceVersion)
	}
}

// added is an ADDED event of object ns/name at rv; extractFake reads it.
func added(name string, rv uint64) WatchEvent {
	return WatchEvent{Type: Added, Object: []byte(fmt.Sprintf("ns/%s/%d", name, rv))}
}

func extractFake(raw []byte) (*Entry, error) {
	parts := strings.Split(string(raw), "/")
	if len(parts) != 3 {
		return nil, fmt.Errorf("bad fake object %q", raw)
	}
	rv, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return nil, err
	}
	return NewEntry(parts[0], parts[1], rv, nil, nil, nil, raw), nil
}

// feederHarness runs a feeder over a fakeSource and a fake clock and
// records what it reports.
type feederHarness struct {
	feeder   *Feeder
	store    *Store
	source   *fakeSource
	clock    *clocktesting.FakeClock
	restarts chan string

	mu       sync.Mutex
	watching []bool      // OnWatching calls, in order
	progress []time.Time // OnProgress calls, in order
	// broken is what Stalled answers; stallChecks counts its calls.
	broken      bool
	stallChecks int
}

func newFeederHarness(t *testing.T, stallTimeout time.Duration) *feederHarness {
	t.Helper()
	h := &feederHarness{
		store:    NewStore(StoreConfig{}),
		source:   newFakeSource("10"),
		clock:    clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)),
		restarts: make(chan string, 16),
	}
	h.feeder = NewFeeder(FeederConfig{
		Store: h.store, Source: h.source, Extract: extractFake, Clock: h.clock,
		StallTimeout: stallTimeout,
		Stalled: func(context.Context) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.stallChecks++
			return h.broken
		},
		Name:           t.Name(),
		OnWatchRestart: func(reason string) { h.restarts <- reason },
		OnWatching: func(open bool) {
			h.mu.Lock()
			h.watching = append(h.watching, open)
			h.mu.Unlock()
		},
		OnProgress: func(at time.Time) {
			h.mu.Lock()
			h.progress = append(h.progress, at)
			h.mu.Unlock()
		},
	})
	return h
}

// run runs the feeder until the test ends.
func (h *feederHarness) run(t *testing.T) *feederHarness {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.feeder.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

// nextWatch returns the next watch the feeder requests.
func (h *feederHarness) nextWatch(t *testing.T) *fakeWatch {
	t.Helper()
	select {
	case w := <-h.source.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no watch requested within 10s")
		return nil
	}
}

// nextRestart returns the reason of the next watch restart.
func (h *feederHarness) nextRestart(t *testing.T) string {
	t.Helper()
	select {
	case r := <-h.restarts:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no watch restart within 10s")
		return ""
	}
}

func (h *feederHarness) noRestart(t *testing.T) {
	t.Helper()
	select {
	case r := <-h.restarts:
		t.Fatalf("watch restarted (%s), want it kept", r)
	default:
	}
}

// eventually polls cond, an observable state of another goroutine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within 10s", what)
	}
}

func TestFeederAbandonsSilentWatch(t *testing.T) {
	const stall = time.Minute
	h := newFeederHarness(t, stall)
	h.broken = true
	h.run(t)
	w := h.nextWatch(t)
	if w.rv != "10" {
		t.Fatalf("first watch from %q, want the list's resourceVersion 10", w.rv)
	}
	w.send(t, added("a", 11))
	h.clock.Step(40 * time.Second)
	w.send(t, added("b", 12)) // the watch is 40s into its first 60s
	eventually(t, "store holds rv 12", func() bool { return h.store.Progress() == 12 })

	// The watchdog's first timer fires 20s after the last event: too
	// early to call the watch stalled, so it waits for the rest.
	h.clock.Step(20 * time.Second)
	eventually(t, "watchdog re-armed", func() bool { return h.clock.Waiters() == 1 })
	h.noRestart(t)
	if w.ctx.Err() != nil {
		t.Fatal("watch abandoned 20s after its last event")
	}

	h.clock.Step(40 * time.Second) // a full minute of silence
	if got := h.nextRestart(t); got != RestartStalled {
		t.Fatalf("restart reason %q, want %q", got, RestartStalled)
	}
	if w.ctx.Err() == nil {
		t.Error("the stalled watch's request was not cancelled")
	}
	w2 := h.nextWatch(t)
	if w2.rv != "12" {
		t.Errorf("re-established watch from %q, want the last event's resourceVersion 12", w2.rv)
	}
	// A bookmark is progress too.
	eventually(t, "new watchdog armed", func() bool { return h.clock.Waiters() == 1 })
	h.clock.Step(50 * time.Second)
	w2.send(t, WatchEvent{Type: Bookmark, ResourceVersion: "20"})
	eventually(t, "bookmark applied", func() bool { return h.store.Progress() == 20 })
	h.clock.Step(50 * time.Second)
	eventually(t, "watchdog re-armed after the bookmark", func() bool { return h.clock.Waiters() == 1 })
	h.noRestart(t)
}

func TestFeederAbandonsWatchRequestWithoutAnswer(t *testing.T) {
	const stall = time.Minute
	h := newFeederHarness(t, stall)
	h.source.hang = 1
	h.run(t)
	w := h.nextWatch(t)
	h.clock.Step(stall)
	if got := h.nextRestart(t); got != RestartStalled {
		t.Fatalf("restart reason %q, want %q", got, RestartStalled)
	}
	h.mu.Lock()
	if len(h.watching) != 0 {
		t.Errorf("OnWatching called %v for a watch that never opened", h.watching)
	}
	h.mu.Unlock()
	// Nothing arrived, so the feeder backs off before it asks again.
	eventually(t, "backoff timer", func() bool { return h.clock.Waiters() == 1 })
	h.clock.Step(time.Second)
	if w2 := h.nextWatch(t); w2.rv != w.rv {
		t.Errorf("watch re-requested from %q, want %q", w2.rv, w.rv)
	}
}

func TestFeederRestart(t *testing.T) {
	h := newFeederHarness(t, -1)
	if h.feeder.Watching() {
		t.Error("Watching() before any watch opened")
	}
	h.run(t)
	w := h.nextWatch(t)
	eventually(t, "watch open", h.feeder.Watching)
	if n := h.clock.Waiters(); n != 0 {
		t.Errorf("%d timers with stall detection off, want 0", n)
	}
	w.send(t, added("a", 11))
	eventually(t, "store holds rv 11", func() bool { return h.store.Progress() == 11 })

	id := h.feeder.WatchID()
	if h.feeder.Restart(id+1, RestartLagging) {
		t.Fatal("Restart() of another watch = true")
	}
	if !h.feeder.Restart(id, RestartLagging) {
		t.Fatal("Restart() = false with the watch open")
	}
	if got := h.nextRestart(t); got != RestartLagging {
		t.Fatalf("restart reason %q, want %q", got, RestartLagging)
	}
	w2 := h.nextWatch(t)
	if w2.rv != "11" {
		t.Errorf("re-established watch from %q, want 11", w2.rv)
	}
	eventually(t, "watch open again", h.feeder.Watching)
	if h.feeder.Restart(id, RestartLagging) {
		t.Error("Restart() of an ended watch = true")
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []bool{true, false, true}; fmt.Sprint(h.watching) != fmt.Sprint(want) {
		t.Errorf("OnWatching calls %v, want %v", h.watching, want)
	}
	// One after the list, one for the event.
	if len(h.progress) != 2 || !h.progress[1].Equal(h.clock.Now()) {
		t.Errorf("OnProgress calls %v, want 2 at %v", h.progress, h.clock.Now())
	}
}

func TestFeederRestartWithoutWatch(t *testing.T) {
	f := NewFeeder(FeederConfig{Store: NewStore(StoreConfig{}), Source: newFakeSource("1"), Extract: extractFake})
	if f.Restart(f.WatchID(), RestartLagging) {
		t.Error("Restart() = true with no watch open")
	}
	if f.Watching() {
		t.Error("Watching() = true before Run")
	}
}

// A watch that is merely quiet (no events, and no bookmarks: resources
// without a watch cache get none) is kept however long it stays silent,
// unless Stalled finds it broken.
func TestFeederKeepsQuietWatch(t *testing.T) {
	tests := []struct {
		name      string
		noStalled bool // FeederConfig.Stalled is nil
	}{
		{name: "stalled_says_quiet"},
		{name: "no_stalled_check", noStalled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const stall = time.Minute
			h := newFeederHarness(t, stall)
			if tc.noStalled {
				h.feeder.cfg.Stalled = nil
			}
			h.run(t)
			w := h.nextWatch(t)
			eventually(t, "watch open", h.feeder.Watching)
			for i := range 10 {
				eventually(t, "watchdog armed", func() bool { return h.clock.Waiters() == 1 })
				h.clock.Step(stall)
				if !tc.noStalled {
					eventually(t, "stall check", func() bool {
						h.mu.Lock()
						defer h.mu.Unlock()
						return h.stallChecks == i+1
					})
				}
			}
			eventually(t, "watchdog re-armed", func() bool { return h.clock.Waiters() == 1 })
			h.noRestart(t)
			if w.ctx.Err() != nil {
				t.Fatal("a quiet watch was abandoned")
			}
			// Once the check calls it broken, it goes.
			if !tc.noStalled {
				h.mu.Lock()
				h.broken = true
				h.mu.Unlock()
				h.clock.Step(stall)
				if got := h.nextRestart(t); got != RestartStalled {
					t.Errorf("restart reason %q, want %q", got, RestartStalled)
				}
			}
		})
	}
}
