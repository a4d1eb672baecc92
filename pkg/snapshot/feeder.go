package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Lister reads one resource's collection in one representation.
type Lister interface {
	// List reads one page of the collection at the latest resourceVersion
	// (or, with continueToken, the continuation of an earlier page) and calls
	// item with each item's bytes, which are only valid during the call.
	List(ctx context.Context, limit int64, continueToken string, item func(raw []byte) error) (ListResult, error)
}

// Source is where a Feeder reads one resource in one representation.
type Source interface {
	Lister
	// Watch opens a watch with bookmarks starting after resourceVersion rv.
	Watch(ctx context.Context, rv string) (Watch, error)
}

// ListResult is the metadata of one list page.
type ListResult struct {
	ResourceVersion string
	Continue        string
}

// Watch is an open watch stream.
type Watch interface {
	// Next blocks for the next event; io.EOF when the stream ends.
	Next() (WatchEvent, error)
	Close() error
}

// EventType is a watch event type, as the apiserver spells it.
type EventType string

// Watch event types.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// WatchEvent is one decoded watch event. Object is the object in list-item
// form, valid until the next call to Next.
type WatchEvent struct {
	Type            EventType
	Object          []byte
	ResourceVersion string
}

// Errors a Source reports.
var (
	// ErrGone means the requested resourceVersion is no longer available
	// (HTTP 410 or a watch ERROR event); the feeder relists.
	ErrGone = errors.New("resource version gone")
	// ErrNotFound means the apiserver no longer serves the resource (HTTP
	// 404, e.g. its CustomResourceDefinition was deleted); the store stops
	// serving until a list succeeds again.
	ErrNotFound = errors.New("resource not served")
	// ErrWarmRejected means a Warm lister read a list but could not show
	// it to be Source's (FeederConfig.Warm): the feeder lists from Source,
	// and OnWarm is told why.
	ErrWarmRejected = errors.New("warm list rejected")
)

// Reasons a watch is re-established, as reported to OnWatchRestart (a
// metric label: a fixed set).
const (
	// RestartClosed: the apiserver ended the stream (e.g. its timeout).
	RestartClosed = "closed"
	// RestartError: the stream failed (connection lost, bad event).
	RestartError = "error"
	// RestartGone: the resourceVersion was too old; the feeder relists.
	RestartGone = "gone"
	// RestartStalled: a watch request unanswered for StallTimeout, or an
	// open watch silent for that long that FeederConfig.Stalled found
	// broken.
	RestartStalled = "stalled"
	// RestartLagging: a caller of Restart proved the store behind (by
	// etcd's revisions) for too long.
	RestartLagging = "lagging"
)

// RestartReasons lists every reason OnWatchRestart may report.
var RestartReasons = []string{RestartClosed, RestartError, RestartGone, RestartStalled, RestartLagging}

// DefaultStallTimeout is how long a watch request may stay unanswered
// before it is abandoned, and how often an open watch that delivers nothing
// is checked with FeederConfig.Stalled. Silence alone proves nothing:
// resources without a watch cache (events by default, everything under
// --watch-cache=false) get no bookmarks. Not measured.
const DefaultStallTimeout = 3 * time.Minute

// Extractor builds an Entry (Key, Namespace, Name, RV, Labels, Fields) from an
// item's bytes. It must copy raw into Entry.Raw if it keeps it.
type Extractor func(raw []byte) (*Entry, error)

