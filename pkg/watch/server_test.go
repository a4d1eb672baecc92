package watch

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/util/wait"
	shardparser "k8s.io/apiserver/pkg/sharding"

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

func serveWith(t *testing.T, store *snapshot.Store, cfg Config, adjust ...func(*Target)) *httptest.Server {
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
			Match:             func(e *snapshot.Entry) bool { return sel.Matches(e.Labels()) },
			WatchListDefaults: r.Header.Get(headerOldAPIServer) == ""}
		for _, f := range adjust {
			f(&target)
		}
		if ok, reason := srv.Serve(w, r, d, target); !ok {
			http.Error(w, string(reason), http.StatusTeapot)
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

// TestStalledWatcherResumes: a client that stops reading while more
// changes are applied than the store's least history holds is parked on
// its connection, not ended: once it reads again it gets every change, in
// order, because the store keeps the changes of the last EventRetention.
// Where the store keeps fewer (no retention), its position leaves the
// history and it gets the apiserver's answer: the events it was sent, one
// ERROR event with 410 Expired "too old resource version", and the end.
func TestStalledWatcherResumes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention time.Duration
		expired   bool
	}{
		{name: "within_retention", retention: time.Minute},
		{name: "history_left", expired: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 4, EventRetention: tc.retention})
			store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
			ts := serveWith(t, store, Config{Metrics: m, WriteTimeout: time.Minute})

			// The stalled client has read the response head only; its
			// small receive buffer and 25 MiB of changes block the
			// watcher's writes long before the last change.
			stalled := smallBufferClient(t)
			resp, err := stalled.Get(ts.URL + "?watch=1&resourceVersion=10&timeoutSeconds=600")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			pad := strings.Repeat("x", 256<<10)
			const changes = 100
			for rv := uint64(11); rv < 11+changes; rv++ {
				e := widget("w1", rv, "a")
				e.Raw = []byte(fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns","resourceVersion":"%d"},"pad":%q}`, rv, pad))
				store.Apply(snapshot.Change{Entry: e}, rv)
			}

			d := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
			want := uint64(11)
			for {
				ev, err := d.Next()
				if err != nil {
					t.Fatalf("after rv %d: %v", want-1, err)
				}
				if ev.Type == wire.Error {
					if !tc.expired {
						t.Fatalf("ERROR event after rv %d: %s, want every change", want-1, ev.Object)
					}
					st, err := wire.DecodeStatus(wire.JSON, ev.Object)
					if err != nil {
						t.Fatal(err)
					}
					if st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired || !strings.HasPrefix(st.Message, "too old resource version: ") {
						t.Errorf("ERROR event %+v, want 410 Expired \"too old resource version\"", st)
					}
					if _, err := d.Next(); !errors.Is(err, io.EOF) {
						t.Errorf("after the ERROR event: %v, want EOF", err)
					}
					if err := waitEnded(m, EndExpired, 1); err != nil {
						t.Error(err)
					}
					return
				}
				if ev.Type != wire.Modified || ev.ResourceVersion != fmt.Sprint(want) {
					t.Fatalf("got %s at rv %s, want MODIFIED at %d", ev.Type, ev.ResourceVersion, want)
				}
				if want++; want == 11+changes {
					break
				}
			}
			if tc.expired {
				t.Fatal("got every change, want the position to leave the history of 4")
			}
		})
	}
}

