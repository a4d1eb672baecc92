package watch

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/httpapi"
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
	// poolBufBytes bounds the burst buffers returned to burstPool; a
	// larger one (a burst of huge objects) is left to the collector.
	poolBufBytes = 2 * burstBytes
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
	// Wake is a field value every object Match selects has (an exact
	// requirement of the field selector): the watch then waits for changes
	// to objects that have or had it only. Zero: none.
	Wake snapshot.FieldValue
	// WatchListDefaults: the apiserver turns a watch from resourceVersion
	// "" or "0" without sendInitialEvents into a watch-list (its WatchList
	// feature is on). Where it does not, such a watch has the older
	// semantics (initial events with no end bookmark) and passes through.
	WatchListDefaults bool
	// WatchListGzip: the apiserver's release (1.37+, WatchListCompression)
	// gzips the responses of watch-lists (initial events and bookmarks
	// requested) whose client accepts gzip, every flush one gzip member at
	// level 1.
	WatchListGzip bool
	// Consistent proves a consistent read: the snapshot holding every
	// change up to the returned resourceVersion. ok false passes the watch
	// through. Required for InitialConsistent.
	Consistent func(ctx context.Context) (snap *snapshot.Snapshot, rv uint64, ok bool)
	// NotOlderThan finds the snapshot of a watch-list from resourceVersion
	// rv, waiting at most wait: a snapshot to serve at resourceVersion at
	// (>= rv), proven with etcd where it can be. tooLarge is the
	// apiserver's 504 "Too large resource version" Status when etcd itself
	// had not reached rv in time; it is sent as the watch's one ERROR
	// event. A nil snapshot without it passes the watch through. Nil: the
	// store alone is waited for, and passes through on timeout.
	NotOlderThan func(ctx context.Context, rv uint64, wait time.Duration) (snap *snapshot.Snapshot, at uint64, tooLarge *metav1.Status)
	// Holds proves that the store holds every change up to rv, an rv past
	// the store's progress (the resourceVersion of a consistent
	// watch-list's bookmark, which etcd proved): a watch from rv is then
	// served from the store's feed. Nil, or false, passes such a watch
	// through.
	Holds func(ctx context.Context, rv uint64) bool
	// Warnings are the deprecation texts of the resource's version, sent
	// as Warning headers as the apiserver does.
	Warnings []string
	// Admit admits the initial events of a watch-list for writing, as a
	// LIST is admitted: weight is their objects' encoded bytes (an
	// estimate without selectors). It returns release, called once they
	// are written, and the time by which they must be (zero: no bound),
	// past which the watch is cut short; or, when there is no room in
	// time, the apiserver's 429 to answer with. Nil admits every
	// watch-list at once.
	Admit func(ctx context.Context, weight int64) (release func(), deadline time.Time, rejected *apierrors.StatusError)
	// Reject, when Stores.Resolve returns ok false with it set, answers the
	// watch instead of passing it through (a store that did not sync in
	// time gets the apiserver's 429 for an unready watch cache).
	Reject func(http.ResponseWriter)
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
	if _, err := bookmarkItem(t.Format, t.Type, 1, true); err != nil {
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
		if t.NotOlderThan != nil {
			var tooLarge *metav1.Status
			snap, rv, tooLarge = t.NotOlderThan(ctx, d.RV, s.cfg.NotOlderThanWait)
			if tooLarge != nil {
				s.serveError(w, r, d, t, tooLarge)
				return true, d.Reason
			}
			if snap == nil {
				return false, "not_older_than_timeout"
			}
			break
		}
		wctx, cancel := context.WithTimeout(ctx, s.cfg.NotOlderThanWait)
		snap, rv, err = t.Store.WaitFor(wctx, d.RV)
		cancel()
		if err != nil {
			return false, "not_older_than_timeout"
		}
	case From:
		// The store must have seen every change up to d.RV: a later RV
		// (a consistent watch-list's bookmark, another replica's) is
		// served once etcd proves that the store holds every change up
		// to it, else it is the apiserver's.
		if !t.Store.Synced() {
			return false, "resource_version_ahead"
		}
		if d.RV > t.Store.Progress() && (t.Holds == nil || !t.Holds(ctx, d.RV)) {
			return false, "resource_version_ahead"
		}
		rv = d.RV
	default:
		return false, "pass_through"
	}
	// Initial events are admitted as a LIST is, before anything is written.
	var (
		items   []*snapshot.Entry
		slot    func()
		initEnd time.Time
	)
	if snap != nil {
		var rejected *apierrors.StatusError
		items, slot, initEnd, rejected = s.admitInitial(ctx, snap, t)
		if rejected != nil {
			httpapi.SetAPIServerHeaders(w.Header(), r, t.Warnings)
			httpapi.WriteStatus(w, rejected)
			return true, "initial_events_rejected"
		}
		defer func() {
			if slot != nil {
				slot()
			}
		}()
	}
	cursor, err := t.Store.Subscribe(rv)
	if err != nil {
		// Older than the store's history of changes, or the store relisted
		// since the snapshot was taken.
		return false, "not_retained"
	}

	wr := newWriter(w, t.Format, t.Type, s.cfg.WriteTimeout, s.cfg.Clock)
	labels := []string{t.Resource, t.Format.String()}
	m := s.cfg.Metrics
	m.started(labels, d.Reason)
	defer m.stopped(labels)

	w2 := &watcher{
		srv: s, t: t, d: d, wr: wr, cursor: cursor, bookmarkRV: rv, readRV: rv, labels: labels, metrics: m,
	}
	// A watch's time counts from its start, initial events included.
	w2.startTimers()
	defer w2.stopTimers()

	onFreshStack(func() {
		s.writeHead(w, r, d, t, wr)
		_ = wr.flush() // a failed flush shows in the next write
	})

	reason := ""
	if snap != nil {
		wr.limit = initEnd
		if err := w2.sendInitial(ctx, items, rv); err != nil {
			reason = w2.endReason(ctx, err)
		}
		items = nil
		wr.limit = time.Time{}
		slot()
		slot = nil
	}
	if reason == "" {
		reason = w2.stream(ctx)
	}
	wr.close(reason == EndTooSlow || wr.err != nil)
	m.ended(labels, reason)
	return true, d.Reason
}

