package freshness

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// maxChanges bounds the change revisions a Tracker remembers. Callers ask
// about revisions probed moments ago, so only recent changes matter; when
// older ones are forgotten, answers for revisions before them become
// conservative (the revision itself), never wrong. Not yet measured.
const maxChanges = 4096

// Restart backoff after a watch error. Not yet measured.
const (
	minRestartBackoff = 100 * time.Millisecond
	maxRestartBackoff = 5 * time.Second
)

// Tracker follows the change revisions under one etcd key prefix. It is
// safe for concurrent use.
type Tracker struct {
	c      *Checker
	prefix string
	cancel context.CancelFunc
	// stopped is closed by Stop; done is closed when the watch loop has ended.
	stopped  chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// mu guards the fields below.
	mu sync.Mutex
	// baseline is the revision the caller's snapshot must reach at least
	// once: fromRev, or the current revision after history was lost to a
	// compaction.
	baseline int64
	// floor is the oldest revision answers are exact from: for rev >= floor
	// the last change <= rev is the largest of changes <= rev, or floor
	// itself. It is baseline, or a forgotten change revision (maxChanges).
	floor int64
	// changes holds revisions > floor at which something under prefix
	// changed, ascending, all <= progress.
	changes []int64
	// progress is the revision the watch has been proved complete through.
	progress int64
	// progressed is closed, and replaced, whenever progress advances.
	progressed chan struct{}
}

// Track starts tracking changes under the etcd key prefix (for example
// "/registry/pods/") after fromRev, the revision the caller's snapshot
// already covers: every change after fromRev will be observed. Call Stop
// when done.
//
// If fromRev is compacted (or fromRev <= 0), the tracker starts from etcd's
// current revision instead and reports it as the Baseline: the caller's
// snapshot must reach it once, as nothing is known about the changes before
// it. A broken watch is re-established from the last revision it proved; if
// that was compacted in the meantime, the baseline moves forward likewise.
func (c *Checker) Track(prefix string, fromRev int64) *Tracker {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tracker{
		c:          c,
		prefix:     prefix,
		cancel:     cancel,
		stopped:    make(chan struct{}),
		done:       make(chan struct{}),
		baseline:   fromRev,
		floor:      fromRev,
		progress:   fromRev,
		progressed: make(chan struct{}),
	}
	go t.run(ctx)
	return t
}

// sharedTracker is a Tracker with the number of its users.
type sharedTracker struct {
	t    *Tracker
	refs int
}

// TrackShared returns the running Tracker of prefix, or starts one after
// fromRev (as Track), for the stores of one resource (its representations)
// to share: one etcd watch per prefix. Any of them serves any store of the
// prefix: the L it returns is at least its baseline, which a store behind
// it then waits for. Call release when done; the last release stops the
// tracker.
func (c *Checker) TrackShared(prefix string, fromRev int64) (t *Tracker, release func()) {
	c.trackersMu.Lock()
	st := c.trackers[prefix]
	if st == nil {
		st = &sharedTracker{t: c.Track(prefix, fromRev)}
		c.trackers[prefix] = st
	}
	st.refs++
	c.trackersMu.Unlock()

	var once sync.Once
	return st.t, func() {
		once.Do(func() {
			c.trackersMu.Lock()
			st.refs--
			last := st.refs == 0
			if last {
				delete(c.trackers, prefix)
			}
			c.trackersMu.Unlock()
			if last {
				st.t.Stop()
			}
		})
	}
}

// Stop stops the tracker's watch and waits for it to end. Pending and later
// LastChangeAtOrBefore calls that would wait fail with ErrStopped. Stop is
// idempotent.
func (t *Tracker) Stop() {
	t.stopOnce.Do(func() {
		close(t.stopped)
		t.cancel()
	})
	<-t.done
}

// Prefix returns the tracked key prefix.
func (t *Tracker) Prefix() string { return t.prefix }

// Baseline returns the tracker's current baseline: fromRev, or the later
// revision it restarted from after the history it needed was compacted. The
// caller's snapshot must reach the baseline once; LastChangeAtOrBefore
// already accounts for it.
func (t *Tracker) Baseline() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.baseline
}

// LastChangeAtOrBefore waits until the tracker's watch has proved progress
// through rev (an event at or after rev, or a progress notification with a
// header revision >= rev), then returns L: the largest revision <= rev at
// which something under the prefix changed, or the baseline when nothing has
// changed since it. A snapshot whose resourceVersion is >= L holds the
// prefix's state as of rev.
//
// L may exceed the true last change but never rev: when the answer for rev
// is not known exactly (rev precedes the baseline or the remembered
// history), L is rev itself.
//
// While it waits, the Checker requests progress from etcd (see Run), so a
// quiet prefix answers within about ProgressInterval plus a round trip. It
// returns an error wrapping ctx.Err() when ctx ends first, and ErrStopped if
// the tracker is stopped.
func (t *Tracker) LastChangeAtOrBefore(ctx context.Context, rev int64) (int64, error) {
	waiting := false
	defer func() {
		if waiting {
			t.c.doneWaiting()
		}
	}()
	for {
		t.mu.Lock()
		if t.progress >= rev {
			l := t.lastChangeLocked(rev)
			t.mu.Unlock()
			return l, nil
		}
		progressed := t.progressed
		t.mu.Unlock()

		if !waiting {
			waiting = true
			t.c.startWaiting()
		}
		select {
		case <-progressed:
		case <-t.stopped:
			return 0, fmt.Errorf("wait for %q to reach revision %d: %w", t.prefix, rev, ErrStopped)
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for %q to reach revision %d: %w", t.prefix, rev, ctx.Err())
		}
	}
}

