package watch

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Defaults of Config.
const (
	// DefaultMinRequestTimeout is the apiserver's --min-request-timeout: a
	// watch without timeoutSeconds ends after a random time in [1x, 2x).
	DefaultMinRequestTimeout = 1800 * time.Second
	// DefaultBookmarkInterval is the watch cache's defaultBookmarkFrequency.
	DefaultBookmarkInterval = time.Minute
	// DefaultWriteTimeout bounds writing one burst of events to a watcher:
	// as long as the store keeps changes (snapshot.DefaultEventRetention),
	// so that a client that stops reading for less than that resumes with
	// every change; past it, its position has likely left the history.
	DefaultWriteTimeout = snapshot.DefaultEventRetention
	// DefaultNotOlderThanWait is the watch cache's blockTimeout: how long a
	// watch-list from resourceVersion N waits for the store to reach N
	// before passing through.
	DefaultNotOlderThanWait = 3 * time.Second
)

// Config configures a Server. Start from DefaultConfig; NewServer
// completes a zero field with its default.
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
	// ServeShardSelectors serves watches with a shardSelector (KEP-5866)
	// from snapshots, as the 1.37 apiserver with its ShardedListAndWatch
	// gate answers them; when false they pass through
	// (collection.ReasonShardSelector).
	ServeShardSelectors bool
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
	// Initial finds a watch-list's initial events in a snapshot: the
	// objects of Namespace that Match selects, found as a LIST's first
	// page with the same selectors finds them (the Handler sets the
	// request's collection.Selection: the namespace a field selector
	// pins, the one key of metadata.name, the spec.nodeName index). Nil:
	// a scan of Namespace with Match.
	Initial *collection.Selection
	// Wake is a field value every object Match selects has (an exact
	// requirement of the field selector): the watch then waits for changes
	// to objects that have or had it only. Zero: none.
	Wake snapshot.FieldValue
	// Shard is the request's shard selector (KEP-5866), which Match also
	// checks: without Wake or Namespace, the watch waits for changes to
	// its shard's objects only. Nil: none.
	Shard sharding.Selector
	// ShardOnly: Match selects by Shard alone (no label or field
	// selector), so that a gzipped watch-list's initial events, without
	// Namespace, are the shard's consecutive entries and cache their
	// chunks under the shard's key.
	ShardOnly bool
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
	// Holds proves that every change after rv, an rv past the store's
	// progress (a consistent read's resourceVersion), will reach the
	// store: a watch from rv is then served from the store's feed, whose
	// cursor skips the changes up to rv that arrive later. Nil, or false,
	// passes such a watch through.
	Holds func(ctx context.Context, rv uint64) bool
	// Unchanged proves that the resource had no change after from up to
	// to: a watch from from, older than the store's feed, is then served
	// from the feed's start to. Nil, or false, passes such a watch
	// through.
	Unchanged func(ctx context.Context, from, to uint64) bool
	// Warnings are the deprecation texts of the resource's version, sent
	// as Warning headers as the apiserver does.
	Warnings []string
	// Admit admits the initial events of a watch-list for writing, as a
	// LIST is admitted (Admitter). Nil admits every watch-list at once.
	Admit Admitter
	// Table is set for a watch of Table rows (format wire.Table).
	Table *TableTarget
}

// Admitter admits the initial events of watch-lists for writing as LIST
// responses are admitted: listproxy's is the *admission.Queue
// (pkg/admission) that the LIST server admits its responses with, so that
// LISTs and watch-lists share one bound.
type Admitter interface {
	// AdmitWatchList admits initial events weighing weight bytes (their
	// objects' encoded bytes; an estimate without selectors). It returns
	// release, called once they are written, and the time by which they
	// must be (zero: no bound), past which the watch is cut short; or,
	// when there is no room in time, the apiserver's 429 to answer with.
	AdmitWatchList(ctx context.Context, weight int64) (release func(), deadline time.Time, rejected *apierrors.StatusError)
}

// TableTarget is what a watch of Table rows needs (kubectl get -w): each
// event is a Table of one row, rendered when it is written; the first
// carries the columns, the others null, as the apiserver writes them for
// one watcher. A BOOKMARK's row is the apiserver's rendering of an empty
// object, learned from the apiserver (Bookmark): a watch with bookmarks is
// served only once it is known.
type TableTarget struct {
	// GroupVersion is the Table's meta.k8s.io version.
	GroupVersion string
	// Include is the rows' object.
	Include table.IncludeObject
	// Columns are the resource's columns when the watch starts; a row
	// rendered under others ends the watch (the store is relisting under
	// new columns).
	Columns *stores.TableColumns
	// Bookmark is the row of a BOOKMARK under Columns; nil when not known.
	Bookmark *wire.TableBookmark
}

// Server serves watches from snapshot stores.
type Server struct {
	cfg Config
}

