package freshness

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
)

// fakeProbe is a probe function the test drives: each call announces itself
// on started and returns the next value sent on results, or ctx.Err() (after
// announcing on cancelled) if its context ends first.
type fakeProbe struct {
	n         atomic.Int64
	started   chan int64
	cancelled chan int64
	results   chan probeResult
}

type probeResult struct {
	rev int64
	err error
}

func newFakeProbe() *fakeProbe {
	return &fakeProbe{
		started:   make(chan int64, 16),
		cancelled: make(chan int64, 16),
		results:   make(chan probeResult),
	}
}

func (f *fakeProbe) probe(ctx context.Context) (int64, error) {
	n := f.n.Add(1)
	f.started <- n
	select {
	case r := <-f.results:
		return r.rev, r.err
	case <-ctx.Done():
		f.cancelled <- n
		return 0, ctx.Err()
	}
}

// probeHarness is a Checker with a fake probe.
type probeHarness struct {
	c     *Checker
	probe *fakeProbe
	reg   *prometheus.Registry
}

func newProbeHarness(t *testing.T) *probeHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := &probeHarness{
		c:     newChecker(Config{}),
		probe: newFakeProbe(),
		reg:   reg,
	}
	h.c.metrics = m
	h.c.probe = h.probe.probe
	return h
}

// call runs CurrentRevision in a goroutine and returns its result channel.
// With no probe in flight the caller starts one at once: wait for it on
// h.probe.started.
func (h *probeHarness) call(ctx context.Context) <-chan probeResult {
	out := make(chan probeResult, 1)
	go func() {
		rev, err := h.c.CurrentRevision(ctx)
		out <- probeResult{rev, err}
	}()
	return out
}

// callNext is call for a caller arriving while a probe is in flight: it
// waits until the caller has joined the next probe.
func (h *probeHarness) callNext(t *testing.T, ctx context.Context) <-chan probeResult {
	t.Helper()
	before := h.nextWaiters()
	out := h.call(ctx)
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.nextWaiters() == before+1, nil
	})
	if err != nil {
		t.Fatalf("caller never joined the next probe (%d waiting, want %d)", h.nextWaiters(), before+1)
	}
	return out
}

// nextWaiters returns how many callers wait for the probe that starts when
// the one in flight ends.
func (h *probeHarness) nextWaiters() int {
	h.c.probes.mu.Lock()
	defer h.c.probes.mu.Unlock()
	if h.c.probes.next == nil {
		return 0
	}
	return h.c.probes.next.waiters
}

// recv receives from ch, failing the test if nothing arrives for a long
// time (a hang, not a timing assumption).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// empty fails the test if ch holds a value now.
func empty[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %v", what, v)
	default:
	}
}