// FeederConfig configures a Feeder.
type FeederConfig struct {
	Store   *Store
	Source  Source
	Extract Extractor
	// Warm, when set, is read instead of Source for the feeder's first
	// list only: another replica of listproxy that holds the resource
	// already. What it lists must be the collection at the list's
	// resourceVersion, as Source's list would be (a consistent list of
	// the same apiserver); the watch that follows is Source's, from that
	// resourceVersion. When it fails, the first list is read from Source
	// at once; a Warm that read a list it cannot show to be Source's fails
	// with ErrWarmRejected.
	Warm Lister
	// OnWarm, when set, is called with the outcome of the list from Warm
	// (nil: the store was filled from it).
	OnWarm func(err error)
	// PageSize is the limit of each page of the initial list; 0 selects 500.
	PageSize int64
	// StallTimeout abandons a watch request that got no answer for this
	// long, and asks Stalled about an open watch that delivered no event
	// and no bookmark for this long; an abandoned watch is re-established
	// from the last resourceVersion. 0 selects DefaultStallTimeout;
	// negative never abandons a watch.
	StallTimeout time.Duration
	// Stalled, when set, decides whether an open watch silent for
	// StallTimeout is broken (for example: etcd shows changes the store
	// lacks); it should return within a few seconds or when ctx ends. A
	// silent watch it does not call broken, or any silent open watch when
	// it is nil, is kept: quiet is not broken, and a dead connection ends
	// the read by itself through the transport's health checks (client-go's
	// HTTP/2 pings, TCP keepalives).
	Stalled func(ctx context.Context) bool
	// Clock drives backoff and stall detection; nil selects the real clock.
	Clock clock.WithTicker
	// OnRelist and OnWatchRestart, when set, observe the feeder (metrics).
	// OnWatchRestart gets one of RestartReasons.
	OnRelist       func()
	OnWatchRestart func(reason string)
	// OnWatching, when set, is called with true when a watch is open and
	// with false when it ends (the feeder is then reconnecting or listing).
	OnWatching func(open bool)
	// OnProgress, when set, is called with the clock's time after each
	// complete list and each watch event or bookmark.
	OnProgress func(at time.Time)
	// Name identifies the feeder in logs.
	Name string
}

// Feeder keeps a Store equal to the apiserver: a paginated LIST, then a
// WATCH with bookmarks from the list's resourceVersion; a broken watch
// resumes from the last seen resourceVersion, and 410 Gone relists. A watch
// request unanswered for StallTimeout, a silent watch that Stalled calls
// broken, or a watch that Restart is called for, is abandoned and resumed
// the same way.
type Feeder struct {
	cfg FeederConfig

	// watchID identifies the open watch, 0 while none is open (readers of
	// the store ask on every request: no lock).
	watchID atomic.Uint64
	// watches counts the watches opened; Run's goroutine only.
	watches uint64
	// listFailing is true from a failed list until the next list succeeds.
	listFailing atomic.Bool

	// mu guards abandon.
	mu sync.Mutex
	// abandon ends the current watch (or watch request); nil between
	// watches. It is set before watchID and cleared after it.
	abandon context.CancelCauseFunc
}

// abandonedError is the cause of a watch the feeder ended itself.
type abandonedError struct{ reason string }

func (e *abandonedError) Error() string { return "watch abandoned: " + e.reason }

// NewFeeder returns a feeder; Run starts it.
func NewFeeder(cfg FeederConfig) *Feeder {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	return &Feeder{cfg: cfg}
}

// Watching reports whether a watch is open, i.e. whether the store follows
// the apiserver. It is false while the feeder lists, relists or reconnects;
// the store then serves what it last saw. A silent watch counts as open
// until StallTimeout abandons it.
func (f *Feeder) Watching() bool { return f.WatchID() != 0 }

// ListFailing reports whether the feeder's last list failed (it is
// backing off before the next attempt). Readers of a store that has not
// synced use it to tell a first list in flight, worth waiting for, from one
// that keeps failing (for example: listproxy may not list the resource).
func (f *Feeder) ListFailing() bool { return f.listFailing.Load() }

// WatchID identifies the open watch for Restart: a value of its own for
// every watch, 0 while none is open.
func (f *Feeder) WatchID() uint64 { return f.watchID.Load() }

// Restart abandons watch id (from WatchID) if it is still open; Run resumes
// from the last resourceVersion and reports reason (one of RestartReasons)
// to OnWatchRestart. It returns false, doing nothing, when that watch has
// ended meanwhile or none is open: the feeder is then already reconnecting
// or listing.
func (f *Feeder) Restart(id uint64, reason string) bool {
	f.mu.Lock()
	abandon := f.abandon
	f.mu.Unlock()
	// Watch id's abandon stays set while id is open.
	if abandon == nil || id == 0 || f.watchID.Load() != id {
		return false
	}
	abandon(&abandonedError{reason: reason})
	return true
}