// DefaultConfig returns the watch server's defaults, the apiserver's
// where it has one; the command's flags start from them.
func DefaultConfig() Config {
	return Config{
		MinRequestTimeout: DefaultMinRequestTimeout,
		BookmarkInterval:  DefaultBookmarkInterval,
		WriteTimeout:      DefaultWriteTimeout,
		NotOlderThanWait:  DefaultNotOlderThanWait,
		// A zero Config passes shard selectors through.
		ServeShardSelectors: true,
	}
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
func (s *Server) PassedThrough(resource string, reason Reason) {
	s.cfg.Metrics.passedThrough(resource, reason)
}

// subscribeUnchanged subscribes a watch from rv, older than the store's
// feed, at the feed's start S when t.Unchanged proves that the resource
// had no change after rv up to S: the watch's events are then exactly the
// feed's. It returns the cursor and S, or snapshot.ErrNotRetained.
func (s *Server) subscribeUnchanged(ctx context.Context, t Target, rv uint64) (*snapshot.Cursor, uint64, error) {
	since, ok := t.Store.FeedSince()
	if !ok || t.Unchanged == nil || since <= rv || !t.Unchanged(ctx, rv, since) {
		return nil, 0, snapshot.ErrNotRetained
	}
	cursor, err := t.Store.Subscribe(since)
	return cursor, since, err
}

// Serve answers r, a watch decided by Decide (not PassThrough), from t. It
// returns false, having written nothing, when the request must pass
// through; reason says why (a metric label). Once it wrote the response
// head it streams until the deadline, the client leaves, r's context ends,
// the watcher falls too far behind, or the store breaks continuity; the
// response then simply ends, as the apiserver's does.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request, d Decision, t Target) (bool, Reason) {
	ctx := r.Context()
	snap, rv, tooLarge, reason := s.chooseStart(ctx, d, t)
	if tooLarge != nil {
		s.serveError(w, r, d, t, tooLarge)
		return true, d.Reason
	}
	if reason != "" {
		return false, reason
	}
	// Initial events are admitted as a LIST is, before anything is written.
	var initial *initialEvents
	if snap != nil {
		items, release, end, rejected := s.admitInitial(ctx, snap, t)
		if rejected != nil {
			httpapi.SetAPIServerHeaders(w.Header(), r, t.Warnings)
			httpapi.WriteStatus(w, rejected)
			return true, ReasonInitialEventsRejected
		}
		// Released once the initial events are written (stream), or here
		// when the watch goes no further.
		release = sync.OnceFunc(release)
		defer release()
		if t.Table != nil && !sameColumns(items, t.Table.Columns) {
			return false, ReasonTableColumns
		}
		initial = &initialEvents{items: items, end: end, release: release}
	}
	cursor, err := t.Store.Subscribe(rv)
	if errors.Is(err, snapshot.ErrNotRetained) && snap == nil {
		cursor, rv, err = s.subscribeUnchanged(ctx, t, rv)
	}
	if err != nil {
		// Older than the store's history of changes, or the store relisted
		// since the snapshot was taken.
		return false, ReasonNotRetained
	}
	s.stream(w, r, d, t, cursor, rv, initial)
	return true, d.Reason
}

// chooseStart finds where watch d of t starts, writing nothing: the
// snapshot of a watch-list's initial events (nil for a watch from a
// resourceVersion, Action From) and the resourceVersion its stream of
// changes follows. It waits for, or proves, the freshness the start needs.
// Instead it returns the reason to pass the watch through, or tooLarge:
// the apiserver's 504 "Too large resource version" Status for a
// watch-list from a resourceVersion etcd had not reached, to answer with
// one ERROR event.
func (s *Server) chooseStart(ctx context.Context, d Decision, t Target) (snap *snapshot.Snapshot, rv uint64, tooLarge *metav1.Status, reason Reason) {
	if d.Defaulted && !t.WatchListDefaults {
		return nil, 0, nil, ReasonLegacyInitialEvents
	}
	if t.Table != nil {
		if d.Bookmarks && t.Table.Bookmark == nil {
			return nil, 0, nil, ReasonTableWatch
		}
	} else if _, err := bookmarkItem(t.Format, t.Type, 1, true); err != nil {
		// A type whose bookmark cannot be built passes through up front.
		return nil, 0, nil, ReasonUnsupportedType
	}
	var err error
	switch d.Action {
	case InitialConsistent:
		var ok bool
		if t.Consistent == nil {
			return nil, 0, nil, ReasonNoConsistentRead
		}
		if snap, rv, ok = t.Consistent(ctx); !ok {
			return nil, 0, nil, ReasonConsistentUnproven
		}
	case InitialLatest:
		if snap, rv, err = t.Store.Latest(); err != nil {
			return nil, 0, nil, ReasonNotSynced
		}
	case InitialNotOlderThan:
		if t.NotOlderThan != nil {
			snap, rv, tooLarge = t.NotOlderThan(ctx, d.RV, s.cfg.NotOlderThanWait)
			if tooLarge != nil {
				return nil, 0, tooLarge, ""
			}
			if snap == nil {
				return nil, 0, nil, ReasonNotOlderThanTimeout
			}
			break
		}
		wctx, cancel := context.WithTimeout(ctx, s.cfg.NotOlderThanWait)
		snap, rv, err = t.Store.WaitFor(wctx, d.RV)
		cancel()
		if err != nil {
			return nil, 0, nil, ReasonNotOlderThanTimeout
		}
	case From:
		// A later RV than the store's progress (a consistent read's,
		// another replica's) is served once Holds proves that every
		// change after it will reach the store, else it is the
		// apiserver's.
		if !t.Store.Synced() {
			return nil, 0, nil, ReasonResourceVersionAhead
		}
		if d.RV > t.Store.Progress() && (t.Holds == nil || !t.Holds(ctx, d.RV)) {
			return nil, 0, nil, ReasonResourceVersionAhead
		}
		rv = d.RV
	default:
		return nil, 0, nil, ReasonPassThrough
	}
	return snap, rv, nil, ""
}

