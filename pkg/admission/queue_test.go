package admission

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// inflightStep either enqueues a response (enqueue, weight) or releases an
// admitted one (release); then admitted and queued must be exactly as listed.
type inflightStep struct {
	enqueue  string
	weight   int64
	release  string
	rejected bool // enqueue is rejected at once
	admitted []string
	queued   []string
}

func TestInflightAdmission(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []inflightStep
	}{
		{
			name: "unbounded",
			cfg:  Config{QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 1 << 40, admitted: []string{"a"}},
				{enqueue: "b", weight: 1 << 40, admitted: []string{"a", "b"}},
			},
		},
		{
			name: "count_bound",
			cfg:  Config{MaxLists: 2, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", admitted: []string{"a"}},
				{enqueue: "b", admitted: []string{"a", "b"}},
				{enqueue: "c", admitted: []string{"a", "b"}, queued: []string{"c"}},
				{release: "a", admitted: []string{"b", "c"}},
			},
		},
		{
			name: "byte_bound",
			cfg:  Config{MaxBytes: 100, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 60, admitted: []string{"a"}},
				{enqueue: "b", weight: 30, admitted: []string{"a", "b"}},
				{enqueue: "c", weight: 20, admitted: []string{"a", "b"}, queued: []string{"c"}},
				{release: "b", admitted: []string{"a", "c"}},
			},
		},
		{
			name: "empty_page_fits_a_full_budget",
			cfg:  Config{MaxBytes: 100, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 100, admitted: []string{"a"}},
				{enqueue: "b", weight: 0, admitted: []string{"a", "b"}},
			},
		},
		{
			name: "oversized_response_is_written_alone",
			cfg:  Config{MaxBytes: 100, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 10, admitted: []string{"a"}},
				{enqueue: "b", weight: 500, admitted: []string{"a"}, queued: []string{"b"}},
				{release: "a", admitted: []string{"b"}},
				{enqueue: "c", weight: 1, admitted: []string{"b"}, queued: []string{"c"}},
				{release: "b", admitted: []string{"c"}},
			},
		},
		{
			name: "queued_heavy_response_is_not_overtaken",
			cfg:  Config{MaxBytes: 100, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 60, admitted: []string{"a"}},
				{enqueue: "b", weight: 100, admitted: []string{"a"}, queued: []string{"b"}},
				{enqueue: "c", weight: 10, admitted: []string{"a"}, queued: []string{"b", "c"}},
				{release: "a", admitted: []string{"b"}, queued: []string{"c"}},
				{release: "b", admitted: []string{"c"}},
			},
		},
		{
			name: "release_admits_every_queued_response_that_fits",
			cfg:  Config{MaxLists: 3, MaxBytes: 100, QueueWait: time.Second},
			steps: []inflightStep{
				{enqueue: "a", weight: 100, admitted: []string{"a"}},
				{enqueue: "b", weight: 30, admitted: []string{"a"}, queued: []string{"b"}},
				{enqueue: "c", weight: 30, admitted: []string{"a"}, queued: []string{"b", "c"}},
				{enqueue: "d", weight: 50, admitted: []string{"a"}, queued: []string{"b", "c", "d"}},
				{release: "a", admitted: []string{"b", "c"}, queued: []string{"d"}},
			},
		},
		{
			name: "no_queue",
			cfg:  Config{MaxLists: 1},
			steps: []inflightStep{
				{enqueue: "a", admitted: []string{"a"}},
				{enqueue: "b", rejected: true, admitted: []string{"a"}},
				{release: "a"},
				{enqueue: "c", admitted: []string{"c"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Clock = clocktesting.NewFakeClock(time.Now())
			f := NewQueue(tc.cfg)
			waiters := map[string]*waiter{}
			var order []string
			for i, s := range tc.steps {
				if s.enqueue != "" {
					w := f.enqueue(s.weight)
					if (w == nil) != s.rejected {
						t.Fatalf("step %d: enqueue %s: rejected %v, want %v", i, s.enqueue, w == nil, s.rejected)
					}
					if w != nil {
						waiters[s.enqueue] = w
						order = append(order, s.enqueue)
					}
				} else {
					w := waiters[s.release]
					if !w.admitted() {
						t.Fatalf("step %d: release %s, which is not admitted", i, s.release)
					}
					f.release(w.weight)
					delete(waiters, s.release)
				}
				var admitted, queued []string
				for _, name := range order {
					if w, ok := waiters[name]; ok && w.admitted() {
						admitted = append(admitted, name)
					} else if ok {
						queued = append(queued, name)
					}
				}
				if diff := cmp.Diff(s.admitted, admitted); diff != "" {
					t.Errorf("step %d: admitted (-want +got):\n%s", i, diff)
				}
				if diff := cmp.Diff(s.queued, queued); diff != "" {
					t.Errorf("step %d: queued (-want +got):\n%s", i, diff)
				}
				if got := len(f.queue); got != len(queued) {
					t.Errorf("step %d: limiter queues %d, want %d", i, got, len(queued))
				}
			}
		})
	}
}

