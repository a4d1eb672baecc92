package freshness

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// newTestTracker returns a Tracker with no watch, fed by the test through
// observeLocked and resetLocked.
func newTestTracker(c *Checker, fromRev int64) *Tracker {
	t := &Tracker{
		c:          c,
		prefix:     "/registry/pods/",
		cancel:     func() {},
		stopped:    make(chan struct{}),
		done:       make(chan struct{}),
		baseline:   fromRev,
		floor:      fromRev,
		progress:   fromRev,
		progressed: make(chan struct{}),
	}
	close(t.done)
	return t
}

func (t *Tracker) observe(revs []int64, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observeLocked(revs, rev)
}

func (t *Tracker) lastChange(rev int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastChangeLocked(rev)
}

func TestTrackerLastChange(t *testing.T) {
	type observation struct {
		changes  []int64
		progress int64
	}
	tests := []struct {
		name    string
		fromRev int64
		observe []observation
		reset   int64 // if > 0, resetLocked(reset) after observing
		want    map[int64]int64
	}{
		{
			name:    "nothing_changed_returns_baseline",
			fromRev: 10,
			observe: []observation{{progress: 20}},
			want:    map[int64]int64{10: 10, 15: 10, 20: 10},
		},
		{
			name:    "before_baseline_is_conservative",
			fromRev: 10,
			observe: []observation{{progress: 20}},
			want:    map[int64]int64{3: 3, 9: 9},
		},
		{
			name:    "last_change_at_or_before",
			fromRev: 10,
			observe: []observation{{changes: []int64{12}, progress: 12}, {changes: []int64{15, 15, 17}, progress: 17}, {progress: 30}},
			want:    map[int64]int64{11: 10, 12: 12, 13: 12, 14: 12, 15: 15, 16: 15, 17: 17, 30: 17},
		},
		{
			name:    "repeated_events_at_proved_revision_ignored",
			fromRev: 10,
			observe: []observation{{changes: []int64{10}, progress: 10}, {changes: []int64{14}, progress: 14}},
			want:    map[int64]int64{10: 10, 13: 10, 14: 14},
		},
		{
			name:    "reset_moves_baseline_and_forgets_history",
			fromRev: 10,
			observe: []observation{{changes: []int64{12}, progress: 12}},
			reset:   40,
			want:    map[int64]int64{12: 12, 39: 39, 40: 40},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestTracker(newChecker(Config{}), tc.fromRev)
			for _, o := range tc.observe {
				tr.observe(o.changes, o.progress)
			}
			if tc.reset > 0 {
				tr.mu.Lock()
				tr.resetLocked(tc.reset)
				tr.mu.Unlock()
				if got := tr.Baseline(); got != tc.reset {
					t.Errorf("Baseline() = %d, want %d", got, tc.reset)
				}
			}
			got := map[int64]int64{}
			for rev := range tc.want {
				got[rev] = tr.lastChange(rev)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("last change by revision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrackerForgetsOldChangesConservatively(t *testing.T) {
	tr := newTestTracker(newChecker(Config{}), 0)
	// Changes at 2, 4, ..., 2*(maxChanges+10).
	var revs []int64
	for i := int64(1); i <= maxChanges+10; i++ {
		revs = append(revs, 2*i)
	}
	tr.observe(revs, revs[len(revs)-1]+1)

	// The 10 oldest changes are forgotten; the newest forgotten (20)
	// becomes the floor.
	want := map[int64]int64{
		3:                     3,  // before the floor: conservative
		19:                    19, // likewise
		20:                    20,
		21:                    20,
		22:                    22,
		revs[len(revs)-1] + 1: revs[len(revs)-1],
	}
	got := map[int64]int64{}
	for rev := range want {
		got[rev] = tr.lastChange(rev)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("last change by revision (-want +got):\n%s", diff)
	}
	if n := len(tr.changes); n != maxChanges {
		t.Errorf("remembered %d changes, want %d", n, maxChanges)
	}
}

func TestLastChangeAtOrBeforeWaitsForProgress(t *testing.T) {
	c := newChecker(Config{})
	tr := newTestTracker(c, 10)

	type result struct {
		l   int64
		err error
	}
	out := make(chan result, 1)
	go func() {
		l, err := tr.LastChangeAtOrBefore(context.Background(), 15)
		out <- result{l, err}
	}()
	// The waiter registers with the progress requester.
	recv(t, c.progressWake, "progress requester wake-up")

	tr.observe([]int64{12}, 12) // not far enough
	empty(t, out, "answer before progress reached 15")
	tr.observe(nil, 16)
	if got := recv(t, out, "answer"); got != (result{l: 12}) {
		t.Errorf("got %+v, want L=12", got)
	}
	if c.waitingForProgress() {
		t.Error("waiter still registered after returning")
	}

	// Already proved: answers without waiting.
	if l, err := tr.LastChangeAtOrBefore(context.Background(), 16); l != 12 || err != nil {
		t.Errorf("LastChangeAtOrBefore(16) = %d, %v; want 12, nil", l, err)
	}
	empty(t, c.progressWake, "wake-up for an answer already proved")
}

func TestLastChangeAtOrBeforeEndsWithContextOrStop(t *testing.T) {
	c := newChecker(Config{})
	tr := newTestTracker(c, 10)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tr.LastChangeAtOrBefore(ctx, 20)
		errc <- err
	}()
	recv(t, c.progressWake, "progress requester wake-up")
	cancel()
	if err := recv(t, errc, "cancelled wait"); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}

	go func() {
		_, err := tr.LastChangeAtOrBefore(context.Background(), 20)
		errc <- err
	}()
	recv(t, c.progressWake, "progress requester wake-up")
	tr.Stop()
	if err := recv(t, errc, "stopped wait"); !errors.Is(err, ErrStopped) {
		t.Errorf("got %v, want ErrStopped", err)
	}
	if c.waitingForProgress() {
		t.Error("waiters still registered")
	}
}

// waitForTimer yields until the requester goroutine has armed a timer on
// the fake clock.
func waitForTimer(t *testing.T, fc *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !fc.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the requester to arm its timer")
		}
		runtime.Gosched()
	}
}