// smallBufferClient is an HTTP client whose connections have a 4 KiB
// receive buffer.
func smallBufferClient(t *testing.T) *http.Client {
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	tr := &http.Transport{DialContext: dialer.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestWatchListAllocatesOneBurstBuffer: sending a watch-list's initial
// events reuses one burst buffer rather than allocating the list's size
// again (garbage the collector would pay for under listproxy's low GOGC).
func TestWatchListAllocatesOneBurstBuffer(t *testing.T) {
	const n, pad = 2000, 4000
	store := bigStore(n, pad)
	srv := NewServer(Config{})
	target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store,
		Match: func(*snapshot.Entry) bool { return true }}
	q := "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true"
	d := Decide(q)
	// The client is gone once the initial events are written: Serve
	// returns after them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/?"+q, nil)

	w := &hookWriter{header: http.Header{}}
	w.onWrite = func() {
		if w.n >= n*pad {
			cancel()
		}
	}
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

// TestServeTooLargeResourceVersion: a watch-list from a resourceVersion
// etcd has not reached is answered as the apiserver answers it: HTTP 200,
// one ERROR event carrying the 504 Status, the end of the stream.
func TestServeTooLargeResourceVersion(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
		Message: "Too large resource version: 99, current: 10"}
	var asked uint64
	ts := serveWith(t, store, Config{Metrics: m, NotOlderThanWait: time.Second}, func(target *Target) {
		target.NotOlderThan = func(_ context.Context, rv uint64, wait time.Duration) (*snapshot.Snapshot, uint64, *metav1.Status) {
			if wait != time.Second {
				t.Errorf("NotOlderThan wait %v, want the configured 1s", wait)
			}
			asked = rv
			if rv > 10 {
				return nil, 0, status
			}
			snap, at, _ := store.Latest()
			return snap, at, nil
		}
	})
	d := open(t, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=99&allowWatchBookmarks=true")
	defer d.Close()
	ev, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != wire.Error {
		t.Fatalf("got %s %s, want ERROR", ev.Type, ev.Object)
	}
	st, err := wire.DecodeStatus(wire.JSON, ev.Object)
	if err != nil {
		t.Fatal(err)
	}
	want := *status
	want.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if diff := cmp.Diff(&want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if ev, err := d.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the ERROR event: %v %v, want EOF", ev.Type, err)
	}
	if asked != 99 {
		t.Errorf("NotOlderThan asked for %d, want 99", asked)
	}
	if err := waitEnded(m, EndError, 1); err != nil {
		t.Error(err)
	}

	// A resourceVersion the store reached is served as before.
	d2 := open(t, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=7&allowWatchBookmarks=true")
	defer d2.Close()
	if diff := cmp.Diff([]got{{wire.Added, "w1", "5", false}, {wire.Bookmark, "", "10", true}}, next(t, d2, 2)); diff != "" {
		t.Errorf("watch-list from 7 (-want +got):\n%s", diff)
	}
}

// TestServeFromProvenResourceVersion: a watch from a resourceVersion past
// the store's progress (a consistent read's) is served from the feed once
// Holds proves that every change after it will reach the store, and passes
// through otherwise. The changes up to it that the store receives later
// are not the watch's: it sends those after it only.
func TestServeFromProvenResourceVersion(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	var proven []uint64
	ts := serveWith(t, store, Config{}, func(target *Target) {
		target.Holds = func(_ context.Context, rv uint64) bool {
			proven = append(proven, rv)
			return rv <= 20
		}
	})
	resp, err := http.Get(ts.URL + "?watch=1&resourceVersion=21")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(b) != "resource_version_ahead\n" {
		t.Errorf("watch from an unproven rv: %d %q, want pass through", resp.StatusCode, b)
	}
	d := open(t, ts.URL+"?watch=1&resourceVersion=20")
	defer d.Close()
	// The store, behind the resource, receives a change at 15, which the
	// watch's client already has, then one after 20.
	store.Apply(snapshot.Change{Entry: widget("w3", 15, "a")}, 15)
	store.Apply(snapshot.Change{Entry: widget("w2", 25, "a")}, 25)
	if diff := cmp.Diff([]got{{wire.Added, "w2", "25", false}}, next(t, d, 1)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{21, 20}, proven); diff != "" {
		t.Errorf("Holds asked (-want +got):\n%s", diff)
	}
}

// TestWatchersShareFrames: watchers of a store without selectors send the
// same bytes, encoded once for all of them; a watcher with a selector
// encodes its own.
func TestWatchersShareFrames(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(nil, 10)
	ts := serveWith(t, store, Config{})
	// serveWith's Match is a selector; drop it for watches without one.
	plain := serveWith(t, store, Config{}, func(target *Target) { target.Match = nil })
	a := open(t, plain.URL+"?watch=1&resourceVersion=10")
	defer a.Close()
	b := open(t, plain.URL+"?watch=1&resourceVersion=10")
	defer b.Close()
	sel := open(t, ts.URL+"?watch=1&resourceVersion=10&labelSelector=app%3Da")
	defer sel.Close()
	store.Apply(snapshot.Change{Entry: widget("w1", 11, "a")}, 11)
	var objs []string
	for _, d := range []*wire.WatchDecoder{a, b, sel} {
		ev, err := d.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != wire.Added {
			t.Fatalf("got %s", ev.Type)
		}
		objs = append(objs, string(ev.Object))
	}
	if objs[0] != objs[1] || objs[1] != objs[2] {
		t.Errorf("watchers sent different objects: %q", objs)
	}
	c, err := store.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := c.Read(nil)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Read: %v %v", evs, err)
	}
	frame := evs[0].Shared.Load(frameKey{wire.JSON, widgetType, wire.Added}, func() []byte { return nil })
	want := wire.AppendWatchEvent(nil, wire.JSON, wire.Added, widgetType, evs[0].Object.Raw)
	if string(frame) != string(want) {
		t.Errorf("shared frame %q, want %q", frame, want)
	}
}

// TestServeWatchListGzip: where the apiserver's release gzips watch-lists,
// a watch-list whose client accepts gzip gets Content-Encoding: gzip and a
// body of gzip members, one per flush; a plain watch is not compressed.
func TestServeWatchListGzip(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serveWith(t, store, Config{}, func(target *Target) { target.WatchListGzip = true })
	get := func(query string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.URL+"?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "deflate, gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := get("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600")
	if ce, vary := resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"); ce != "gzip" || vary != "Accept-Encoding" {
		t.Fatalf("Content-Encoding %q, Vary %q; want gzip, Accept-Encoding", ce, vary)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	d := wire.NewWatchDecoder(wire.JSON, io.NopCloser(zr), wire.WatchOptions{})
	if diff := cmp.Diff([]got{{wire.Added, "w1", "5", false}, {wire.Bookmark, "", "10", true}}, next(t, d, 2)); diff != "" {
		t.Fatalf("initial events (-want +got):\n%s", diff)
	}
	store.Apply(snapshot.Change{Entry: widget("w2", 11, "a")}, 11)
	if diff := cmp.Diff([]got{{wire.Added, "w2", "11", false}}, next(t, d, 1)); diff != "" {
		t.Errorf("live event, a later gzip member (-want +got):\n%s", diff)
	}
	if ce := get("watch=1&resourceVersion=10").Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("plain watch Content-Encoding %q, want none", ce)
	}
}

// TestWatchListGzipStitched: a gzipped watch-list decompresses to exactly
// the frames of the plain one — ADDED per object in key order, then the end
// bookmark — whether its frames' chunks are built (the first unfiltered
// watch-list), reused (the next) or partly reused (a namespace's, a
// selector's), in JSON
// with kind and apiVersion prepended and in protobuf; and an unfiltered
// watch-list caches a chunk on every entry.
func TestWatchListGzipStitched(t *testing.T) {
	podType := wire.ObjectType{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}}
	for _, f := range []wire.Format{wire.JSON, wire.Protobuf} {
		t.Run(f.String(), func(t *testing.T) {
			store := snapshot.NewStore(snapshot.StoreConfig{})
			var entries []*snapshot.Entry
			for i := range 1500 {
				ns := fmt.Sprintf("ns-%d", i%7)
				name := fmt.Sprintf("pod-%04d", i)
				raw := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"resourceVersion":"%d"},"spec":{"nodeName":"node-%d","containers":[{"name":"app","image":"registry.example/app:v%d"}]},"pad":%q}`,
					name, ns, i+1, i%50, i%3, strings.Repeat("x", i%400))
				entries = append(entries, snapshot.NewEntry(ns, name, uint64(i+1), nil, nil, nil, []byte(raw)))
			}
			store.Replace(entries, 2000)
			namespace := ""
			var match func(*snapshot.Entry) bool
			var shard sharding.Selector
			ts := serveWith(t, store, Config{}, func(target *Target) {
				target.Format, target.Type, target.WatchListGzip = f, podType, true
				target.Match, target.Namespace = match, namespace
				target.Shard, target.ShardOnly = shard, shard != nil
			})
			check := func(ns string, m func(*snapshot.Entry) bool) {
				t.Helper()
				namespace, match = ns, m
				var want []byte
				snap, _, err := store.Latest()
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range snap.Page(snapshot.PageRequest{}).Items { // key order

					if (ns == "" || e.Namespace() == ns) && (m == nil || m(e)) {
						want = wire.AppendWatchEvent(want, f, wire.Added, podType, e.Raw)
					}
				}
				bookmark, err := wire.BookmarkItem(f, podType, "2000", true)
				if err != nil {
					t.Fatal(err)
				}
				want = wire.AppendWatchEvent(want, f, wire.Bookmark, podType, bookmark)
				req, err := http.NewRequest(http.MethodGet, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
					t.Fatalf("Content-Encoding %q, want gzip", ce)
				}
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want))
				if _, err := io.ReadFull(zr, got); err != nil {
					t.Fatalf("namespace %q: reading %d bytes: %v", ns, len(want), err)
				}
				if string(got) != string(want) {
					t.Fatalf("namespace %q: decompressed initial events differ from the plain frames", ns)
				}
			}
			check("", nil)
			for i, e := range entries {
				if it := e.GzipCached(snapshot.GzipWatchAdded); it == nil || it.Chunk.Len() == 0 {
					t.Fatalf("entry %d has no cached frame chunk after an unfiltered watch-list", i)
				}
			}
			check("", nil)
			check("ns-3", nil)
			// A selector that drops objects between others: a chunk whose
			// predecessors were dropped cannot be used.
			check("", func(e *snapshot.Entry) bool { return len(e.Raw)%3 != 0 })

			// A shard selector alone (here a stand-in matching half the
			// objects): its watch-list caches its chunks under the
			// shard's key, beside the whole collection's, and the next
			// one reuses them.
			sel, err := shardparser.Parse(shardTestSelectors[0])
			if err != nil {
				t.Fatal(err)
			}
			inHalf := func(e *snapshot.Entry) bool { return len(e.Raw)%2 == 0 }
			shard = sel
			check("", inHalf)
			key := snapshot.GzipKey(sel.String())
			built := map[string]*snapshot.GzipItem{}
			for i, e := range entries {
				if !inHalf(e) {
					continue
				}
				it := e.GzipCached(snapshot.GzipWatchAdded).Find(key)
				if it == nil || it.Chunk.Len() == 0 {
					t.Fatalf("entry %d has no chunk for its shard after the shard's watch-list", i)
				}
				built[e.Key] = it
			}
			check("", inHalf)
			shard = nil
			check("", nil)
			shard = sel
			check("", inHalf)
			for _, e := range entries {
				if it, ok := built[e.Key]; ok && e.GzipCached(snapshot.GzipWatchAdded).Find(key).Chunk.Len() != it.Chunk.Len() {
					t.Fatalf("entry %s: the shard's chunk rebuilt by the watch-lists after it", e.Key)
				}
			}
		})
	}
}

// TestBookmarkItemFromTemplate: a bookmark built from the cached template
// is byte-identical to wire.BookmarkItem's for the same resourceVersion, in
// every format, for built-in and custom types, with and without the
// initial-events-end annotation; a type without a bookmark stays refused.
func TestBookmarkItemFromTemplate(t *testing.T) {
	podType := wire.ObjectType{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}}
	cmType := wire.ObjectType{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}
	for _, tc := range []struct {
		f   wire.Format
		typ wire.ObjectType
	}{
		{wire.JSON, podType}, {wire.Protobuf, podType}, {wire.Protobuf, cmType},
		{wire.MetaJSON, podType}, {wire.MetaProtobuf, podType},
		{wire.JSON, widgetType}, {wire.MetaProtobuf, widgetType},
	} {
		for _, end := range []bool{true, false} {
			for _, rv := range []uint64{1, 9, 10, 127, 128, 99999, 1 << 40} {
				want, err := wire.BookmarkItem(tc.f, tc.typ, fmt.Sprint(rv), end)
				if err != nil {
					t.Fatal(err)
				}
				got, err := bookmarkItem(tc.f, tc.typ, rv, end)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("%v %v end=%v rv=%d: %q, want %q", tc.f, tc.typ.GVK, end, rv, got, want)
				}
			}
		}
	}
	if _, err := bookmarkItem(wire.Protobuf, widgetType, 5, true); err == nil {
		t.Error("protobuf bookmark of a custom resource built; want refused")
	}
}

// A re-watch from a resourceVersion older than the store's feed (a client
// of another replica, or from before the store's first list) is served
// from the feed's start when Target.Unchanged proves that nothing changed
// in between, and passes through otherwise.
func TestServeRewatchFromBeforeTheFeed(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	store.Apply(snapshot.Change{Entry: widget("w2", 11, "a")}, 11)
	store.Apply(snapshot.Change{Entry: widget("w1", 12, "a")}, 12)
	var (
		mu        sync.Mutex
		asked     [][2]uint64
		unchanged = true
	)
	ts := serveWith(t, store, Config{NotOlderThanWait: 100 * time.Millisecond}, func(tg *Target) {
		tg.Unchanged = func(_ context.Context, from, to uint64) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, [2]uint64{from, to})
			return unchanged
		}
	})

	d := open(t, ts.URL+"?watch=1&resourceVersion=7")
	want := []got{{wire.Added, "w2", "11", false}, {wire.Modified, "w1", "12", false}}
	if diff := cmp.Diff(want, next(t, d, 2)); diff != "" {
		t.Errorf("events of a watch from 7, unchanged up to 10 (-want +got):\n%s", diff)
	}
	d.Close()
	mu.Lock()
	if diff := cmp.Diff([][2]uint64{{7, 10}}, asked); diff != "" {
		t.Errorf("Unchanged asked (-want +got):\n%s", diff)
	}
	unchanged = false
	mu.Unlock()
	// Served instead, the watch would not end: bound the wait.
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(ts.URL + "?watch=1&resourceVersion=7")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusTeapot || string(b) != "not_retained\n" {
		t.Errorf("a watch from 7 with a change before 10: %d %q, want pass through (not_retained)", resp.StatusCode, b)
	}
}