// TestInflightWait covers how a queued response stops waiting.
func TestInflightWait(t *testing.T) {
	const queueWait = 5 * time.Second
	tests := []struct {
		name string
		// act runs while "b" waits behind "a" (60 of 100 bytes) and "c"
		// (10 bytes) waits behind "b" (100 bytes).
		act      func(clk *clocktesting.FakeClock, f *Queue, a *waiter, cancelB context.CancelFunc)
		wantErr  error // from b's wait
		wantC    bool  // c admitted afterwards
		rejected map[string]float64
	}{
		{
			name:     "times_out",
			act:      func(clk *clocktesting.FakeClock, _ *Queue, _ *waiter, _ context.CancelFunc) { clk.Step(queueWait) },
			wantErr:  errQueueTimeout,
			wantC:    true, // c was held back by b only
			rejected: map[string]float64{rejectedTimeout: 1},
		},
		{
			name: "client_leaves_and_unblocks_the_queue",
			act: func(_ *clocktesting.FakeClock, _ *Queue, _ *waiter, cancelB context.CancelFunc) {
				cancelB()
			},
			wantErr:  context.Canceled,
			wantC:    true,
			rejected: map[string]float64{rejectedCancelled: 1},
		},
		{
			name: "admitted",
			act: func(_ *clocktesting.FakeClock, f *Queue, a *waiter, _ context.CancelFunc) {
				f.release(a.weight)
			},
		},
		{
			// Admitted and timed out at once: either way b holds its slot.
			name: "admitted_as_the_wait_ends",
			act: func(clk *clocktesting.FakeClock, f *Queue, a *waiter, _ context.CancelFunc) {
				f.release(a.weight)
				clk.Step(queueWait)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Now())
			f := NewQueue(Config{MaxBytes: 100, QueueWait: queueWait, Clock: clk, Metrics: m})
			a := f.enqueue(60)
			b := f.enqueue(100)
			c := f.enqueue(10)
			if !a.admitted() || b.admitted() || c.admitted() {
				t.Fatalf("admitted a, b, c = %v, %v, %v; want true, false, false", a.admitted(), b.admitted(), c.admitted())
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- f.wait(ctx, b) }()
			tc.act(clk, f, a, cancel)
			if err := <-done; !errors.Is(err, tc.wantErr) {
				t.Errorf("wait = %v, want %v", err, tc.wantErr)
			}
			if c.admitted() != tc.wantC {
				t.Errorf("c admitted = %v, want %v", c.admitted(), tc.wantC)
			}
			for _, reason := range []string{rejectedTimeout, rejectedCancelled} {
				if got := testutil.ToFloat64(m.rejections.WithLabelValues(reason)); got != tc.rejected[reason] {
					t.Errorf("rejected{reason=%q} = %v, want %v", reason, got, tc.rejected[reason])
				}
			}
			lists, bytes := f.inflightCountsForTest()
			if got := testutil.ToFloat64(m.inflight); got != float64(lists) {
				t.Errorf("inflight gauge = %v, want %d", got, lists)
			}
			if got := testutil.ToFloat64(m.inflightBytes); got != float64(bytes) {
				t.Errorf("inflight_bytes gauge = %v, want %d", got, bytes)
			}
			if got := testutil.ToFloat64(m.queued); got != float64(len(f.queue)) {
				t.Errorf("queued gauge = %v, want %d", got, len(f.queue))
			}
			if got := testutil.CollectAndCount(m.queueWait); got != 1 {
				t.Errorf("queue_wait_seconds has %d series, want 1", got)
			}
		})
	}
}

// deadlineRecorder is a ResponseWriter whose write deadline and write error
// a test controls.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
	writeErr  error
}

func (r *deadlineRecorder) SetWriteDeadline(d time.Time) error {
	r.deadlines = append(r.deadlines, d)
	return nil
}

func (r *deadlineRecorder) Write(b []byte) (int, error) {
	if r.writeErr != nil {
		return 0, r.writeErr
	}
	return r.ResponseRecorder.Write(b)
}

func TestSlotWriteDeadline(t *testing.T) {
	const timeout = time.Minute
	now := time.Now()
	tests := []struct {
		name          string
		timeout       time.Duration
		writeErr      error
		wantDeadlines []time.Time
		wantTimeouts  float64
	}{
		{name: "written", timeout: timeout, wantDeadlines: []time.Time{now.Add(timeout), {}}},
		{name: "deadline_passed", timeout: timeout, writeErr: os.ErrDeadlineExceeded, wantDeadlines: []time.Time{now.Add(timeout)}, wantTimeouts: 1},
		// Another failure (the client left) is not a timeout; the connection
		// is closed anyway.
		{name: "client_gone", timeout: timeout, writeErr: errors.New("broken pipe"), wantDeadlines: []time.Time{now.Add(timeout), {}}},
		{name: "no_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewPedanticRegistry())
			if err != nil {
				t.Fatal(err)
			}
			f := NewQueue(Config{MaxLists: 1, WriteTimeout: tc.timeout, Clock: clocktesting.NewFakeClock(now), Metrics: m})
			w := f.enqueue(42)
			slot := &Slot{q: f, weight: w.weight}
			rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder(), writeErr: tc.writeErr}
			_, _ = slot.Writer(rec).Write([]byte("items"))
			slot.Release()
			if diff := cmp.Diff(tc.wantDeadlines, rec.deadlines); diff != "" {
				t.Errorf("write deadlines (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(m.writeTimeouts); got != tc.wantTimeouts {
				t.Errorf("write_timeouts_total = %v, want %v", got, tc.wantTimeouts)
			}
			if lists, bytes := f.inflightCountsForTest(); lists != 0 || bytes != 0 {
				t.Errorf("after release: %d lists, %d bytes in flight; want none", lists, bytes)
			}
		})
	}
}