func TestProgressRequesterRequestsOnlyWhileWaitingAtMostOncePerInterval(t *testing.T) {
	const interval = 100 * time.Millisecond
	fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	c := newChecker(Config{Clock: fc, ProgressInterval: interval})
	requests := make(chan time.Time, 16)
	c.requestProgress = func(context.Context) error {
		requests <- fc.Now()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.runProgressRequester(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	// Nobody waits: nothing is requested, and no timer runs.
	if fc.HasWaiters() {
		t.Error("requester armed a timer with nobody waiting")
	}

	// A waiter arrives: the first request goes out at once.
	start := fc.Now()
	c.startWaiting()
	if at := recv(t, requests, "first request"); !at.Equal(start) {
		t.Errorf("first request at %v, want %v", at, start)
	}
	// A second waiter adds no request of its own.
	c.startWaiting()
	waitForTimer(t, fc)
	empty(t, requests, "request within the interval")
	fc.Step(interval - time.Nanosecond)
	empty(t, requests, "request within the interval")
	fc.Step(time.Nanosecond)
	if at := recv(t, requests, "second request"); !at.Equal(start.Add(interval)) {
		t.Errorf("second request at %v, want %v", at, start.Add(interval))
	}

	// Everyone leaves: the pending timer fires but sends nothing.
	c.doneWaiting()
	c.doneWaiting()
	waitForTimer(t, fc)
	fc.Step(interval)
	// A new waiter long after the last request is served at once, and it
	// is the only request since the waiters left.
	fc.Step(10 * interval)
	c.startWaiting()
	if at := recv(t, requests, "third request"); !at.Equal(start.Add(12 * interval)) {
		t.Errorf("third request at %v, want %v", at, start.Add(12*interval))
	}
	waitForTimer(t, fc)
	empty(t, requests, "extra request")
	c.doneWaiting()
	if got := testutil.ToFloat64(c.metrics.progressRequests); got != 3 {
		t.Errorf("progress_requests_total = %v, want 3", got)
	}
}
