package watch

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

const watchListQuery = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true"

// bigStore holds n widgets of about pad bytes each, at resourceVersion n.
func bigStore(n, pad int) *snapshot.Store {
	entries := make([]*snapshot.Entry, n)
	for i := range entries {
		name := fmt.Sprintf("w%05d", i)
		raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d"},"spec":{"pad":%q}}`,
			name, i+1, strings.Repeat("x", pad))
		entries[i] = snapshot.NewEntry("ns", name, uint64(i+1), nil, nil, nil, []byte(raw))
	}
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(entries, uint64(n))
	return store
}

// hookWriter is a ResponseWriter that counts what is written and calls
// onWrite after each write.
type hookWriter struct {
	header  http.Header
	n       int
	writes  int
	onWrite func()
}

func (w *hookWriter) Header() http.Header { return w.header }
func (w *hookWriter) WriteHeader(int)     {}
func (w *hookWriter) Flush()              {}
func (w *hookWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	w.writes++
	if w.onWrite != nil {
		w.onWrite()
	}
	return len(p), nil
}

// TestInitialEventsEndWithTheWatch: a watch-list's initial events stop at
// the next burst once the watch must end, as the apiserver's watch ends on
// its timeout or on shutdown whatever it is sending: when timeoutSeconds
// passes, when the server shuts down (the request's context ends with a
// cause other than the client leaving).
func TestInitialEventsEndWithTheWatch(t *testing.T) {
	const n, pad = 2000, 4000 // about 8 MB: about 30 bursts
	store := bigStore(n, pad)
	for _, tc := range []struct {
		name   string
		query  string
		gzip   bool
		end    func(clk *testingclock.FakeClock, cancel context.CancelCauseFunc)
		reason string
	}{
		{name: "timeout", query: watchListQuery + "&timeoutSeconds=5",
			end:    func(clk *testingclock.FakeClock, _ context.CancelCauseFunc) { clk.Step(5 * time.Second) },
			reason: EndTimeout},
		{name: "timeout_gzip", query: watchListQuery + "&timeoutSeconds=5", gzip: true,
			end:    func(clk *testingclock.FakeClock, _ context.CancelCauseFunc) { clk.Step(5 * time.Second) },
			reason: EndTimeout},
		{name: "shutdown", query: watchListQuery,
			end:    func(_ *testingclock.FakeClock, cancel context.CancelCauseFunc) { cancel(fmt.Errorf("shutting down")) },
			reason: EndShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			clk := testingclock.NewFakeClock(time.Now())
			srv := NewServer(Config{Metrics: m, Clock: clk})
			target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store, WatchListGzip: true}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			r := httptest.NewRequest(http.MethodGet, "/?"+tc.query, nil).WithContext(ctx)
			if tc.gzip {
				r.Header.Set("Accept-Encoding", "gzip")
			}
			var once sync.Once
			w := &hookWriter{header: http.Header{}}
			w.onWrite = func() {
				if w.writes >= 3 { // well into the initial events
					once.Do(func() { tc.end(clk, cancel) })
				}
			}
			if ok, reason := srv.Serve(w, r, Decide(tc.query), target); !ok {
				t.Fatalf("not served: %s", reason)
			}
			// About 30 bursts make the whole initial events.
			if w.writes > 10 {
				t.Errorf("%d writes; want the initial events cut short after the third", w.writes)
			}
			if err := waitEnded(m, tc.reason, 1); err != nil {
				t.Errorf("watch not ended as %s: %v", tc.reason, err)
			}
		})
	}
}

