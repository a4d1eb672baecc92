package watch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

const (
	// deadlineBookmarkLead: the watch cache sends a bookmark this long
	// before a watch's deadline, so that the client resumes from it.
	deadlineBookmarkLead = 2 * time.Second
	// burstBytes bounds the bytes gathered before a write.
	burstBytes = 256 << 10
	// readBatch is how many changes a watcher takes from the feed at once.
	readBatch = 64
)

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
	// tableHeaderSent: a Table watch sent its columns (with its first
	// event); tableColumnsChanged: a row rendered under other columns
	// than the watch's came, which ends the watch.
	tableHeaderSent     bool
	tableColumnsChanged bool
}

// endError marks the end of a stream for a reason already decided.
type endError struct{ reason string }

func (e *endError) Error() string { return "watch ended: " + e.reason }

// sendInitial writes one ADDED event per item in order, then (with
// bookmarks) the BOOKMARK ending the initial events. Between bursts it
// stops when the watch must end (interrupted).
func (w *watcher) sendInitial(ctx context.Context, items []*snapshot.Entry, rv uint64) error {
	if w.wr.gzip && w.t.Table == nil {
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
		if w.t.Table != nil {
			w.tableEvent(wire.Added, e, 0, false)
		} else {
			w.wr.event(wire.Added, e.Raw)
		}
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

// gzipCache is how a gzipped watch-list's initial events cache their
// chunks: for the whole collection without a namespace or selector, for a
// shard under its key with a shard selector alone (ShardOnly).
func (t Target) gzipCache() snapshot.GzipCache {
	switch {
	case t.Namespace != "":
		return snapshot.GzipCache{}
	case t.Match == nil:
		return snapshot.GzipCache{Build: true}
	case t.Shard != nil && t.ShardOnly:
		return snapshot.GzipCache{Build: true, Key: snapshot.GzipKey(t.Shard.String())}
	}
	return snapshot.GzipCache{}
}

// sendInitialGzip sends the initial events of a gzipped watch-list as one
// gzip member, flushed (sync flush) after each burst so that the client
// reads every burst at once, and closed after the end bookmark; live
// events follow as members of their own. The ADDED frames are stitched from
// chunks cached on the entries (snapshot.GzipEntries): a storm of informers
// compresses each object once, not once per informer. Only a watch-list
// without namespace or selectors, or with a shard selector alone, builds and
// caches chunks; a filtered one uses those that fit and compresses the rest
// at level 1.
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
	}, w.t.gzipCache())
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

