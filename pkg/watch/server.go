package watch

import (
	"compress/gzip"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Defaults of Config.
const (
	// DefaultMinRequestTimeout is the apiserver's --min-request-timeout: a
	// watch without timeoutSeconds ends after a random time in [1x, 2x).
	DefaultMinRequestTimeout = 1800 * time.Second
	// DefaultBookmarkInterval is the watch cache's defaultBookmarkFrequency.
	DefaultBookmarkInterval = time.Minute
	// DefaultWriteTimeout bounds writing one burst of events to a watcher.
	// Not measured: long enough for a busy client, short enough that a
	// stalled one does not hold its connection and goroutine for long.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultNotOlderThanWait is the watch cache's blockTimeout: how long a
	// watch-list from resourceVersion N waits for the store to reach N
	// before passing through.
	DefaultNotOlderThanWait = 3 * time.Second
	// deadlineBookmarkLead: the watch cache sends a bookmark this long
	// before a watch's deadline, so that the client resumes from it.
	deadlineBookmarkLead = 2 * time.Second
	// burstBytes bounds the bytes gathered before a write.
	burstBytes = 256 << 10
	// keepBufBytes: a watcher keeps its buffer between bursts only up to
	// this size, so that an idle watcher holds little memory.
	keepBufBytes = 16 << 10
	// readBatch is how many changes a watcher takes from the feed at once.
	readBatch = 64
)

// Config configures a Server.
type Config struct {
	// MinRequestTimeout: a watch without timeoutSeconds ends after a random
	// time in [MinRequestTimeout, 2*MinRequestTimeout). 0 selects
	// DefaultMinRequestTimeout.
	MinRequestTimeout time.Duration
	// BookmarkInterval is how often a watch that allows bookmarks gets one
	// when the store's resourceVersion moved; 0 selects
	// DefaultBookmarkInterval.
	BookmarkInterval time.Duration
	// WriteTimeout ends a watcher that does not accept a burst of events in
	// this long; 0 selects DefaultWriteTimeout.
	WriteTimeout time.Duration
	// NotOlderThanWait bounds waiting for a store to reach a requested
	// resourceVersion; 0 selects DefaultNotOlderThanWait.
	NotOlderThanWait time.Duration
	// Metrics records watches; nil records nothing.
	Metrics *Metrics
	// Clock drives deadlines and bookmarks; nil selects the real clock.
	Clock clock.WithTicker
}

// Target is the store and scope of one cacheable watch, resolved (and
// authorized) by the edge.
type Target struct {
	// Resource names the resource in metrics (group/resource).
	Resource string
	Format   wire.Format
	Type     wire.ObjectType
	Store    *snapshot.Store
	// Namespace restricts the watch to one namespace; "" watches all.
	Namespace string
	// Match selects objects (labels and fields); nil selects all.
	Match func(*snapshot.Entry) bool
	// WatchListDefaults: the apiserver turns a watch from resourceVersion
	// "" or "0" without sendInitialEvents into a watch-list (its WatchList
	// feature is on). Where it does not, such a watch has the older
	// semantics (initial events with no end bookmark) and passes through.
	WatchListDefaults bool
	// WatchListGzip: the apiserver gzips a watch-list's response for a
	// client that accepts gzip (its WatchListCompression feature, on from
	// 1.37): one gzip member per flush, Content-Encoding gzip and
	// Vary Accept-Encoding. listproxy then does the same.
	WatchListGzip bool
	// Consistent proves a consistent read: the snapshot holding every
	// change up to the returned resourceVersion. ok false passes the watch
	// through. Required for InitialConsistent.
	Consistent func(ctx context.Context) (snap *snapshot.Snapshot, rv uint64, ok bool)
}

// Server serves watches from snapshot stores.
type Server struct {
	cfg Config
}

// NewServer returns a Server.
func NewServer(cfg Config) *Server {
	if cfg.MinRequestTimeout <= 0 {
		cfg.MinRequestTimeout = DefaultMinRequestTimeout
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = DefaultBookmarkInterval
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.NotOlderThanWait <= 0 {
		cfg.NotOlderThanWait = DefaultNotOlderThanWait
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Server{cfg: cfg}
}

// PassedThrough counts a watch of resource ("" when unknown) that passed
// through for reason.
func (s *Server) PassedThrough(resource, reason string) {
	s.cfg.Metrics.passedThrough(resource, reason)
}

// Serve answers r, a watch decided by Decide (not PassThrough), from t. It
// returns false, having written nothing, when the request must pass
// through; reason says why (a metric label). Once it wrote the response
// head it streams until the deadline, the client leaves, r's context ends,
// the watcher falls too far behind, or the store breaks continuity; the
// response then simply ends, as the apiserver's does.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request, d Decision, t Target) (bool, string) {
	ctx := r.Context()
	if d.Defaulted && !t.WatchListDefaults {
		return false, "legacy_initial_events"
	}
	// A type whose bookmark cannot be built passes through up front.
	if _, err := wire.BookmarkItem(t.Format, t.Type, "1", true); err != nil {
		return false, "unsupported_type"
	}
	var (
		snap *snapshot.Snapshot
		rv   uint64
		err  error
	)
	switch d.Action {
	case InitialConsistent:
		var ok bool
		if t.Consistent == nil {
			return false, "no_consistent_read"
		}
		if snap, rv, ok = t.Consistent(ctx); !ok {
			return false, "consistent_unproven"
		}
	case InitialLatest:
		if snap, rv, err = t.Store.Latest(); err != nil {
			return false, "not_synced"
		}
	case InitialNotOlderThan:
		wctx, cancel := context.WithTimeout(ctx, s.cfg.NotOlderThanWait)
		snap, rv, err = t.Store.WaitFor(wctx, d.RV)
		cancel()
		if err != nil {
			return false, "not_older_than_timeout"
		}
	case From:
		// The store must have seen every change up to d.RV; a later RV
		// (from another replica or the apiserver) is the apiserver's.
		if !t.Store.Synced() || d.RV > t.Store.Progress() {
			return false, "resource_version_ahead"
		}
		rv = d.RV
	default:
		return false, "pass_through"
	}
	cursor, err := t.Store.Subscribe(rv)
	if err != nil {
		// Older than the store's history of changes, or the store relisted
		// since the snapshot was taken.
		return false, "not_retained"
	}

	wr := newWriter(w, t.Format, t.Type, s.cfg.WriteTimeout, s.cfg.Clock)
	gzipped := t.WatchListGzip && d.Action != From && acceptsGzip(r)
	if gzipped {
		wr.gz = gzip.NewWriter(nil)
	}
	labels := []string{t.Resource, t.Format.String()}
	m := s.cfg.Metrics
	m.started(labels, d.Reason)
	defer m.stopped(labels)

	h := w.Header()
	h.Set("Content-Type", t.Format.WatchContentType())
	h.Set("Cache-Control", "no-cache, private")
	h.Set("Transfer-Encoding", "chunked")
	if gzipped {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
	}
	w.WriteHeader(http.StatusOK)
	_ = wr.flush() // a failed flush shows in the next write

	w2 := &watcher{
		srv: s, t: t, d: d, wr: wr, cursor: cursor, lastRV: rv, labels: labels, metrics: m,
	}
	reason := ""
	if snap != nil {
		if err := w2.sendInitial(snap, rv); err != nil {
			reason = w2.endReason(ctx, err)
		}
	}
	if reason == "" {
		reason = w2.stream(ctx)
	}
	wr.close(reason == EndTooSlow || wr.err != nil)
	m.ended(labels, reason)
	return true, d.Reason
}

// watcher is one served watch.
type watcher struct {
	srv    *Server
	t      Target
	d      Decision
	wr     *writer
	cursor *snapshot.Cursor
	// lastRV is the resourceVersion the client has: the last event or
	// bookmark sent.
	lastRV  uint64
	labels  []string
	metrics *Metrics
}

// endError marks the end of a stream for a reason already decided.
type endError struct{ reason string }

func (e *endError) Error() string { return "watch ended: " + e.reason }

// sendInitial writes one ADDED event per matching object of snap in key
// order, then (with bookmarks) the BOOKMARK ending the initial events.
func (w *watcher) sendInitial(snap *snapshot.Snapshot, rv uint64) error {
	page := snap.Page(snapshot.PageRequest{Namespace: w.t.Namespace, Match: w.t.Match})
	// One burst buffer serves all the initial events, rather than one
	// grown and dropped per burst: a watch-list of a large resource would
	// otherwise allocate its whole size again, and the garbage collector
	// (listproxy runs with a low GOGC) would mark the stores for it.
	w.wr.keep = true
	defer w.wr.release()
	if cap(w.wr.buf) < burstBytes {
		w.wr.buf = make([]byte, 0, burstBytes+burstBytes/4)
	}
	var sent, added int
	for _, e := range page.Items {
		w.wr.event(wire.Added, e.Raw)
		added++
		if len(w.wr.buf) >= burstBytes {
			sent += len(w.wr.buf)
			w.metrics.eventN(w.labels, wire.Added, added)
			added = 0
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	w.metrics.eventN(w.labels, wire.Added, added)
	if w.d.Bookmarks {
		if err := w.bookmark(rv, true); err != nil {
			return err
		}
	}
	sent += len(w.wr.buf)
	w.metrics.initial(w.labels, sent)
	return w.flush()
}

// bookmark queues a BOOKMARK at rv.
func (w *watcher) bookmark(rv uint64, initialEventsEnd bool) error {
	item, err := wire.BookmarkItem(w.t.Format, w.t.Type, strconv.FormatUint(rv, 10), initialEventsEnd)
	if err != nil {
		return err // unreachable: checked before the response started
	}
	w.wr.event(wire.Bookmark, item)
	w.metrics.event(w.labels, wire.Bookmark)
	w.lastRV = max(w.lastRV, rv)
	return nil
}

func (w *watcher) flush() error {
	n := len(w.wr.buf)
	if err := w.wr.flush(); err != nil {
		return err
	}
	w.metrics.sent(w.labels, n)
	return nil
}

// stream sends the store's changes until the watch ends, and returns why.
func (w *watcher) stream(ctx context.Context) string {
	clk := w.srv.cfg.Clock
	timeout := w.d.Timeout
	if timeout == 0 {
		timeout = time.Duration(float64(w.srv.cfg.MinRequestTimeout) * (1 + rand.Float64()))
	}
	deadline := clk.Now().Add(timeout)
	end := clk.NewTimer(timeout)
	defer end.Stop()
	// Bookmarks come every BookmarkInterval, and shortly before the deadline.
	nextBookmark := func() time.Duration {
		now := clk.Now()
		at := now.Add(w.srv.cfg.BookmarkInterval)
		if lead := deadline.Add(-deadlineBookmarkLead); lead.Before(at) && lead.After(now) {
			at = lead
		}
		return at.Sub(now)
	}
	var bookmarkC <-chan time.Time
	var bt clock.Timer
	if w.d.Bookmarks {
		bt = clk.NewTimer(nextBookmark())
		bookmarkC = bt.C()
		defer func() { bt.Stop() }()
	}
	buf := make([]snapshot.Event, 0, readBatch)
	for {
		changed := w.t.Store.Changed()
		var err error
		buf, err = w.cursor.Read(buf[:0])
		switch {
		case errors.Is(err, snapshot.ErrFeedReset):
			return EndStoreReset
		case errors.Is(err, snapshot.ErrFeedOverrun):
			return EndTooSlow
		}
		if len(buf) > 0 {
			for i := range buf {
				w.change(&buf[i])
				buf[i] = snapshot.Event{} // release the entries
			}
			if err := w.flush(); err != nil {
				return w.endReason(ctx, err)
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return w.endReason(ctx, ctx.Err())
		case <-end.C():
			return EndTimeout
		case <-bookmarkC:
			// Only when the resourceVersion moved, as the watch cache.
			if rv := w.t.Store.Progress(); rv > w.lastRV {
				_ = w.bookmark(rv, false)
				if err := w.flush(); err != nil {
					return w.endReason(ctx, err)
				}
			}
			bt = clk.NewTimer(nextBookmark())
			bookmarkC = bt.C()
		}
	}
}

// change queues the event one change means to this watcher, as the watch
// cache's cacheWatcher.convertToWatchEvent decides it: an object that starts
// matching is ADDED, one that stops matching is DELETED (its previous state
// at the change's resourceVersion), one that keeps matching is MODIFIED.
func (w *watcher) change(ev *snapshot.Event) {
	cur := ev.Type != snapshot.Deleted && w.matches(ev.Object)
	old := ev.Prev != nil && w.matches(ev.Prev)
	var item []byte
	var typ wire.EventType
	switch {
	case cur && !old:
		typ, item = wire.Added, ev.Object.Raw
	case cur && old:
		typ, item = wire.Modified, ev.Object.Raw
	case !cur && old:
		typ = wire.Deleted
		if ev.Type == snapshot.Deleted {
			// The apiserver's DELETED object: the last state at the
			// deletion's resourceVersion.
			item = ev.Object.Raw
		} else {
			var err error
			item, err = wire.SetResourceVersion(w.t.Format, ev.Prev.Raw, strconv.FormatUint(ev.RV, 10))
			if err != nil {
				klog.ErrorS(err, "Cannot rewrite resourceVersion; sending the previous object as stored", "resource", w.t.Resource)
				item = ev.Prev.Raw
			}
		}
	default:
		w.lastRV = max(w.lastRV, ev.RV)
		return
	}
	w.wr.event(typ, item)
	w.metrics.event(w.labels, typ)
	w.metrics.fanout(w.labels, w.srv.cfg.Clock.Since(ev.At))
	w.lastRV = max(w.lastRV, ev.RV)
}

func (w *watcher) matches(e *snapshot.Entry) bool {
	if w.t.Namespace != "" && e.Namespace != w.t.Namespace {
		return false
	}
	return w.t.Match == nil || w.t.Match(e)
}

// endReason classifies why writing or waiting stopped.
func (w *watcher) endReason(ctx context.Context, err error) string {
	var end *endError
	switch {
	case errors.As(err, &end):
		return end.reason
	case errors.Is(err, os.ErrDeadlineExceeded):
		return EndTooSlow
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.Canceled):
		return EndShutdown
	}
	return EndClientGone
}

// writer gathers a burst of frames and writes it with a deadline.
type writer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	format  wire.Format
	typ     wire.ObjectType
	timeout time.Duration
	clock   clock.PassiveClock
	buf     []byte
	// gz, when set, compresses each flushed burst as one gzip member.
	gz *gzip.Writer
	// keep: the buffer is kept whatever its size (while sending initial
	// events); release ends that.
	keep bool
	// err is the first write or flush error.
	err error
}

func newWriter(w http.ResponseWriter, f wire.Format, typ wire.ObjectType, timeout time.Duration, clk clock.PassiveClock) *writer {
	return &writer{w: w, rc: http.NewResponseController(w), format: f, typ: typ, timeout: timeout, clock: clk}
}

func (w *writer) event(t wire.EventType, item []byte) {
	w.buf = wire.AppendWatchEvent(w.buf, w.format, t, w.typ, item)
}

// release stops keeping a large buffer between bursts; an empty one is
// dropped at once.
func (w *writer) release() {
	w.keep = false
	if len(w.buf) == 0 && cap(w.buf) > keepBufBytes {
		w.buf = nil
	}
}

// flush writes the gathered frames and flushes them to the client.
func (w *writer) flush() error {
	// Deadlines use the real time: they bound the socket, not the watch.
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout)) // unsupported: no bound
	var err error
	switch {
	case len(w.buf) == 0:
	case w.gz != nil:
		w.gz.Reset(w.w)
		// Flush before Close, as the apiserver does: a reader gets the
		// frames before the member's end, at which it waits for the next.
		if _, err = w.gz.Write(w.buf); err == nil {
			if err = w.gz.Flush(); err == nil {
				err = w.gz.Close()
			}
		}
	default:
		_, err = w.w.Write(w.buf)
	}
	if cap(w.buf) > keepBufBytes && !w.keep {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	if err == nil {
		err = w.rc.Flush()
	}
	if err != nil && w.err == nil {
		w.err = err
	}
	return err
}

// close ends the response. A watcher that kept up gets its write deadline
// cleared, so that it cannot cut a later response on the same connection;
// one that did not (stalled) gets a deadline already past, so that the end
// of the response cannot block and its connection is closed.
func (w *writer) close(stalled bool) {
	if stalled {
		_ = w.rc.SetWriteDeadline(time.Now())
		return
	}
	_ = w.rc.SetWriteDeadline(time.Time{})
}

// acceptsGzip reports whether r's Accept-Encoding names gzip, read as the
// apiserver reads it (responsewriters.ContentEncodingSupported).
func acceptsGzip(r *http.Request) bool {
	for _, token := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(token) == "gzip" {
			return true
		}
	}
	return false
}
