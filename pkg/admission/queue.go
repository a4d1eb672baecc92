package admission

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
)

// Config bounds the snapshot-served responses being written at once (LIST
// responses and watch-lists' initial events), so that a LIST storm costs
// bounded memory and every admitted response finishes in time instead of
// all of them sharing the bandwidth until they all time out.
//
// A response weighs the encoded bytes of its items: a thousand small pages
// fit where two full lists of a large cluster queue. The caller weighs it
// (see Queue.Admit). A response heavier than MaxBytes weighs MaxBytes, so
// it is written alone rather than never. Responses are admitted in arrival
// order (a heavy one at the head is not overtaken, so it cannot starve);
// the rest wait up to QueueWait, then get the apiserver's 429 with
// Retry-After. They never pass through: that would move the storm onto the
// apiserver.
type Config struct {
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
	Metrics *Metrics
	// Clock times queue waits and write deadlines; nil is the real clock.
	Clock clock.Clock
}

// DefaultConfig returns listproxy's bounds; the command's flags start from
// them. Not measured: the apiserver's --max-requests-inflight for reads;
// 2 GiB of responses, so that three full lists of 150k pods (~600 MB of
// JSON each) are written at once and a larger one alone; its 60s request
// timeout.
func DefaultConfig() Config {
	return Config{
		MaxLists:     400,
		MaxBytes:     2 << 30,
		QueueWait:    5 * time.Second,
		WriteTimeout: 60 * time.Second,
	}
}

// retryAfterSeconds is the Retry-After of a rejected response: the
// apiserver's own for requests its priority and fairness filter rejects.
const retryAfterSeconds = 1

// errQueueTimeout: a response waited QueueWait without room to be written.
var errQueueTimeout = errors.New("no room to write the list in time")

