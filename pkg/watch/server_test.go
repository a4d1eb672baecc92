package watch

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

var widgetType = wire.ObjectType{GVK: schema.GroupVersionKind{Group: "demo.listproxy.io", Version: "v1", Kind: "Widget"}, Custom: true}

func widget(name string, rv uint64, app string) *snapshot.Entry {
	raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"labels":{"app":%q},"name":%q,"namespace":"ns","resourceVersion":"%d"}}`, app, name, rv)
	return snapshot.NewEntry("ns", name, rv, map[string]string{"app": app}, nil, nil, []byte(raw))
}

type got struct {
	Type wire.EventType
	Name string
	RV   string
	End  bool
}

// headerOldAPIServer makes the test server's target one of an apiserver
// whose WatchList feature is off (Target.WatchListDefaults false).
const headerOldAPIServer = "X-Test-Old-Apiserver"

// serve starts a server answering every request as a watch of store with
// the request's label selector.
func serve(t *testing.T, store *snapshot.Store, m *Metrics) *httptest.Server {
	t.Helper()
	return serveWith(t, store, Config{Metrics: m, NotOlderThanWait: 100 * time.Millisecond})
}

func serveWith(t *testing.T, store *snapshot.Store, cfg Config) *httptest.Server {
	t.Helper()
	srv := NewServer(cfg)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := Decide(r.URL.RawQuery)
		sel, err := labels.Parse(d.LabelSelector)
		if d.Action == PassThrough || err != nil {
			http.Error(w, "pass through", http.StatusTeapot)
			return
		}
		target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store,
			Match:             func(e *snapshot.Entry) bool { return sel.Matches(e.Labels) },
			WatchListDefaults: r.Header.Get(headerOldAPIServer) == "",
			WatchListGzip:     r.Header.Get(headerOldAPIServer) == ""}
		if ok, reason := srv.Serve(w, r, d, target); !ok {
			http.Error(w, reason, http.StatusTeapot)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

func open(t *testing.T, url string) *wire.WatchDecoder {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
}

func next(t *testing.T, d *wire.WatchDecoder, n int) []got {
	t.Helper()
	var out []got
	for range n {
		ev, err := d.Next()
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		g := got{Type: ev.Type, RV: ev.ResourceVersion, End: ev.InitialEventsEnd}
		if ev.Type != wire.Bookmark {
			meta, err := wire.ExtractMeta(wire.JSON, ev.Object)
			if err != nil {
				t.Fatal(err)
			}
			g.Name = meta.Name
		}
		out = append(out, g)
	}
	return out
}

func TestServeWatchList(t *testing.T) {
	// Registered first, so it runs after the server's Close.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a"), widget("w2", 6, "b"), widget("w3", 7, "a")}, 10)
	ts := serve(t, store, m)

	d := open(t, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&labelSelector=app%3Da&timeoutSeconds=600")
	defer d.Close()
	want := []got{{wire.Added, "w1", "5", false}, {wire.Added, "w3", "7", false}, {wire.Bookmark, "", "10", true}}
	if diff := cmp.Diff(want, next(t, d, 3)); diff != "" {
		t.Fatalf("initial events (-want +got):\n%s", diff)
	}

	store.Apply(snapshot.Change{Entry: widget("w2", 11, "a")}, 11)                // starts matching
	store.Apply(snapshot.Change{Entry: widget("w1", 12, "b")}, 12)                // stops matching
	store.Apply(snapshot.Change{Entry: widget("w1", 13, "c")}, 13)                // still not matching
	store.Apply(snapshot.Change{Entry: widget("w3", 14, "a")}, 14)                // keeps matching
	store.Apply(snapshot.Change{Deleted: true, Entry: widget("w3", 15, "a")}, 15) // deleted
	want = []got{{wire.Added, "w2", "11", false}, {wire.Deleted, "w1", "12", false}, {wire.Modified, "w3", "14", false}, {wire.Deleted, "w3", "15", false}}
	if diff := cmp.Diff(want, next(t, d, 4)); diff != "" {
		t.Fatalf("live events (-want +got):\n%s", diff)
	}

	// A re-watch from an RV in the history resumes exactly after it.
	d2 := open(t, ts.URL+"?watch=1&resourceVersion=12&labelSelector=app%3Da")
	defer d2.Close()
	want = []got{{wire.Modified, "w3", "14", false}, {wire.Deleted, "w3", "15", false}}
	if diff := cmp.Diff(want, next(t, d2, 2)); diff != "" {
		t.Fatalf("re-watch events (-want +got):\n%s", diff)
	}

	// A relist breaks continuity: both streams end.
	store.Replace(nil, 20)
	for _, dec := range []*wire.WatchDecoder{d, d2} {
		if _, err := dec.Next(); !errors.Is(err, io.EOF) {
			t.Errorf("after relist: %v, want EOF", err)
		}
	}
	if err := waitEnded(m, EndStoreReset, 2); err != nil {
		t.Errorf("ended watches not counted: %v", err)
	}
}

func TestServePassesThrough(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 2})
	ts := serve(t, store, nil)
	checkOld := func(query, wantReason string, old bool) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.URL+"?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if old {
			req.Header.Set(headerOldAPIServer, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || string(b) != wantReason+"\n" {
			t.Errorf("%s (old apiserver %v): %d %q, want pass through (%s)", query, old, resp.StatusCode, b, wantReason)
		}
	}
	check := func(query, wantReason string) {
		t.Helper()
		checkOld(query, wantReason, false)
	}
	check("watch=1&resourceVersion=0", "not_synced")
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	for rv := uint64(11); rv <= 14; rv++ {
		store.Apply(snapshot.Change{Entry: widget("w1", rv, "a")}, rv)
	}
	check("watch=1&resourceVersion=11", "not_retained")
	check("watch=1&resourceVersion=15", "resource_version_ahead")
	check("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=9999&timeoutSeconds=1", "not_older_than_timeout")
	// Before WatchList, a watch from resourceVersion "" or "0" is not a
	// watch-list: its initial events end without a bookmark. It is the
	// apiserver's to answer.
	checkOld("watch=1&resourceVersion=0&allowWatchBookmarks=true", "legacy_initial_events", true)
	checkOld("watch=1&allowWatchBookmarks=true", "legacy_initial_events", true)
}

// TestServeWatchListOnOldAPIServer: an explicit watch-list is served from
// the store even where the apiserver's WatchList feature is off (it would
// refuse it), with the end-of-initial-events bookmark.
func TestServeWatchListOnOldAPIServer(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serve(t, store, nil)
	req, err := http.NewRequest(http.MethodGet, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(headerOldAPIServer, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	d := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
	want := []got{{wire.Added, "w1", "5", false}, {wire.Bookmark, "", "10", true}}
	if diff := cmp.Diff(want, next(t, d, 2)); diff != "" {
		t.Errorf("initial events (-want +got):\n%s", diff)
	}
}

// waitEnded waits until n watches ended for reason (metrics are counted as
// a handler returns, after the client saw the end of its stream).
func waitEnded(m *Metrics, reason string, n float64) error {
	return wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(m.endedTotal.WithLabelValues("widgets.demo.listproxy.io", "json", reason)) == n, nil
	})
}

// TestStalledWatcher: a client that stops reading is ended as too slow,
// without holding up the store's other watchers.
func TestStalledWatcher(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 8})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serveWith(t, store, Config{Metrics: m, WriteTimeout: 2 * time.Second})
	watchQuery := "?watch=1&resourceVersion=10&timeoutSeconds=600"

	// The stalled client reads the response head and nothing more.
	stalled, err := http.Get(ts.URL + watchQuery)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	fast := open(t, ts.URL+watchQuery)
	defer fast.Close()

	// Large changes fill the stalled connection's socket buffers; each is
	// applied once the fast watcher has read the previous one.
	pad := strings.Repeat("x", 256<<10)
	const changes = 100
	for rv := uint64(11); rv < 11+changes; rv++ {
		e := widget("w1", rv, "a")
		e.Raw = []byte(fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns","resourceVersion":"%d"},"pad":%q}`, rv, pad))
		store.Apply(snapshot.Change{Entry: e}, rv)
		ev, err := fast.Next()
		if err != nil {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "listproxy_watch_ended_total" {
					t.Logf("%v", mf)
				}
			}
			t.Fatalf("fast watcher at rv %d: %v", rv, err)
		}
		if ev.ResourceVersion != fmt.Sprint(rv) {
			t.Fatalf("fast watcher got rv %s, want %d", ev.ResourceVersion, rv)
		}
	}
	if err := waitEnded(m, EndTooSlow, 1); err != nil {
		t.Fatalf("stalled watcher not ended as too slow: %v", err)
	}
	if got := testutil.ToFloat64(m.open.WithLabelValues("widgets.demo.listproxy.io", "json")); got != 1 {
		t.Errorf("open watchers = %v, want 1 (the fast one)", got)
	}
}