// admitInitial selects the objects of snap that t's initial events carry
// and admits writing them with t.Admit, weighed by their bytes (see
// Target.Admit). A watch-list that waits for room holds no selection
// meanwhile. It returns the items, the slot to release once they are
// written and the time they must be written by (zero: no bound), or the
// Status rejecting the watch.
func (s *Server) admitInitial(ctx context.Context, snap *snapshot.Snapshot, t Target) ([]*snapshot.Entry, func(), time.Time, *apierrors.StatusError) {
	selectItems := func() []*snapshot.Entry {
		return snap.Page(snapshot.PageRequest{Namespace: t.Namespace, Match: t.Match}).Items
	}
	if t.Admit == nil {
		return selectItems(), func() {}, time.Time{}, nil
	}
	var items []*snapshot.Entry
	var weight int64
	switch {
	case t.Match != nil:
		items = selectItems()
		for _, e := range items {
			weight += int64(len(e.Raw))
		}
	case t.Namespace == "":
		weight = snap.Bytes()
	case snap.Len() > 0:
		weight = int64(snap.Count(t.Namespace)) * (snap.Bytes() / int64(snap.Len()))
	}
	items = nil // not held while waiting for room
	release, deadline, rejected := t.Admit(ctx, weight)
	if rejected != nil {
		return nil, nil, time.Time{}, rejected
	}
	return selectItems(), release, deadline, nil
}

// serveError answers a watch with one ERROR event carrying status, as the
// apiserver answers a watch it accepted but cannot start (HTTP 200, the
// event, the end of the stream).
func (s *Server) serveError(w http.ResponseWriter, r *http.Request, d Decision, t Target, status *metav1.Status) {
	labels := []string{t.Resource, t.Format.String()}
	m := s.cfg.Metrics
	m.started(labels, d.Reason)
	defer m.stopped(labels)
	wr := newWriter(w, t.Format, t.Type, s.cfg.WriteTimeout, s.cfg.Clock)
	buf, err := wire.AppendErrorEvent(nil, t.Format, status)
	if err != nil {
		klog.ErrorS(err, "Cannot encode a watch error", "resource", t.Resource)
	}
	s.writeHead(w, r, d, t, wr)
	wr.buf = buf
	reason := EndError
	if err := wr.flush(); err != nil {
		reason = EndClientGone
	}
	m.event(labels, wire.Error)
	m.sent(labels, len(buf))
	wr.close(wr.err != nil)
	m.ended(labels, reason)
}