func TestCurrentRevisionCallerArrivingDuringProbeWaitsForNext(t *testing.T) {
	h := newProbeHarness(t)
	ctx := context.Background()

	a := h.call(ctx)
	if n := recv(t, h.probe.started, "probe 1"); n != 1 {
		t.Fatalf("started probe %d, want 1", n)
	}
	// b, c and d arrive while probe 1 is in flight: it cannot prove
	// anything to them.
	b, c, d := h.callNext(t, ctx), h.callNext(t, ctx), h.callNext(t, ctx)
	empty(t, h.probe.started, "probe start while probe 1 in flight")

	h.probe.results <- probeResult{rev: 10}
	if got := recv(t, a, "a's result"); got != (probeResult{rev: 10}) {
		t.Errorf("a got %+v, want rev 10", got)
	}
	if n := recv(t, h.probe.started, "probe 2"); n != 2 {
		t.Fatalf("started probe %d, want 2", n)
	}
	empty(t, b, "b's result from probe 1")

	// b, c and d arrived together and share probe 2.
	h.probe.results <- probeResult{rev: 11}
	for name, ch := range map[string]<-chan probeResult{"b": b, "c": c, "d": d} {
		if got := recv(t, ch, name+"'s result"); got != (probeResult{rev: 11}) {
			t.Errorf("%s got %+v, want rev 11", name, got)
		}
	}
	empty(t, h.probe.started, "third probe")

	if got := testutil.ToFloat64(h.c.metrics.probes.WithLabelValues(probeOK)); got != 2 {
		t.Errorf("probes_total{result=ok} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.c.metrics.probeWaiters); got != 4 {
		t.Errorf("probe_waiters_total = %v, want 4", got)
	}
	if got := testutil.CollectAndCount(h.reg, "listproxy_freshness_probe_duration_seconds"); got != 1 {
		t.Errorf("probe_duration_seconds series = %d, want 1", got)
	}
}

func TestCurrentRevisionIdleCallerStartsProbeAtOnce(t *testing.T) {
	h := newProbeHarness(t)
	for i, want := range []int64{5, 6, 7} {
		got := h.call(context.Background())
		if n := recv(t, h.probe.started, "probe"); n != int64(i+1) {
			t.Fatalf("started probe %d, want %d", n, i+1)
		}
		h.probe.results <- probeResult{rev: want}
		if r := recv(t, got, "result"); r.rev != want || r.err != nil {
			t.Errorf("call %d got %+v, want rev %d", i, r, want)
		}
	}
}

func TestCurrentRevisionErrorsPropagate(t *testing.T) {
	h := newProbeHarness(t)
	ctx := context.Background()
	err1, err2 := errors.New("etcd down"), errors.New("no leader")

	a := h.call(ctx)
	recv(t, h.probe.started, "probe 1")
	b, c := h.callNext(t, ctx), h.callNext(t, ctx)

	h.probe.results <- probeResult{err: err1}
	if got := recv(t, a, "a's result"); !errors.Is(got.err, err1) {
		t.Errorf("a got %+v, want error %v", got, err1)
	}
	recv(t, h.probe.started, "probe 2")
	h.probe.results <- probeResult{err: err2}
	for name, ch := range map[string]<-chan probeResult{"b": b, "c": c} {
		if got := recv(t, ch, name+"'s result"); !errors.Is(got.err, err2) {
			t.Errorf("%s got %+v, want error %v", name, got, err2)
		}
	}
	if got := testutil.ToFloat64(h.c.metrics.probes.WithLabelValues(probeError)); got != 2 {
		t.Errorf("probes_total{result=error} = %v, want 2", got)
	}
}

func TestCurrentRevisionContextCancellation(t *testing.T) {
	t.Run("cancel_in_flight_probe_when_all_callers_leave", func(t *testing.T) {
		h := newProbeHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		a := h.call(ctx)
		recv(t, h.probe.started, "probe 1")

		cancel()
		if got := recv(t, a, "a's result"); !errors.Is(got.err, context.Canceled) {
			t.Errorf("a got %+v, want context.Canceled", got)
		}
		if n := recv(t, h.probe.cancelled, "probe cancellation"); n != 1 {
			t.Errorf("cancelled probe %d, want 1", n)
		}

		// A later caller gets a fresh probe.
		b := h.call(context.Background())
		recv(t, h.probe.started, "probe 2")
		h.probe.results <- probeResult{rev: 12}
		if got := recv(t, b, "b's result"); got != (probeResult{rev: 12}) {
			t.Errorf("b got %+v, want rev 12", got)
		}
	})

	t.Run("in_flight_probe_survives_while_a_caller_remains", func(t *testing.T) {
		h := newProbeHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := h.call(context.Background())
		recv(t, h.probe.started, "probe 1")
		// b joins the next probe, then leaves before it starts.
		b := h.callNext(t, ctx)
		cancel()
		if got := recv(t, b, "b's result"); !errors.Is(got.err, context.Canceled) {
			t.Errorf("b got %+v, want context.Canceled", got)
		}

		h.probe.results <- probeResult{rev: 10}
		if got := recv(t, a, "a's result"); got != (probeResult{rev: 10}) {
			t.Errorf("a got %+v, want rev 10", got)
		}
		// Nobody waits for the next probe any more: it never starts. (a's
		// result is delivered after the decision is taken.)
		empty(t, h.probe.started, "probe nobody waits for")
		empty(t, h.probe.cancelled, "probe cancellation")
	})

	t.Run("already_done_context", func(t *testing.T) {
		h := newProbeHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := h.c.CurrentRevision(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("got error %v, want context.Canceled", err)
		}
		empty(t, h.probe.started, "probe for a done context")
	})
}
