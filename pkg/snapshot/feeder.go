package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Source is where a Feeder reads one resource in one representation.
type Source interface {
	// List reads one page of the collection at the latest resourceVersion
	// (or, with continueToken, the continuation of an earlier page) and calls
	// item with each item's bytes, which are only valid during the call.
	List(ctx context.Context, limit int64, continueToken string, item func(raw []byte) error) (ListResult, error)
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
)

// Extractor builds an Entry (Key, Namespace, Name, RV, Labels, Fields) from an
// item's bytes. It must copy raw into Entry.Raw if it keeps it.
type Extractor func(raw []byte) (*Entry, error)

// FeederConfig configures a Feeder.
type FeederConfig struct {
	Store   *Store
	Source  Source
	Extract Extractor
	// PageSize is the limit of each page of the initial list; 0 selects 500.
	PageSize int64
	// Clock drives backoff; nil selects the real clock.
	Clock clock.WithTicker
	// OnRelist and OnWatchRestart, when set, observe the feeder (metrics).
	OnRelist       func()
	OnWatchRestart func(reason string)
	// Name identifies the feeder in logs.
	Name string
}

// Feeder keeps a Store equal to the apiserver: a paginated LIST, then a
// WATCH with bookmarks from the list's resourceVersion; a broken watch
// resumes from the last seen resourceVersion, and 410 Gone relists.
type Feeder struct {
	cfg FeederConfig
}

// NewFeeder returns a feeder; Run starts it.
func NewFeeder(cfg FeederConfig) *Feeder {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Feeder{cfg: cfg}
}

// Run feeds the store until ctx is done, then stops the store.
func (f *Feeder) Run(ctx context.Context) {
	defer f.cfg.Store.Stop()
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 10 * time.Second}
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			listRV, err := f.list(ctx)
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
		reason := "closed"
		switch {
		case errors.Is(err, ErrGone):
			reason, rv = "gone", ""
		case err != nil:
			reason = "error"
			klog.V(2).InfoS("Watch ended", "store", f.cfg.Name, "err", err)
		}
		if f.cfg.OnWatchRestart != nil {
			f.cfg.OnWatchRestart(reason)
		}
		if progressed {
			backoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 10 * time.Second}
		} else if reason != "gone" {
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

// list reads the whole collection page by page and replaces the store.
func (f *Feeder) list(ctx context.Context) (string, error) {
	var entries []*Entry
	var listRV, token string
	for {
		res, err := f.cfg.Source.List(ctx, f.cfg.PageSize, token, func(raw []byte) error {
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
// to resume from and whether any event arrived.
func (f *Feeder) watch(ctx context.Context, rv string) (string, bool, error) {
	w, err := f.cfg.Source.Watch(ctx, rv)
	if err != nil {
		return rv, false, fmt.Errorf("watch: %w", err)
	}
	// Closing ends the read of the watch response; the events already read
	// are applied and there is nothing to lose or retry if it fails.
	defer func() { _ = w.Close() }()
	progressed := false
	for {
		ev, err := w.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return rv, progressed, err
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