// TestSlotWriteTimeout: a client that stops reading holds a response
// only until its write deadline; then the write fails, the slot is freed,
// and the client sees the response end (HTTP/1.1: the connection closes;
// HTTP/2: the stream is reset).
func TestSlotWriteTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		http2 bool
	}{{name: "http1"}, {name: "http2", http2: true}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewPedanticRegistry())
			if err != nil {
				t.Fatal(err)
			}
			f := NewQueue(Config{MaxLists: 1, WriteTimeout: 200 * time.Millisecond, Metrics: m})
			handlerDone := make(chan error, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				var err error
				func() {
					slot := &Slot{q: f, weight: f.enqueue(1).weight}
					defer slot.Release()
					ww := slot.Writer(w)
					chunk := make([]byte, 1<<20)
					// Far more than socket buffers and flow-control
					// windows hold; the write must fail first.
					for range 1 << 10 {
						if _, err = ww.Write(chunk); err != nil {
							return
						}
					}
				}()
				handlerDone <- err // after release
			}))
			srv.EnableHTTP2 = tc.http2
			if tc.http2 {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var body io.Reader
			if tc.http2 {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("response over %s, want HTTP/2", resp.Proto)
				}
				body = resp.Body
			} else {
				conn, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: test\r\n\r\n")); err != nil {
					t.Fatal(err)
				}
				if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
					t.Fatal(err)
				}
				body = conn
			}
			// The client reads nothing until the handler is done.
			select {
			case err := <-handlerDone:
				if err == nil {
					t.Fatal("handler wrote 1 GiB to a client that reads nothing")
				}
			case <-ctx.Done():
				t.Fatal("handler still writing 30s after its 200ms write deadline")
			}
			if lists, _ := f.inflightCountsForTest(); lists != 0 {
				t.Errorf("%d responses in flight after the timeout, want 0", lists)
			}
			if got := testutil.ToFloat64(m.writeTimeouts); got != 1 {
				t.Errorf("write_timeouts_total = %v, want 1", got)
			}
			// What was sent drains, then the response ends early.
			buf := make([]byte, 1<<20)
			var read int
			for {
				n, err := body.Read(buf)
				read += n
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("response still open after the write deadline (%d bytes read): %v", read, err)
					}
					break
				}
			}
			if read >= 1<<30 {
				t.Errorf("client read the whole response, want it cut short")
			}
		})
	}
}

func (q *Queue) inflightCountsForTest() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lists, q.bytes
}

// TestAdmitWatchList: a watch-list's initial events take room in the same
// LIST admission, by their weight: admitted while they fit, counted until
// released (once, however often release is called), else the apiserver's
// 429; the deadline of writing them is WriteTimeout from admission.
func TestAdmitWatchList(t *testing.T) {
	f := NewQueue(Config{MaxBytes: 100, WriteTimeout: time.Minute, Clock: clocktesting.NewFakeClock(time.Now())})

	release, deadline, rejected := f.AdmitWatchList(context.Background(), 70)
	if rejected != nil {
		t.Fatalf("first watch-list rejected: %v", rejected)
	}
	if d := time.Until(deadline); d <= 0 || d > time.Minute {
		t.Errorf("deadline in %v, want within WriteTimeout", d)
	}
	if lists, bytes := f.inflightCountsForTest(); lists != 1 || bytes != 70 {
		t.Errorf("in flight: %d lists, %d bytes; want 1, 70", lists, bytes)
	}
	// A LIST (or another watch-list) that does not fit is rejected.
	if _, status := f.Admit(context.Background(), 40, nil); status == nil || status.Status().Code != http.StatusTooManyRequests {
		t.Errorf("LIST beside the watch-list: %v, want 429", status)
	}
	if _, _, rejected := f.AdmitWatchList(context.Background(), 40); rejected == nil || rejected.Status().Code != http.StatusTooManyRequests ||
		rejected.Status().Details == nil || rejected.Status().Details.RetryAfterSeconds != 1 {
		t.Errorf("second watch-list: %v, want the apiserver's 429 with retryAfterSeconds 1", rejected)
	}
	release()
	release()
	if lists, bytes := f.inflightCountsForTest(); lists != 0 || bytes != 0 {
		t.Errorf("after release: %d lists, %d bytes in flight; want none", lists, bytes)
	}
}