// lastChangeLocked returns L for rev <= t.progress.
func (t *Tracker) lastChangeLocked(rev int64) int64 {
	if rev < t.floor {
		return rev
	}
	i := sort.Search(len(t.changes), func(i int) bool { return t.changes[i] > rev })
	if i == 0 {
		return t.floor
	}
	return t.changes[i-1]
}

// observeLocked records changes at the revisions in revs (ascending) and
// progress through rev, waking waiters if progress advanced.
func (t *Tracker) observeLocked(revs []int64, rev int64) {
	for _, r := range revs {
		if r <= t.progress {
			// The watch starts at the revision it has proved, so it may
			// repeat events at that revision; they are already accounted.
			continue
		}
		if n := len(t.changes); n > 0 && t.changes[n-1] >= r {
			continue // several keys changed in one revision
		}
		t.changes = append(t.changes, r)
	}
	if over := len(t.changes) - maxChanges; over > 0 {
		t.floor = t.changes[over-1]
		t.changes = append(t.changes[:0], t.changes[over:]...)
	}
	if rev > t.progress {
		t.progress = rev
		close(t.progressed)
		t.progressed = make(chan struct{})
	}
}

// resetLocked forgets all history and restarts knowledge at rev, the new
// baseline.
func (t *Tracker) resetLocked(rev int64) {
	t.baseline, t.floor, t.changes = rev, rev, nil
	if rev > t.progress {
		t.progress = rev
		close(t.progressed)
		t.progressed = make(chan struct{})
	}
}

// run watches the prefix until ctx ends, re-establishing the watch when it
// breaks.
func (t *Tracker) run(ctx context.Context) {
	defer close(t.done)
	ctx = streamContext(ctx)
	backoff := minRestartBackoff

	t.mu.Lock()
	start := t.progress
	t.mu.Unlock()
	needReset := start <= 0
	for {
		if needReset {
			pctx, cancel := context.WithTimeout(ctx, resetProbeTimeout)
			rev, err := t.c.probe(pctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				klog.ErrorS(err, "Reading current revision to restart tracker failed", "prefix", t.prefix)
				if !t.sleep(ctx, &backoff) {
					return
				}
				continue
			}
			t.mu.Lock()
			t.resetLocked(rev)
			start = t.progress
			t.mu.Unlock()
			klog.V(2).InfoS("Tracker baseline moved", "prefix", t.prefix, "baseline", rev)
			needReset = false
		}

		reason, compactRev := t.watch(ctx, start)
		if ctx.Err() != nil {
			return
		}
		t.c.metrics.watchRestarts.WithLabelValues(reason).Inc()

		t.mu.Lock()
		proved := t.progress
		t.mu.Unlock()
		if proved > start {
			backoff = minRestartBackoff // the watch was healthy for a while
		}
		switch {
		case reason != restartCompacted:
			klog.V(2).InfoS("Tracker watch ended; restarting", "prefix", t.prefix, "reason", reason, "revision", proved)
			start = proved
			if !t.sleep(ctx, &backoff) {
				return
			}
		case compactRev <= proved+1:
			// Only the already-proved revision itself is compacted: resume
			// right after it, losing nothing.
			t.c.noteCompacted(compactRev)
			start = proved + 1
		default:
			t.c.noteCompacted(compactRev)
			klog.InfoS("Tracker history compacted; moving baseline to the current revision", "prefix", t.prefix, "revision", proved, "compactedRevision", compactRev)
			needReset = true
		}
	}
}

// watch watches the prefix from revision start until the watch breaks,
// recording what it proves. It returns the restart reason and, for
// restartCompacted, the compacted revision.
//
// The watch starts at the proved revision, not after it: etcd drops
// RequestProgress on a stream while any of its watchers starts in the future
// (after the current revision), which a watch from proved+1 on an idle etcd
// would.
func (t *Tracker) watch(ctx context.Context, start int64) (reason string, compactRev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := t.c.client.Watch(wctx, t.prefix,
		clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithProgressNotify())
	var revs []int64
	for resp := range wch {
		switch {
		case resp.CompactRevision != 0:
			return restartCompacted, resp.CompactRevision
		case resp.Err() != nil:
			klog.V(2).InfoS("Tracker watch cancelled", "prefix", t.prefix, "err", resp.Err())
			return restartError, 0
		case resp.IsProgressNotify():
			// Every event up to the header revision has been delivered.
			t.mu.Lock()
			t.observeLocked(nil, resp.Header.Revision)
			t.mu.Unlock()
		case len(resp.Events) > 0:
			// Only the events' revisions prove progress: the header
			// revision of a catching-up watcher's batch may run ahead of the
			// events it holds.
			revs = revs[:0]
			for _, ev := range resp.Events {
				revs = append(revs, ev.Kv.ModRevision)
			}
			t.mu.Lock()
			t.observeLocked(revs, revs[len(revs)-1])
			t.mu.Unlock()
		}
	}
	return restartClosed, 0
}

// sleep waits for *backoff (then doubles it, up to maxRestartBackoff) and
// reports whether ctx is still live.
func (t *Tracker) sleep(ctx context.Context, backoff *time.Duration) bool {
	timer := t.c.clock.NewTimer(*backoff)
	defer timer.Stop()
	*backoff = min(2**backoff, maxRestartBackoff)
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		return false
	}
}