// bookmark queues a BOOKMARK at rv.
func (w *watcher) bookmark(rv uint64, initialEventsEnd bool) error {
	if w.t.Table != nil {
		w.tableBookmark(rv, initialEventsEnd)
	} else {
		item, err := bookmarkItem(w.t.Format, w.t.Type, rv, initialEventsEnd)
		if err != nil {
			return err // unreachable: checked before the response started
		}
		w.wr.event(wire.Bookmark, item)
	}
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
// for the watcher. A watcher of one field value (a node's pods), one
// namespace or one shard waits for changes to its objects only, and keeps
// that wait (w.wait) to skip the others' changes without reading them
// (skip); others wait for any change.
func (w *watcher) waitForChanges() <-chan struct{} {
	switch {
	case w.t.Wake.Field != "":
		w.wait = w.t.Store.WaitOn(w.t.Wake)
	case w.t.Namespace != "":
		w.wait = w.t.Store.WaitIn(w.t.Namespace)
	case w.t.Shard != nil:
		w.wait = w.t.Store.WaitShard(w.t.Shard)
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
	w.metrics.read(w.labels, n)
	*bp = buf[:0]
	eventBufs.Put(bp)
	switch {
	case werr != nil:
		return n, werr
	case errors.Is(err, snapshot.ErrFeedReset), w.tableColumnsChanged:
		return n, &endError{EndStoreReset}
	case errors.Is(err, snapshot.ErrFeedOverrun):
		return n, w.expired()
	}
	return n, nil
}

// expired answers a watcher whose position has left the store's history of
// changes as the apiserver answers a watch from a resourceVersion older
// than its watch cache's history: one ERROR event, 410 Expired "too old
// resource version: RV (OLDEST)", after which the stream ends and the
// client lists again. It returns the end of the watch.
func (w *watcher) expired() error {
	since, _ := w.t.Store.FeedSince()
	status := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", w.readRV, since)).ErrStatus
	if w.wr.errorEvent(&status, w.t.Resource) {
		w.metrics.event(w.labels, wire.Error)
	}
	if err := w.flush(); err != nil {
		return err
	}
	return &endError{EndExpired}
}

// change queues the event one change means to this watcher, as the watch
// cache's cacheWatcher.convertToWatchEvent decides it: an object that starts
// matching is ADDED, one that stops matching is DELETED (its previous state
// at the change's resourceVersion), one that keeps matching is MODIFIED.
func (w *watcher) change(ev *snapshot.Event) {
	cur := ev.Type != snapshot.Deleted && w.matches(ev.Object)
	old := ev.Prev != nil && w.matches(ev.Prev)
	var entry *snapshot.Entry
	var typ wire.EventType
	// atRV: the previous object is sent at the change's resourceVersion.
	atRV := false
	switch {
	case cur && !old:
		typ, entry = wire.Added, ev.Object
	case cur && old:
		typ, entry = wire.Modified, ev.Object
	case !cur && old:
		typ = wire.Deleted
		if ev.Type == snapshot.Deleted {
			// The apiserver's DELETED object: the last state at the
			// deletion's resourceVersion.
			entry = ev.Object
		} else {
			entry, atRV = ev.Prev, true
		}
	default:
		return
	}
	switch {
	case w.t.Table != nil:
		w.tableEvent(typ, entry, ev.RV, atRV)
	case w.t.Match == nil && ev.Shared != nil:
		// Without selectors every watcher of the store sends the same
		// frame: it is encoded once, by the first.
		w.wr.frame(ev.Shared.Load(frameKey{w.t.Format, w.t.Type, typ}, func() []byte {
			return wire.AppendWatchEvent(nil, w.t.Format, typ, w.t.Type, w.item(entry, ev.RV, atRV))
		}))
	default:
		w.wr.event(typ, w.item(entry, ev.RV, atRV))
	}
	w.metrics.event(w.labels, typ)
	w.metrics.fanout(w.labels, w.srv.cfg.Clock.Since(ev.At))
}

// item is the object an event carries: e as stored or, when atRV, at the
// change's resourceVersion rv.
func (w *watcher) item(e *snapshot.Entry, rv uint64, atRV bool) []byte {
	if !atRV {
		return e.Raw
	}
	item, err := wire.SetResourceVersion(w.t.Format, e.Raw, strconv.FormatUint(rv, 10))
	if err != nil {
		klog.ErrorS(err, "Cannot rewrite resourceVersion; sending the previous object as stored", "resource", w.t.Resource)
		return e.Raw
	}
	return item
}

// tableEvent queues the Table event of one row, its clock cells rendered
// now; the watcher's first event carries the columns. A row rendered
// under other columns than the watch's ends the watch after this read
// (the store is relisting under new ones).
func (w *watcher) tableEvent(typ wire.EventType, e *snapshot.Entry, rv uint64, atRV bool) {
	tt := w.t.Table
	row, ok := e.Extra.(*stores.TableRow)
	if !ok || row.Columns != tt.Columns || w.tableColumnsChanged {
		w.tableColumnsChanged = true
		return
	}
	rendered := row.Append(nil, e.Raw, w.srv.cfg.Clock.Now(), tt.Include, tt.GroupVersion)
	eventRV := e.RV
	if atRV {
		var err error
		if rendered, err = wire.SetTableRowResourceVersion(rendered, strconv.FormatUint(rv, 10)); err != nil {
			klog.ErrorS(err, "Cannot rewrite a Table row's resourceVersion; ending the watch", "resource", w.t.Resource)
			w.tableColumnsChanged = true
			return
		}
		eventRV = rv
	}
	var columns []byte
	if !w.tableHeaderSent {
		columns, w.tableHeaderSent = tt.Columns.JSON, true
	}
	w.wr.raw(func(dst []byte) []byte {
		return wire.AppendTableWatchEvent(dst, typ, tt.GroupVersion, strconv.FormatUint(eventRV, 10), columns, rendered)
	})
}

// tableBookmark queues the Table BOOKMARK at rv: the row the apiserver
// renders for an empty object (TableTarget.Bookmark), its object the
// PartialObjectMetadata carrying rv, or null for includeObject=None but
// on the initial events' end bookmark, which the apiserver always sends
// with its annotated object.
func (w *watcher) tableBookmark(rv uint64, initialEventsEnd bool) {
	tt := w.t.Table
	rvs := strconv.FormatUint(rv, 10)
	object := tt.Include != table.IncludeNone || initialEventsEnd
	var columns []byte
	if !w.tableHeaderSent {
		columns, w.tableHeaderSent = tt.Columns.JSON, true
	}
	w.wr.raw(func(dst []byte) []byte {
		row := wire.AppendTableBookmarkRow(nil, *tt.Bookmark, tt.GroupVersion, rvs, object, initialEventsEnd)
		return wire.AppendTableWatchEvent(dst, wire.Bookmark, tt.GroupVersion, rvs, columns, row)
	})
}

// frameKey identifies an encoded frame of an event shared by watchers.
type frameKey struct {
	format wire.Format
	typ    wire.ObjectType
	event  wire.EventType
}

func (w *watcher) matches(e *snapshot.Entry) bool {
	if w.t.Namespace != "" && e.Namespace() != w.t.Namespace {
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