// Queue admits responses by Config. Its zero bounds admit every response
// at once.
type Queue struct {
	cfg   Config
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

// NewQueue returns a Queue admitting by cfg.
func NewQueue(cfg Config) *Queue {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Queue{cfg: cfg, clock: clk}
}

// Admit admits a response weighing weight bytes for writing: at once when
// it fits and none is queued, else once it fits at the head of the queue,
// waiting up to QueueWait. onWait, when not nil, is called once before the
// response waits, so that the caller can drop what it holds meanwhile (a
// LIST page selected for its weight). On rejection (no room in time, or
// ctx done while queued) Admit returns the apiserver's 429 to answer
// with; otherwise the caller must release the slot.
func (q *Queue) Admit(ctx context.Context, weight int64, onWait func()) (*Slot, *apierrors.StatusError) {
	w := q.enqueue(weight)
	if w == nil {
		return nil, tooManyRequestsError()
	}
	if !w.admitted() {
		if onWait != nil {
			onWait()
		}
		if err := q.wait(ctx, w); err != nil {
			return nil, tooManyRequestsError()
		}
	}
	return &Slot{q: q, weight: w.weight}, nil
}

// AdmitWatchList admits the initial events of a watch-list weighing weight
// bytes as a LIST response is admitted (Admit: same bounds, queue and
// 429): a storm of informers' watch-lists is a LIST storm. It returns the
// slot's release, which may be called more than once, and the deadline of
// writing them (Config.WriteTimeout from now; zero without one), or the
// 429.
func (q *Queue) AdmitWatchList(ctx context.Context, weight int64) (release func(), deadline time.Time, rejected *apierrors.StatusError) {
	slot, rejected := q.Admit(ctx, weight, nil)
	if rejected != nil {
		return nil, time.Time{}, rejected
	}
	if q.cfg.WriteTimeout > 0 {
		// As a LIST's (Slot.Writer).
		deadline = q.clock.Now().Add(q.cfg.WriteTimeout)
	}
	return slot.Release, deadline, nil
}

// enqueue admits a response of weight bytes at once if it fits and none is
// queued, else queues it (see wait). It returns nil, having counted a
// rejection, when nothing may queue (QueueWait 0).
func (q *Queue) enqueue(weight int64) *waiter {
	if q.cfg.MaxBytes > 0 {
		weight = min(weight, q.cfg.MaxBytes)
	}
	w := &waiter{weight: weight, ready: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 && q.fitsLocked(weight) {
		q.takeLocked(weight)
		close(w.ready)
		return w
	}
	if q.cfg.QueueWait <= 0 {
		q.cfg.Metrics.rejected(rejectedTimeout)
		return nil
	}
	w.start = q.clock.Now()
	w.timer = q.clock.NewTimer(q.cfg.QueueWait)
	q.queue = append(q.queue, w)
	q.cfg.Metrics.setQueued(len(q.queue))
	return w
}

// wait returns once w is admitted (nil), QueueWait has passed since it was
// queued (errQueueTimeout), or ctx is done (ctx's error); only when it
// returns nil must w's weight be released.
func (q *Queue) wait(ctx context.Context, w *waiter) error {
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
	q.cfg.Metrics.waited(q.clock.Since(w.start))
	if err == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.queue, w)
	if i < 0 {
		return nil // admitted meanwhile
	}
	q.queue = slices.Delete(q.queue, i, i+1)
	q.cfg.Metrics.setQueued(len(q.queue))
	// It may have been the head that held the others back.
	q.admitLocked()
	if errors.Is(err, errQueueTimeout) {
		q.cfg.Metrics.rejected(rejectedTimeout)
	} else {
		q.cfg.Metrics.rejected(rejectedCancelled)
	}
	return err
}

// release returns an admitted weight and admits queued responses that now fit.
func (q *Queue) release(weight int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lists--
	q.bytes -= weight
	q.admitLocked()
	q.cfg.Metrics.setInflight(q.lists, q.bytes)
}

func (q *Queue) fitsLocked(weight int64) bool {
	return (q.cfg.MaxLists <= 0 || q.lists < q.cfg.MaxLists) &&
		(q.cfg.MaxBytes <= 0 || q.bytes+weight <= q.cfg.MaxBytes)
}

func (q *Queue) takeLocked(weight int64) {
	q.lists++
	q.bytes += weight
	q.cfg.Metrics.setInflight(q.lists, q.bytes)
}

// admitLocked admits queued responses from the head while they fit; a
// heavy head is not overtaken, so that it cannot starve.
func (q *Queue) admitLocked() {
	n := 0
	for n < len(q.queue) && q.fitsLocked(q.queue[n].weight) {
		q.takeLocked(q.queue[n].weight)
		close(q.queue[n].ready)
		n++
	}
	if n > 0 {
		q.queue = slices.Delete(q.queue, 0, n)
		q.cfg.Metrics.setQueued(len(q.queue))
	}
}

// tooManyRequestsError is the 429 for a response that found no room in
// time.
func tooManyRequestsError() *apierrors.StatusError {
	return apierrors.NewTooManyRequests("Too many requests, please try again later.", retryAfterSeconds)
}

// Slot is an admitted response.
type Slot struct {
	q        *Queue
	weight   int64
	w        *deadlineWriter // set by Writer
	deadline time.Time
	once     sync.Once
}

// Weight is what the response counts against Config.MaxBytes: its weight
// as admitted, capped at MaxBytes.
func (s *Slot) Weight() int64 { return s.weight }

// Writer returns w with the write deadline set from now
// (Config.WriteTimeout); write the response through it.
func (s *Slot) Writer(w http.ResponseWriter) http.ResponseWriter {
	s.w = &deadlineWriter{ResponseWriter: w}
	if s.q.cfg.WriteTimeout > 0 {
		s.deadline = s.q.clock.Now().Add(s.q.cfg.WriteTimeout)
		if err := http.NewResponseController(w).SetWriteDeadline(s.deadline); err != nil {
			klog.V(4).InfoS("Cannot set a write deadline on a list response", "err", err)
		}
	}
	return s.w
}

// Release ends the response and frees its room; calls after the first do
// nothing. A response written through Writer has its write deadline
// cleared (the connection may carry more requests), or, when the deadline
// cut it short, is counted in listproxy_lists_write_timeouts_total.
func (s *Slot) Release() {
	s.once.Do(s.release)
}

func (s *Slot) release() {
	if s.w != nil && !s.deadline.IsZero() {
		if s.w.err != nil && (errors.Is(s.w.err, os.ErrDeadlineExceeded) || !s.q.clock.Now().Before(s.deadline)) {
			s.q.cfg.Metrics.writeTimedOut()
			klog.V(2).InfoS("List response not written before its deadline; closing the connection", "timeout", s.q.cfg.WriteTimeout, "err", s.w.err)
		} else {
			_ = http.NewResponseController(s.w.ResponseWriter).SetWriteDeadline(time.Time{})
		}
	}
	s.q.release(s.weight)
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