// TestInitialEventsAdmitted: a watch-list's initial events are admitted
// before anything is written, weighed by the bytes of what they carry; the
// slot is released once they are written, before the live stream; a
// rejection is the apiserver's 429 with Retry-After; the write deadline
// the admission gives bounds the whole initial phase.
func TestInitialEventsAdmitted(t *testing.T) {
	store := bigStore(100, 1000)
	snap, _, err := store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	full := snap.Bytes()

	var (
		mu       sync.Mutex
		weights  []int64
		released int
		reject   bool
	)
	admit := func(_ context.Context, weight int64) (func(), time.Time, *apierrors.StatusError) {
		mu.Lock()
		defer mu.Unlock()
		weights = append(weights, weight)
		if reject {
			return nil, time.Time{}, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
		}
		return func() {
			mu.Lock()
			defer mu.Unlock()
			released++
		}, time.Time{}, nil
	}
	ts := serveWith(t, store, Config{}, func(t *Target) { t.Admit = admitFunc(admit) })

	d := open(t, ts.URL+"?"+watchListQuery+"&timeoutSeconds=600")
	if evs := next(t, d, 101); !evs[100].End {
		t.Fatalf("last initial event %+v, want the end bookmark", evs[100])
	}
	// Released once the initial events are written, while the watch lives on.
	store.Apply(snapshot.Change{Entry: widget("live", 101, "a")}, 101)
	next(t, d, 1)
	mu.Lock()
	if released != 1 || len(weights) != 1 || weights[0] != full {
		t.Errorf("released %d, weights %v; want 1 release of weight %d", released, weights, full)
	}
	mu.Unlock()
	d.Close()

	// A selective watch-list weighs what it selects.
	d = open(t, ts.URL+"?"+watchListQuery+"&labelSelector=app%3Da")
	next(t, d, 2) // the one widget of app a, the end bookmark
	d.Close()
	mu.Lock()
	if want := int64(len(widget("live", 101, "a").Raw)); weights[1] != want {
		t.Errorf("selective weight %d, want %d", weights[1], want)
	}
	reject = true
	mu.Unlock()

	resp, err := http.Get(ts.URL + "?" + watchListQuery)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("rejected watch-list: %d Retry-After %q, want 429 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// A watch without initial events is not admitted: it sends none.
	d = open(t, ts.URL+"?watch=1&resourceVersion=101")
	d.Close()
	mu.Lock()
	if len(weights) != 3 {
		t.Errorf("admitted %d requests, want 3 (the watch-lists only)", len(weights))
	}
	mu.Unlock()
}

// admitFunc is a test's Admitter.
type admitFunc func(ctx context.Context, weight int64) (func(), time.Time, *apierrors.StatusError)

func (f admitFunc) AdmitWatchList(ctx context.Context, weight int64) (func(), time.Time, *apierrors.StatusError) {
	return f(ctx, weight)
}

// TestInitialEventsDeadline: initial events not written by the deadline
// the admission gave are cut short as too slow.
func TestInitialEventsDeadline(t *testing.T) {
	// 12 MB: more than the socket buffers of a client that reads nothing.
	store := bigStore(3000, 4000)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := serveWith(t, store, Config{Metrics: m}, func(t *Target) {
		t.Admit = admitFunc(func(context.Context, int64) (func(), time.Time, *apierrors.StatusError) {
			return func() {}, time.Now().Add(200 * time.Millisecond), nil
		})
	})
	// The client reads the head and nothing more.
	resp, err := http.Get(ts.URL + "?" + watchListQuery)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := waitEnded(m, EndTooSlow, 1); err != nil {
		t.Errorf("stalled watch-list not ended by its deadline: %v", err)
	}
}

// TestServedWatchHeaders: a served watch carries the headers the apiserver
// sets on every answer: the caller's Audit-Id (or a new one) and the
// deprecation Warnings of the resource's version.
func TestServedWatchHeaders(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serveWith(t, store, Config{}, func(t *Target) { t.Warnings = []string{"demo.listproxy.io/v1 Widget is deprecated"} })
	for _, tc := range []struct {
		name, query, auditID string
	}{
		{name: "watch_list_own_id", query: watchListQuery, auditID: "caller-id"},
		{name: "watch_new_id", query: "watch=1&resourceVersion=10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, ts.URL+"?"+tc.query+"&timeoutSeconds=1", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auditID != "" {
				req.Header.Set("Audit-Id", tc.auditID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("Audit-Id")
			if tc.auditID != "" && got != tc.auditID || got == "" {
				t.Errorf("Audit-Id %q, want %q (or a new one when unset)", got, tc.auditID)
			}
			if w := resp.Header.Values("Warning"); len(w) != 1 || w[0] != `299 - "demo.listproxy.io/v1 Widget is deprecated"` {
				t.Errorf("Warning %q", w)
			}
		})
	}
}

// TestLiveBurstBoundedByBytes: a watcher catching up on large changes
// writes them in bursts of about burstBytes, not in one write per batch of
// changes (64 changes of 1 MiB would be a 64 MiB burst).
func TestLiveBurstBoundedByBytes(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 128})
	store.Replace(nil, 10)
	srv := NewServer(Config{})
	pad := strings.Repeat("x", 1<<20)
	for rv := uint64(11); rv <= 42; rv++ {
		raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns","resourceVersion":"%d"},"pad":%q}`, rv, pad)
		store.Apply(snapshot.Change{Entry: snapshot.NewEntry("ns", "w1", rv, nil, nil, nil, []byte(raw))}, rv)
	}
	for _, tc := range []struct {
		name  string
		match func(*snapshot.Entry) bool
	}{
		{name: "shared_frames"},
		{name: "own_frames", match: func(*snapshot.Entry) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			largest := 0
			w := &hookWriter{header: http.Header{}}
			last := 0
			w.onWrite = func() {
				largest = max(largest, w.n-last)
				last = w.n
				if w.n >= 32<<20 {
					cancel() // caught up: every change written
				}
			}
			q := "watch=1&resourceVersion=10&timeoutSeconds=600"
			r := httptest.NewRequest(http.MethodGet, "/?"+q, nil).WithContext(ctx)
			target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store, Match: tc.match}
			srv.Serve(w, r, Decide(q), target)
			if w.n < 32<<20 {
				t.Fatalf("wrote %d bytes, want all 32 changes", w.n)
			}
			if largest > 2<<20 {
				t.Errorf("largest write %d bytes; want at most about one 1 MiB event past burstBytes", largest)
			}
		})
	}
}