// writeHead writes the response head of a served watch, as the
// apiserver's: gzip for a watch-list whose client accepts it, where the
// apiserver's release does so.
func (s *Server) writeHead(w http.ResponseWriter, r *http.Request, d Decision, t Target, wr *writer) {
	h := w.Header()
	httpapi.SetAPIServerHeaders(h, r, t.Warnings)
	h.Set("Content-Type", t.Format.WatchContentType())
	h.Set("Cache-Control", "no-cache, private")
	h.Set("Transfer-Encoding", "chunked")
	if t.WatchListGzip && d.Action != From && d.Bookmarks && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		wr.gzip = true
	}
	w.WriteHeader(http.StatusOK)
}

// acceptsGzip reports whether r's Accept-Encoding names gzip, as the
// apiserver reads it (responsewriters.ContentEncodingSupported).
func acceptsGzip(r *http.Request) bool {
	for _, token := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(token) == "gzip" {
			return true
		}
	}
	return false
}

// gzipWriters holds the level-1 gzip writers of compressed watch-lists
// between flushes.
var gzipWriters = sync.Pool{New: func() any {
	gw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // the level is valid
	return gw
}}

// watcher is one served watch.
type watcher struct {
	srv    *Server
	t      Target
	d      Decision
	wr     *writer
	cursor *snapshot.Cursor
	// bookmarkRV is the resourceVersion of the last bookmark sent, or
	// where the watch started.
	bookmarkRV uint64
	// readRV is the resourceVersion of the last change read from the
	// cursor (or where it started): the client has every event up to it.
	readRV uint64
	// wait is the watcher's wait for changes to its field value or
	// namespace, taken before it last read every change (waitForChanges);
	// zero for a watcher woken by every change.
	wait    snapshot.Wait
	labels  []string
	metrics *Metrics
	// deadline is when the watch ends; end fires then. bookmarkTimer
	// fires when the next bookmark is due (nil without bookmarks).
	deadline      time.Time
	end           clock.Timer
	bookmarkTimer clock.Timer
}

// endError marks the end of a stream for a reason already decided.
type endError struct{ reason string }

func (e *endError) Error() string { return "watch ended: " + e.reason }