// discardWriter is a ResponseWriter that counts and drops what is written.
type discardWriter struct {
	header http.Header
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// TestWatchListAllocatesOneBurstBuffer: sending a watch-list's initial
// events reuses one burst buffer rather than allocating the list's size
// again (garbage the collector would pay for under listproxy's low GOGC).
func TestWatchListAllocatesOneBurstBuffer(t *testing.T) {
	const n, pad = 2000, 4000
	entries := make([]*snapshot.Entry, n)
	for i := range entries {
		name := fmt.Sprintf("w%05d", i)
		raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d"},"spec":{"pad":%q}}`,
			name, i+1, strings.Repeat("x", pad))
		entries[i] = snapshot.NewEntry("ns", name, uint64(i+1), nil, nil, nil, []byte(raw))
	}
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(entries, n)
	srv := NewServer(Config{})
	target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store,
		Match: func(*snapshot.Entry) bool { return true }}
	q := "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true"
	d := Decide(q)
	// The client is gone once the initial events are written: Serve
	// returns after them.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/?"+q, nil)

	w := &discardWriter{header: http.Header{}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if ok, reason := srv.Serve(w, r, d, target); !ok {
		t.Fatalf("not served: %s", reason)
	}
	runtime.ReadMemStats(&after)
	if w.n < n*pad {
		t.Fatalf("wrote %d bytes, want at least %d", w.n, n*pad)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(w.n/4) {
		t.Errorf("serving a %d-byte watch-list allocated %d bytes, want under a quarter of it", w.n, alloc)
	}
}

// TestServeWatchListGzip: where the apiserver gzips watch-lists, a client
// that accepts gzip gets the watch-list gzipped (one member per burst; the
// transport decompresses it), and a watch without initial events is not.
func TestServeWatchListGzip(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serve(t, store, nil)
	tests := []struct {
		name, query string
		old         bool
		wantGzip    bool
	}{
		{"watch_list", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600", false, true},
		{"watch_list_old_apiserver", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600", true, false},
		{"watch_from_rv", "watch=1&resourceVersion=10&timeoutSeconds=600", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, ts.URL+"?"+tc.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.old {
				req.Header.Set(headerOldAPIServer, "1")
			}
			// Set by hand, the transport leaves the body compressed.
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tc.wantGzip {
				t.Fatalf("Content-Encoding %q, want gzip %v", resp.Header.Get("Content-Encoding"), tc.wantGzip)
			}
			if !tc.wantGzip {
				return
			}
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			d := wire.NewWatchDecoder(wire.JSON, io.NopCloser(zr), wire.WatchOptions{})
			want := []got{{wire.Added, "w1", "5", false}, {wire.Bookmark, "", "10", true}}
			if diff := cmp.Diff(want, next(t, d, 2)); diff != "" {
				t.Errorf("initial events (-want +got):\n%s", diff)
			}
		})
	}
}