// initialEvents are a watch-list's initial events, admitted: the items,
// the time they must be written by (zero: no bound), and the release of
// their admission.
type initialEvents struct {
	items   []*snapshot.Entry
	end     time.Time
	release func()
}

// stream writes a served watch's response: the head, the initial events
// (when not nil, then their admission is released), and the changes cursor
// reads after rv, until the watch ends (see Serve). It counts the watch
// in the metrics from start to end.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, d Decision, t Target, cursor *snapshot.Cursor, rv uint64, initial *initialEvents) {
	ctx := r.Context()
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
	if initial != nil {
		wr.limit = initial.end
		if err := w2.sendInitial(ctx, initial.items, rv); err != nil {
			reason = w2.endReason(ctx, err)
		}
		wr.limit = time.Time{}
		initial.release()
	}
	if reason == "" {
		reason = w2.stream(ctx)
	}
	wr.close(reason == EndTooSlow || wr.err != nil)
	m.ended(labels, reason)
}

// sameColumns reports whether every item's Table row was rendered under
// cols.
func sameColumns(items []*snapshot.Entry, cols *stores.TableColumns) bool {
	for _, e := range items {
		if row, ok := e.Extra.(*stores.TableRow); !ok || row.Columns != cols {
			return false
		}
	}
	return true
}

// initialSelection is how t's initial events are found in a snapshot.
func (t Target) initialSelection() collection.Selection {
	if t.Initial != nil {
		return *t.Initial
	}
	return collection.Selection{Namespace: t.Namespace, Match: t.Match}
}

// admitInitial selects the objects of snap that t's initial events carry,
// reading each object in the selection's scope once, and admits writing
// them with t.Admit, weighed by their bytes (see Target.Admit). With
// selectors the weight is the selection's bytes, so the objects are
// selected first and the selection (a pointer per selected object; snap
// holds the objects anyway) is kept while the watch-list waits for room;
// without, the weight comes from snap's counts and the objects are
// selected once admitted. It returns the items, the slot to release once
// they are written and the time they must be written by (zero: no bound),
// or the Status rejecting the watch.
func (s *Server) admitInitial(ctx context.Context, snap *snapshot.Snapshot, t Target) ([]*snapshot.Entry, func(), time.Time, *apierrors.StatusError) {
	sel := t.initialSelection()
	if t.Admit == nil {
		return sel.All(snap), func() {}, time.Time{}, nil
	}
	var (
		items  []*snapshot.Entry
		weight int64
	)
	if t.Match != nil {
		items = sel.All(snap)
		for _, e := range items {
			weight += int64(len(e.Raw))
		}
	} else {
		weight = unselectedWeight(snap, t.Namespace)
	}
	release, deadline, rejected := t.Admit.AdmitWatchList(ctx, weight)
	if rejected != nil {
		return nil, nil, time.Time{}, rejected
	}
	if t.Match == nil {
		items = sel.All(snap)
	}
	return items, release, deadline, nil
}

// unselectedWeight is the bytes of the objects of a watch-list without
// selectors: all of snap's, or namespace's share by the mean object size.
func unselectedWeight(snap *snapshot.Snapshot, namespace string) int64 {
	switch {
	case namespace == "":
		return snap.Bytes()
	case snap.Len() > 0:
		return int64(snap.Count(namespace)) * (snap.Bytes() / int64(snap.Len()))
	}
	return 0
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
	s.writeHead(w, r, d, t, wr)
	wr.errorEvent(status, t.Resource)
	n := wr.queued()
	reason := EndError
	if err := wr.flush(); err != nil {
		reason = EndClientGone
	}
	m.event(labels, wire.Error)
	m.sent(labels, n)
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
	if t.WatchListGzip && d.Action != From && d.Bookmarks && collection.AcceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		wr.gzip = true
	}
	w.WriteHeader(http.StatusOK)
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