// sendInitial writes one ADDED event per item in order, then (with
// bookmarks) the BOOKMARK ending the initial events. Between bursts it
// stops when the watch must end (interrupted).
func (w *watcher) sendInitial(ctx context.Context, items []*snapshot.Entry, rv uint64) error {
	if w.wr.gzip {
		return w.sendInitialGzip(ctx, items, rv)
	}
	// One burst buffer serves all the initial events, rather than one
	// grown and dropped per burst: a watch-list of a large resource would
	// otherwise allocate its whole size again, and the garbage collector
	// (listproxy runs with a low GOGC) would mark the stores for it.
	// Initial events smaller than a burst (a node agent's few pods) take a
	// pooled buffer instead.
	w.wr.keep = true
	defer w.wr.release()
	switch {
	case initialBytes(items) < burstBytes:
		if w.wr.buf == nil {
			w.wr.buf = getBurst()
		}
	case cap(w.wr.buf) < burstBytes:
		w.wr.buf = make([]byte, 0, burstBytes+burstBytes/4)
	}
	var sent, added int
	for _, e := range items {
		w.wr.event(wire.Added, e.Raw)
		added++
		if len(w.wr.buf) >= burstBytes {
			sent += len(w.wr.buf)
			w.metrics.eventN(w.labels, wire.Added, added)
			added = 0
			if err := w.flush(); err != nil {
				return err
			}
			if err := w.interrupted(ctx); err != nil {
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

// initialBytes is about how many bytes the initial events of items take,
// counted up to burstBytes: each object and its frame, and the end bookmark.
func initialBytes(items []*snapshot.Entry) int {
	const frame, bookmark = 64, 512 // event framing per object; the end bookmark
	n := bookmark
	for _, e := range items {
		if n += len(e.Raw) + frame; n >= burstBytes {
			break
		}
	}
	return n
}

// watchChunkLevel is the compress/flate level at which the ADDED frames of
// a gzipped watch-list's initial events are compressed once and cached on
// their entries, as list items are for gzip LISTs (the same trade: the first
// watch-list of an object version pays about twice a level-1 compression,
// later ones copy the chunks).
const watchChunkLevel = 6

var watchChunks = func() *gzstitch.Compressor {
	c, err := gzstitch.NewCompressor(watchChunkLevel)
	if err != nil {
		panic(err) // a constant level in range
	}
	return c
}()

// sendInitialGzip sends the initial events of a gzipped watch-list as one
// gzip member, flushed (sync flush) after each burst so that the client
// reads every burst at once, and closed after the end bookmark; live
// events follow as members of their own. The ADDED frames are stitched from
// chunks cached on the entries (snapshot.GzipEntries): a storm of informers
// compresses each object once, not once per informer. Only a watch-list
// without namespace or selectors builds and caches chunks; a filtered one
// uses those that fit and compresses the rest at level 1.
func (w *watcher) sendInitialGzip(ctx context.Context, items []*snapshot.Entry, rv uint64) (err error) {
	wr := w.wr
	zw := gzstitch.NewWriter(wr.w)
	defer func() {
		// The member ends also after an error: Close releases its buffers.
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = wr.rc.Flush()
		}
		if err != nil {
			wr.fail(err)
		}
	}()
	f, typ := wr.format, wr.typ
	ge := snapshot.NewGzipEntries(zw, watchChunks, snapshot.GzipWatchAdded, items, func(dst []byte, e *snapshot.Entry) []byte {
		return wire.AppendWatchEvent(dst, f, wire.Added, typ, e.Raw)
	}, w.t.Namespace == "" && w.t.Match == nil)
	var flushed int64
	burst := func(end int) error {
		wr.setDeadline()
		if err := ge.WriteUpTo(end); err != nil {
			return err
		}
		if err := zw.Flush(); err != nil {
			return err
		}
		if err := wr.rc.Flush(); err != nil {
			return err
		}
		w.metrics.sent(w.labels, int(ge.Size()-flushed))
		flushed = ge.Size()
		return nil
	}
	pending, added := 0, 0
	for i, e := range items {
		pending += len(e.Raw)
		added++
		if pending >= burstBytes {
			w.metrics.eventN(w.labels, wire.Added, added)
			pending, added = 0, 0
			if err := burst(i + 1); err != nil {
				return err
			}
			if err := w.interrupted(ctx); err != nil {
				return err
			}
		}
	}
	w.metrics.eventN(w.labels, wire.Added, added)
	if err := burst(len(items)); err != nil {
		return err
	}
	sent := int(flushed)
	if w.d.Bookmarks {
		// The end bookmark, queued as any bookmark, goes into the member.
		if err := w.bookmark(rv, true); err != nil {
			return err
		}
		wr.setDeadline()
		n := len(wr.buf)
		_, err := zw.Write(wr.buf)
		wr.buf = wr.buf[:0]
		wr.release()
		if err != nil {
			return err
		}
		w.metrics.sent(w.labels, n)
		sent += n
	}
	w.metrics.initial(w.labels, sent)
	return nil
}

// bookmarkKey names a bookmark template.
type bookmarkKey struct {
	format           wire.Format
	typ              wire.ObjectType
	initialEventsEnd bool
}

// bookmarkTemplate is a bookmark object built once, or why it cannot be.
type bookmarkTemplate struct {
	item []byte
	err  error
}

// bookmarkTemplates holds a bookmarkTemplate per bookmarkKey.
var bookmarkTemplates sync.Map

// bookmarkItem returns wire.BookmarkItem's object for rv: the type's
// template, encoded once, with its resourceVersion set. Encoding a built-in
// type's empty object by reflection runs deep (see onFreshStack); setting a
// resourceVersion does not.
func bookmarkItem(f wire.Format, typ wire.ObjectType, rv uint64, initialEventsEnd bool) ([]byte, error) {
	key := bookmarkKey{f, typ, initialEventsEnd}
	v, ok := bookmarkTemplates.Load(key)
	if !ok {
		item, err := wire.BookmarkItem(f, typ, "1", initialEventsEnd)
		v, _ = bookmarkTemplates.LoadOrStore(key, bookmarkTemplate{item, err})
	}
	tmpl := v.(bookmarkTemplate)
	if tmpl.err != nil {
		return nil, tmpl.err
	}
	return wire.SetResourceVersion(f, tmpl.item, strconv.FormatUint(rv, 10))
}

// onFreshStack runs f on a goroutine of its own and waits for it to
// return. A goroutine keeps the largest stack it ever needed, and a watch's
// serving goroutine lives for up to an hour, mostly idle: net/http's first
// flush of a response head runs deeper than anything else a watch does and
// would double the stack of every idle watcher (16 KiB instead of 8 KiB).
// f runs while the caller waits, so it may use the caller's ResponseWriter.
func onFreshStack(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// bookmark queues a BOOKMARK at rv.
func (w *watcher) bookmark(rv uint64, initialEventsEnd bool) error {
	item, err := bookmarkItem(w.t.Format, w.t.Type, rv, initialEventsEnd)
	if err != nil {
		return err // unreachable: checked before the response started
	}
	w.wr.event(wire.Bookmark, item)
	w.metrics.event(w.labels, wire.Bookmark)
	w.bookmarkRV = max(w.bookmarkRV, rv)
	return nil
}

func (w *watcher) flush() error {
	n := w.wr.queued()
	if err := w.wr.flush(); err != nil {
		return err
	}
	w.metrics.sent(w.labels, n)
	return nil
}

// startTimers starts the watch's deadline (timeoutSeconds, else a random
// time in [MinRequestTimeout, 2*MinRequestTimeout), as the apiserver's) and,
// with bookmarks, its bookmark timer.
func (w *watcher) startTimers() {
	clk := w.srv.cfg.Clock
	timeout := w.d.Timeout
	if timeout == 0 {
		timeout = time.Duration(float64(w.srv.cfg.MinRequestTimeout) * (1 + rand.Float64()))
	}
	w.deadline = clk.Now().Add(timeout)
	w.end = clk.NewTimer(timeout)
	if w.d.Bookmarks {
		w.bookmarkTimer = clk.NewTimer(w.nextBookmark())
	}
}

func (w *watcher) stopTimers() {
	w.end.Stop()
	if w.bookmarkTimer != nil {
		w.bookmarkTimer.Stop()
	}
}

// nextBookmark is how long until the next bookmark: BookmarkInterval, or
// shortly before the deadline when that comes first.
func (w *watcher) nextBookmark() time.Duration {
	now := w.srv.cfg.Clock.Now()
	at := now.Add(w.srv.cfg.BookmarkInterval)
	if lead := w.deadline.Add(-deadlineBookmarkLead); lead.Before(at) && lead.After(now) {
		at = lead
	}
	return at.Sub(now)
}

// bookmarkC fires when a bookmark is due; nil (never) without bookmarks.
func (w *watcher) bookmarkC() <-chan time.Time {
	if w.bookmarkTimer == nil {
		return nil
	}
	return w.bookmarkTimer.C()
}

// interrupted returns why the watch must end before its next burst of
// initial events (the client left, the server shuts down, its deadline
// passed), or nil.
func (w *watcher) interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-w.end.C():
		return &endError{EndTimeout}
	default:
		return nil
	}
}

// testHookWait, set by tests only, is called each time a watcher has read
// every change and waits for the next.
var testHookWait func(Target)

// stream sends the store's changes until the watch ends, and returns why.
func (w *watcher) stream(ctx context.Context) string {
	for {
		changed := w.waitForChanges()
		n, err := w.readChanges()
		if err != nil {
			return w.endReason(ctx, err)
		}
		if n > 0 {
			// Changes none of whose events are this watcher's (another
			// namespace, not matching) need no write.
			if w.wr.queued() > 0 {
				if err := w.flush(); err != nil {
					return w.endReason(ctx, err)
				}
			}
			continue
		}
		if testHookWait != nil {
			testHookWait(w.t)
		}
		select {
		case <-changed:
			w.skip()
		case <-ctx.Done():
			return w.endReason(ctx, ctx.Err())
		case <-w.end.C():
			return EndTimeout
		case <-w.bookmarkC():
			if err := w.progressBookmark(); err != nil {
				return w.endReason(ctx, err)
			}
			w.bookmarkTimer = w.srv.cfg.Clock.NewTimer(w.nextBookmark())
		}
	}
}

// waitForChanges returns a channel closed when the store may have a change
// for the watcher. A watcher of one field value (a node's pods) or one
// namespace waits for changes to its objects only, and keeps that wait
// (w.wait) to skip the others' changes without reading them (skip);
// others wait for any change.
func (w *watcher) waitForChanges() <-chan struct{} {
	switch {
	case w.t.Wake.Field != "":
		w.wait = w.t.Store.WaitOn(w.t.Wake)
	case w.t.Namespace != "":
		w.wait = w.t.Store.WaitIn(w.t.Namespace)
	default:
		return w.t.Store.Changed()
	}
	return w.wait.Done()
}

// skip moves the cursor past the changes its wait proves are not the
// watcher's, as read.
func (w *watcher) skip() {
	if rv := w.cursor.Skip(w.wait); rv > w.readRV {
		w.readRV = rv
	}
}

// progressBookmark sends a BOOKMARK at the store's progress when it moved
// since the last bookmark, behind every event up to it, as the watch cache
// queues a bookmark behind the events before it: a bookmark at N promises
// the client every change up to N, and one resuming from N never gets the
// changes before it again. The store appends a change to its feed before it
// publishes the change's resourceVersion as its progress, so once the
// cursor has read up to the progress, every change up to it was sent. It
// reads no further than one batch past the progress, so that writes faster
// than the watcher reads cannot hold its bookmark back; the bookmark then
// carries the last change read.
func (w *watcher) progressBookmark() error {
	rv := w.t.Store.Progress()
	w.skip()
	for w.readRV < rv {
		n, err := w.readChanges()
		if err != nil {
			return err
		}
		if n == 0 {
			break // unreachable: the feed holds every change up to rv
		}
	}
	if rv = max(rv, w.readRV); rv > w.bookmarkRV {
		_ = w.bookmark(rv, false)
	}
	if w.wr.queued() == 0 {
		return nil
	}
	return w.flush()
}

// eventBufs holds the batches watchers read changes into, so that an idle
// watcher holds none.
var eventBufs = sync.Pool{New: func() any { b := make([]snapshot.Event, 0, readBatch); return &b }}

// readChanges sends the events of the changes the cursor has (up to
// readBatch) and returns how many changes it read. It writes a burst
// whenever readBatch changes' events reach burstBytes, so that a watcher
// catching up on large objects never gathers more than burstBytes plus one
// event; the rest stays queued for the caller to flush. A feed that broke
// continuity or overran the cursor ends the watch (an *endError).
func (w *watcher) readChanges() (int, error) {
	bp := eventBufs.Get().(*[]snapshot.Event)
	buf, err := w.cursor.Read((*bp)[:0])
	var werr error
	for i := range buf {
		w.readRV = buf[i].RV
		if werr == nil {
			w.change(&buf[i])
			if w.wr.queued() >= burstBytes {
				werr = w.flush()
			}
		}
		buf[i] = snapshot.Event{} // release the entries
	}
	n := len(buf)
	*bp = buf[:0]
	eventBufs.Put(bp)
	switch {
	case werr != nil:
		return n, werr
	case errors.Is(err, snapshot.ErrFeedReset):
		return n, &endError{EndStoreReset}
	case errors.Is(err, snapshot.ErrFeedOverrun):
		return n, &endError{EndTooSlow}
	}
	return n, nil
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
		return
	}
	if w.t.Match == nil && ev.Shared != nil {
		// Without selectors every watcher of the store sends the same
		// frame: it is encoded once, by the first.
		w.wr.frame(ev.Shared.Load(frameKey{w.t.Format, w.t.Type, typ}, func() []byte {
			return wire.AppendWatchEvent(nil, w.t.Format, typ, w.t.Type, item)
		}))
	} else {
		w.wr.event(typ, item)
	}
	w.metrics.event(w.labels, typ)
	w.metrics.fanout(w.labels, w.srv.cfg.Clock.Since(ev.At))
}

// frameKey identifies an encoded frame of an event shared by watchers.
type frameKey struct {
	format wire.Format
	typ    wire.ObjectType
	event  wire.EventType
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

// burstPool holds the burst buffers of all watchers: a watcher borrows one
// for a burst and returns it once written, so that an idle watcher holds
// none and busy ones do not each grow and drop their own.
var burstPool = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

func getBurst() []byte { return (*burstPool.Get().(*[]byte))[:0] }

func putBurst(b []byte) {
	if b != nil && cap(b) <= poolBufBytes {
		b = b[:0]
		burstPool.Put(&b)
	}
}

// writer gathers a burst of frames and writes it with a deadline. Frames
// it encodes go into its burst buffer; a large frame shared by watchers is
// queued by reference, not copied, so that a burst of large objects costs
// each watcher nothing but the references.
type writer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	format  wire.Format
	typ     wire.ObjectType
	timeout time.Duration
	clock   clock.PassiveClock
	// buf holds frames encoded for this watcher; those before buf[sealed:]
	// are queued in parts.
	buf    []byte
	sealed int
	// parts are the pieces queued before buf[sealed:], in order: sealed
	// runs of buf and shared frames; partBytes is their length.
	parts     [][]byte
	partBytes int
	// keep: the buffer is kept whatever its size (while sending initial
	// events); release ends that.
	keep bool
	// limit, when set, is a deadline no write may pass (the initial
	// events' bound).
	limit time.Time
	// err is the first write or flush error.
	err error
	// gzip: every flush is written as one gzip member.
	gzip bool
}

// sharedFrameMin is the size from which a shared frame is queued by
// reference rather than copied into the burst buffer: below it a copy is
// cheaper than a write of its own. Not measured.
const sharedFrameMin = 4 << 10

func newWriter(w http.ResponseWriter, f wire.Format, typ wire.ObjectType, timeout time.Duration, clk clock.PassiveClock) *writer {
	return &writer{w: w, rc: http.NewResponseController(w), format: f, typ: typ, timeout: timeout, clock: clk}
}

func (w *writer) event(t wire.EventType, item []byte) {
	if w.buf == nil {
		w.buf = getBurst()
	}
	w.buf = wire.AppendWatchEvent(w.buf, w.format, t, w.typ, item)
}

// frame queues an encoded frame, which must not change until flushed.
func (w *writer) frame(b []byte) {
	if len(b) < sharedFrameMin {
		if w.buf == nil {
			w.buf = getBurst()
		}
		w.buf = append(w.buf, b...)
		return
	}
	if len(w.buf) > w.sealed {
		w.parts = append(w.parts, w.buf[w.sealed:])
		w.partBytes += len(w.buf) - w.sealed
		w.sealed = len(w.buf)
	}
	w.parts = append(w.parts, b)
	w.partBytes += len(b)
}

// queued is the number of bytes queued for the next flush.
func (w *writer) queued() int { return w.partBytes + len(w.buf) - w.sealed }

// release stops keeping the buffer between bursts; an empty one is
// returned at once.
func (w *writer) release() {
	w.keep = false
	if len(w.buf) == 0 {
		putBurst(w.buf)
		w.buf = nil
	}
}

// setDeadline bounds the next writes: WriteTimeout from now, and never
// past limit. Deadlines use the real time: they bound the socket, not the
// watch.
func (w *writer) setDeadline() {
	at := time.Now().Add(w.timeout)
	if !w.limit.IsZero() && w.limit.Before(at) {
		at = w.limit
	}
	_ = w.rc.SetWriteDeadline(at) // unsupported: no bound
}

// fail records err as the writer's first error.
func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// writeQueued writes the queued pieces to dst in order.
func (w *writer) writeQueued(dst io.Writer) error {
	for _, p := range w.parts {
		if _, err := dst.Write(p); err != nil {
			return err
		}
	}
	if len(w.buf) > w.sealed {
		if _, err := dst.Write(w.buf[w.sealed:]); err != nil {
			return err
		}
	}
	return nil
}

// flush writes the queued frames and flushes them to the client.
func (w *writer) flush() error {
	w.setDeadline()
	var err error
	switch {
	case w.queued() > 0 && w.gzip:
		gw := gzipWriters.Get().(*gzip.Writer)
		gw.Reset(w.w)
		if err = w.writeQueued(gw); err == nil {
			if err = gw.Flush(); err == nil {
				err = gw.Close()
			}
		}
		gw.Reset(nil)
		gzipWriters.Put(gw)
	case w.queued() > 0:
		err = w.writeQueued(w.w)
	}
	w.parts, w.partBytes, w.sealed = nil, 0, 0
	if w.keep {
		w.buf = w.buf[:0]
	} else {
		putBurst(w.buf)
		w.buf = nil
	}
	if err == nil {
		err = w.rc.Flush()
	}
	if err != nil {
		w.fail(err)
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
