package lists

import (
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// InflightConfig bounds the snapshot-served LIST responses being written at
// once, so that a LIST storm costs bounded memory and every admitted response
// finishes in time instead of all of them sharing the bandwidth until they
// all time out.
//
// A response weighs the encoded bytes of its items: a thousand small pages
// fit where two full lists of a large cluster queue. Without selectors the
// weight is known before the page is selected (exact for a full list, else
// the item count times the mean object size), so a queued or rejected full
// list costs nothing; with selectors it is measured on the selected page. A
// response heavier than MaxBytes weighs MaxBytes, so it is written alone
// rather than never. Responses are admitted in arrival order (a heavy one at
// the head is not overtaken, so it cannot starve); the rest wait up to
// QueueWait, then get the apiserver's 429 with Retry-After. They never pass
// through: that would move the storm onto the apiserver.
type InflightConfig struct {
	// MaxLists bounds the number of responses being written; 0 is no bound.
	MaxLists int
	// MaxBytes bounds the sum of their weights; 0 is no bound.
	MaxBytes int64
	// QueueWait bounds how long a response waits for room; 0 rejects at once.
	QueueWait time.Duration
	// WriteTimeout is each response's write deadline, counted from when it
	// starts writing (the apiserver's request timeout is 60s); past it the
	// response is cut short: its HTTP/1.1 connection is closed, its HTTP/2
	// stream reset. 0 is none.
	WriteTimeout time.Duration
	// Metrics records admission; nil records nothing.
	Metrics *InflightMetrics
	// Clock times queue waits and write deadlines; nil is the real clock.
	Clock clock.Clock
}

// inflightRetryAfterSeconds is the Retry-After of a rejected LIST: the
// apiserver's own for requests its priority and fairness filter rejects.
const inflightRetryAfterSeconds = 1

// errQueueTimeout: a response waited QueueWait without room to be written.
var errQueueTimeout = errors.New("no room to write the list in time")

// inflight admits responses by InflightConfig.
type inflight struct {
	cfg   InflightConfig
	clock clock.Clock

	mu    sync.Mutex // guards the fields below
	lists int        // admitted responses
	bytes int64      // their weights
	queue []*waiter  // waiting responses, in arrival order
}

// waiter is a response admitted or queued by enqueue.
type waiter struct {
	weight int64
	ready  chan struct{} // closed once admitted
	timer  clock.Timer   // fires after QueueWait; nil if admitted at once
	start  time.Time     // when it was queued
}

func (w *waiter) admitted() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

func newInflight(cfg InflightConfig) *inflight {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &inflight{cfg: cfg, clock: clk}
}

// enqueue admits a response of weight bytes at once if it fits and none is
// queued, else queues it (see wait). It returns nil, having counted a
// rejection, when nothing may queue (QueueWait 0).
func (f *inflight) enqueue(weight int64) *waiter {
	if f.cfg.MaxBytes > 0 {
		weight = min(weight, f.cfg.MaxBytes)
	}
	w := &waiter{weight: weight, ready: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) == 0 && f.fitsLocked(weight) {
		f.takeLocked(weight)
		close(w.ready)
		return w
	}
	if f.cfg.QueueWait <= 0 {
		f.cfg.Metrics.rejected(rejectedTimeout)
		return nil
	}
	w.start = f.clock.Now()
	w.timer = f.clock.NewTimer(f.cfg.QueueWait)
	f.queue = append(f.queue, w)
	f.cfg.Metrics.setQueued(len(f.queue))
	return w
}

// wait returns once w is admitted (nil), QueueWait has passed since it was
// queued (errQueueTimeout), or ctx is done (ctx's error); only when it
// returns nil must w's weight be released.
func (f *inflight) wait(ctx context.Context, w *waiter) error {
	if w.timer == nil {
		return nil
	}
	defer w.timer.Stop()
	var err error
	select {
	case <-w.ready:
	case <-w.timer.C():
		err = errQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	f.cfg.Metrics.waited(f.clock.Since(w.start))
	if err == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.queue, w)
	if i < 0 {
		return nil // admitted meanwhile
	}
	f.queue = slices.Delete(f.queue, i, i+1)
	f.cfg.Metrics.setQueued(len(f.queue))
	// It may have been the head that held the others back.
	f.admitLocked()
	if errors.Is(err, errQueueTimeout) {
		f.cfg.Metrics.rejected(rejectedTimeout)
	} else {
		f.cfg.Metrics.rejected(rejectedCancelled)
	}
	return err
}

// release returns an admitted weight and admits queued responses that now fit.
func (f *inflight) release(weight int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists--
	f.bytes -= weight
	f.admitLocked()
	f.cfg.Metrics.setInflight(f.lists, f.bytes)
}

func (f *inflight) fitsLocked(weight int64) bool {
	return (f.cfg.MaxLists <= 0 || f.lists < f.cfg.MaxLists) &&
		(f.cfg.MaxBytes <= 0 || f.bytes+weight <= f.cfg.MaxBytes)
}

func (f *inflight) takeLocked(weight int64) {
	f.lists++
	f.bytes += weight
	f.cfg.Metrics.setInflight(f.lists, f.bytes)
}

// admitLocked admits queued responses from the head while they fit; a
// heavy head is not overtaken, so that it cannot starve.
func (f *inflight) admitLocked() {
	n := 0
	for n < len(f.queue) && f.fitsLocked(f.queue[n].weight) {
		f.takeLocked(f.queue[n].weight)
		close(f.queue[n].ready)
		n++
	}
	if n > 0 {
		f.queue = slices.Delete(f.queue, 0, n)
		f.cfg.Metrics.setQueued(len(f.queue))
	}
}

// admit admits a response for writing and selects its page with pageFn. The
// response weighs estimate, or, when that is negative, exactly its page's
// item bytes, selected first. A response that must wait holds no page
// meanwhile (one selected for its weight is dropped and selected again once
// admitted: pageFn reads an immutable snapshot, so it is the same page). On
// rejection admit returns the 429 to answer with; otherwise the caller must
// call slot.release.
func (l *Lists) admit(ctx context.Context, estimate int64, pageFn func() (snapshot.Page, int64)) (snapshot.Page, int64, *listSlot, *apierrors.StatusError) {
	var page snapshot.Page
	var total int64
	selected := false
	weight := estimate
	if weight < 0 {
		page, total = pageFn()
		weight, selected = itemBytes(page.Items), true
	}
	w := l.inflight.enqueue(weight)
	if w == nil {
		return snapshot.Page{}, 0, nil, tooManyListsError()
	}
	if !w.admitted() {
		page, selected = snapshot.Page{}, false
		if err := l.inflight.wait(ctx, w); err != nil {
			return snapshot.Page{}, 0, nil, tooManyListsError()
		}
	}
	if !selected {
		page, total = pageFn()
	}
	return page, total, &listSlot{f: l.inflight, weight: w.weight}, nil
}

// AdmitWatchList admits the initial events of a watch-list weighing weight
// bytes as a LIST response is admitted (same bounds, queue and 429): a
// storm of informers' watch-lists is a LIST storm. It returns the slot's
// release and the deadline of writing them (InflightConfig.WriteTimeout
// from now; zero without one), or the 429.
func (l *Lists) AdmitWatchList(ctx context.Context, weight int64) (func(), time.Time, *apierrors.StatusError) {
	w := l.inflight.enqueue(weight)
	if w == nil {
		return nil, time.Time{}, tooManyListsError()
	}
	if err := l.inflight.wait(ctx, w); err != nil {
		return nil, time.Time{}, tooManyListsError()
	}
	var deadline time.Time
	if l.cfg.Inflight.WriteTimeout > 0 {
		// As a LIST's (listSlot.writer).
		deadline = l.inflight.clock.Now().Add(l.cfg.Inflight.WriteTimeout)
	}
	var once sync.Once
	return func() { once.Do(func() { l.inflight.release(w.weight) }) }, deadline, nil
}

// estimateWeight is the weight of a response without selectors, known
// without selecting its page: the items it will hold (the namespace's or all
// objects, less those returned on earlier pages, up to the limit) times the
// snapshot's mean object size; for a full list, its exact item bytes. It is
// -1 when selectors decide the items.
func (l *Lists) estimateWeight(req listRequest, d paging.Decision, token paging.Token, snap *snapshot.Snapshot) int64 {
	objects := int64(snap.Len())
	if req.Selective || objects == 0 {
		return -1
	}
	items := int64(snap.Count(req.Namespace))
	if d.Action == paging.ServeContinue {
		items = max(0, token.Total-token.Returned)
	}
	if limit := int64(l.pageLimit(req, d)); limit > 0 {
		items = min(items, limit)
	}
	if items == objects {
		return snap.Bytes()
	}
	return items * (snap.Bytes() / objects)
}

// pageLimit is the most items a page holds; 0 is no limit. Upstream's
// watch cache ignores limit for resourceVersion="0" (LimitForRV0 honours
// it); a resource without one is read from etcd, which honours it.
func (l *Lists) pageLimit(req listRequest, d paging.Decision) int {
	if d.Action == paging.ServeLatest && !l.cfg.LimitForRV0 && !req.Resource.NoWatchCache {
		return 0
	}
	return int(req.query.limit)
}

// tooManyListsError is the 429 for a LIST that found no room in time.
func tooManyListsError() *apierrors.StatusError {
	return apierrors.NewTooManyRequests("Too many requests, please try again later.", inflightRetryAfterSeconds)
}

func itemBytes(items []*snapshot.Entry) int64 {
	var n int64
	for _, e := range items {
		n += int64(len(e.Raw))
	}
	return n
}

// listSlot is an admitted response.
type listSlot struct {
	f        *inflight
	weight   int64
	w        *deadlineWriter // set by writer
	deadline time.Time
}

// writer returns w with the write deadline set from now; write the response
// through it.
func (s *listSlot) writer(w http.ResponseWriter) http.ResponseWriter {
	s.w = &deadlineWriter{ResponseWriter: w}
	if s.f.cfg.WriteTimeout > 0 {
		s.deadline = s.f.clock.Now().Add(s.f.cfg.WriteTimeout)
		if err := http.NewResponseController(w).SetWriteDeadline(s.deadline); err != nil {
			klog.V(4).InfoS("Cannot set a write deadline on a list response", "err", err)
		}
	}
	return s.w
}

// release ends the response: it clears the write deadline (the connection
// may carry more requests), counts a write cut short by it, and frees the
// slot. The snapshot is no longer referenced once the handler returns.
func (s *listSlot) release() {
	if s.w != nil && !s.deadline.IsZero() {
		if s.w.err != nil && (errors.Is(s.w.err, os.ErrDeadlineExceeded) || !s.f.clock.Now().Before(s.deadline)) {
			s.f.cfg.Metrics.writeTimedOut()
			klog.V(2).InfoS("List response not written before its deadline; closing the connection", "timeout", s.f.cfg.WriteTimeout, "err", s.w.err)
		} else {
			_ = http.NewResponseController(s.w.ResponseWriter).SetWriteDeadline(time.Time{})
		}
	}
	s.f.release(s.weight)
}

// deadlineWriter remembers the first write error.
type deadlineWriter struct {
	http.ResponseWriter
	err error
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