// Run feeds the store until ctx is done, then stops the store.
func (f *Feeder) Run(ctx context.Context) {
	defer f.cfg.Store.Stop()
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 10 * time.Second}
	rv := ""
	warm := f.cfg.Warm
	for ctx.Err() == nil {
		if rv == "" {
			listRV, err := f.firstOrRelist(ctx, &warm)
			f.listFailing.Store(err != nil && ctx.Err() == nil)
			if errors.Is(err, ErrNotFound) {
				f.cfg.Store.Unsync()
			}
			if err != nil {
				if ctx.Err() == nil {
					klog.ErrorS(err, "List failed; retrying", "store", f.cfg.Name)
				}
				f.sleep(ctx, &backoff)
				continue
			}
			if f.cfg.OnRelist != nil {
				f.cfg.OnRelist()
			}
			if f.cfg.OnProgress != nil {
				f.cfg.OnProgress(f.cfg.Clock.Now())
			}
			rv = listRV
		}
		lastRV, progressed, err := f.watch(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotFound) {
			f.cfg.Store.Unsync()
			rv = ""
			f.sleep(ctx, &backoff)
			continue
		}
		rv = lastRV
		reason := RestartClosed
		var abandoned *abandonedError
		switch {
		case errors.Is(err, ErrGone):
			reason, rv = RestartGone, ""
		case errors.As(err, &abandoned):
			reason = abandoned.reason
			klog.InfoS("Watch abandoned; re-establishing it", "store", f.cfg.Name, "reason", reason, "resourceVersion", rv)
		case err != nil:
			reason = RestartError
			klog.V(2).InfoS("Watch ended", "store", f.cfg.Name, "err", err)
		}
		if f.cfg.OnWatchRestart != nil {
			f.cfg.OnWatchRestart(reason)
		}
		if progressed {
			backoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 10 * time.Second}
		} else if reason != RestartGone {
			f.sleep(ctx, &backoff)
		}
	}
}

func (f *Feeder) sleep(ctx context.Context, b *wait.Backoff) {
	d := b.Step()
	t := f.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// firstOrRelist lists from *warm the first time, when it is set, and from
// Source otherwise or when that fails; it clears *warm.
func (f *Feeder) firstOrRelist(ctx context.Context, warm *Lister) (string, error) {
	if *warm != nil {
		from := *warm
		*warm = nil
		rv, err := f.list(ctx, from)
		if ctx.Err() != nil {
			return "", err
		}
		if f.cfg.OnWarm != nil {
			f.cfg.OnWarm(err)
		}
		if err == nil {
			klog.V(2).InfoS("Filled from a peer", "store", f.cfg.Name, "resourceVersion", rv)
			return rv, nil
		}
		if errors.Is(err, ErrWarmRejected) {
			klog.InfoS("List from a peer rejected; listing from the apiserver", "store", f.cfg.Name, "err", err)
		} else {
			klog.InfoS("List from a peer failed; listing from the apiserver", "store", f.cfg.Name, "err", err)
		}
	}
	return f.list(ctx, f.cfg.Source)
}

// list reads the whole collection from src page by page and replaces the
// store.
func (f *Feeder) list(ctx context.Context, src Lister) (string, error) {
	var entries []*Entry
	var listRV, token string
	for {
		pageStart := len(entries)
		res, err := src.List(ctx, f.cfg.PageSize, token, func(raw []byte) error {
			e, err := f.cfg.Extract(raw)
			if err != nil {
				return fmt.Errorf("extract list item: %w", err)
			}
			entries = append(entries, e)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("list: %w", err)
		}
		f.cfg.Store.Pack(entries[pageStart:])
		if listRV == "" {
			listRV = res.ResourceVersion
		}
		if res.Continue == "" {
			break
		}
		token = res.Continue
	}
	rv, err := strconv.ParseUint(listRV, 10, 64)
	if err != nil {
		return "", fmt.Errorf("list resourceVersion %q: %w", listRV, err)
	}
	f.cfg.Store.Replace(entries, rv)
	klog.V(2).InfoS("Listed", "store", f.cfg.Name, "objects", len(entries), "resourceVersion", rv)
	return listRV, nil
}

// watch applies events until the stream ends. It returns the resourceVersion
// to resume from and whether any event arrived. A watch the feeder abandons
// (stalled, or Restart) returns an error wrapping *abandonedError.
func (f *Feeder) watch(ctx context.Context, rv string) (string, bool, error) {
	wctx, abandon := context.WithCancelCause(ctx)
	var last atomic.Int64 // unix nanoseconds of the last progress
	last.Store(f.cfg.Clock.Now().UnixNano())
	var opened atomic.Bool // the watch request was answered
	watchdogDone := make(chan struct{})
	if f.cfg.StallTimeout > 0 {
		// The first timer exists before the request is sent, so that a
		// request that never answers is abandoned too.
		t := f.cfg.Clock.NewTimer(f.cfg.StallTimeout)
		go func() {
			defer close(watchdogDone)
			f.watchdog(wctx, abandon, t, &last, &opened)
		}()
	} else {
		close(watchdogDone)
	}
	f.setAbandon(abandon)
	defer func() {
		f.setAbandon(nil)
		abandon(nil)
		<-watchdogDone
	}()

	w, err := f.cfg.Source.Watch(wctx, rv)
	if err != nil {
		return rv, false, fmt.Errorf("watch: %w", abandonCause(ctx, wctx, err))
	}
	// Closing ends the read of the watch response; the events already read
	// are applied and there is nothing to lose or retry if it fails.
	defer func() { _ = w.Close() }()
	opened.Store(true)
	f.setWatching(true)
	defer f.setWatching(false)
	progressed := false
	for {
		ev, err := w.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return rv, progressed, abandonCause(ctx, wctx, err)
		}
		now := f.cfg.Clock.Now()
		last.Store(now.UnixNano())
		if f.cfg.OnProgress != nil {
			f.cfg.OnProgress(now)
		}
		switch ev.Type {
		case Error:
			return rv, progressed, fmt.Errorf("watch error event: %w", ErrGone)
		case Bookmark:
			n, err := strconv.ParseUint(ev.ResourceVersion, 10, 64)
			if err != nil {
				return rv, progressed, fmt.Errorf("bookmark resourceVersion %q: %w", ev.ResourceVersion, err)
			}
			f.cfg.Store.MarkProgress(n)
			rv, progressed = ev.ResourceVersion, true
		case Added, Modified, Deleted:
			e, err := f.cfg.Extract(ev.Object)
			if err != nil {
				// The stream is unusable if an object cannot be read: relist
				// rather than serve a store that misses it.
				return rv, progressed, fmt.Errorf("extract %s event: %w: %w", ev.Type, err, ErrGone)
			}
			f.cfg.Store.Apply(Change{Deleted: ev.Type == Deleted, Entry: e}, e.RV)
			rv, progressed = strconv.FormatUint(e.RV, 10), true
		default:
			return rv, progressed, fmt.Errorf("unknown watch event type %q: %w", ev.Type, ErrGone)
		}
	}
}

// abandonCause returns the reason the feeder abandoned the watch of wctx in
// place of err (a read cut short), or err if it did not.
func abandonCause(ctx, wctx context.Context, err error) error {
	var abandoned *abandonedError
	if ctx.Err() == nil && errors.As(context.Cause(wctx), &abandoned) {
		return abandoned
	}
	return err
}

// watchdog abandons the watch request of ctx once last (unix nanoseconds)
// is StallTimeout old and the request is still unanswered (opened false),
// or the watch is open and Stalled calls it broken. t is its first timer,
// already started.
func (f *Feeder) watchdog(ctx context.Context, abandon context.CancelCauseFunc, t clock.Timer, last *atomic.Int64, opened *atomic.Bool) {
	for {
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		silent := f.cfg.Clock.Since(time.Unix(0, last.Load()))
		if silent < f.cfg.StallTimeout {
			t = f.cfg.Clock.NewTimer(f.cfg.StallTimeout - silent)
			continue
		}
		switch {
		case !opened.Load():
			klog.InfoS("Watch request unanswered; abandoning it", "store", f.cfg.Name, "waitedFor", silent)
		case f.cfg.Stalled != nil && f.cfg.Stalled(ctx):
			klog.InfoS("Watch stalled: silent, and found broken", "store", f.cfg.Name, "silentFor", silent)
		default:
			// Quiet, not broken: look again after another StallTimeout.
			klog.V(4).InfoS("Watch quiet", "store", f.cfg.Name, "silentFor", silent)
			t = f.cfg.Clock.NewTimer(f.cfg.StallTimeout)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		abandon(&abandonedError{reason: RestartStalled})
		return
	}
}

func (f *Feeder) setAbandon(abandon context.CancelCauseFunc) {
	f.mu.Lock()
	f.abandon = abandon
	f.mu.Unlock()
}

func (f *Feeder) setWatching(open bool) {
	if open {
		f.watches++
		f.watchID.Store(f.watches)
	} else {
		f.watchID.Store(0)
	}
	if f.cfg.OnWatching != nil {
		f.cfg.OnWatching(open)
	}
}
