package watch

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	shardparser "k8s.io/apiserver/pkg/sharding"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// shardedPod is pod name of namespace ns at rv, its uid derived from its
// generation gen (a pod deleted and created again gets another uid),
// random-looking as the apiserver's.
func shardedPod(ns, name string, gen int, rv uint64) *snapshot.Entry {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", ns, name, gen))
	uid := fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	raw := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":"%d"}}`, name, ns, uid, rv)
	return snapshot.NewEntry(ns, name, rv, nil, nil, nil, []byte(raw))
}

// shardTestSelectors split the hash space of uids in two halves.
var shardTestSelectors = []string{
	"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
	"shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
}

// A watch-list with a shard selector, served by the Handler as the edge
// serves it, gets the initial events of its shard's objects only, then the
// events of its shard's objects only: updates, deletions, creations, and a
// pod deleted and created again under another uid leaves one shard and
// enters the other. Every event of the collection reaches exactly one of
// two watchers of the two halves of the hash space.
func TestShardWatch(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 1 << 16})
	type podGen struct {
		ns, name string
		gen      int
	}
	var pods []podGen
	var initial []*snapshot.Entry
	for i := range 30 {
		p := podGen{ns: fmt.Sprintf("ns-%d", i%3), name: fmt.Sprintf("p%02d", i)}
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(a, b podGen) int { return compareKeys(a.ns+"/"+a.name, b.ns+"/"+b.name) })
	for i, p := range pods {
		initial = append(initial, shardedPod(p.ns, p.name, p.gen, uint64(i+1)))
	}
	store.Replace(initial, 30)

	h := NewHandler(NewServer(Config{BookmarkInterval: time.Millisecond, ServeShardSelectors: true}), podsRegistry(t, store, time.Minute), nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.ServeWatch(w, r) {
			http.Error(w, "passed through", http.StatusTeapot)
		}
	}))
	t.Cleanup(ts.Close)

	progress := newBookmarkProgress(len(shardTestSelectors))
	received := make([][]watchEvent, len(shardTestSelectors))
	decoders := make([]*wire.WatchDecoder, len(shardTestSelectors))
	done := make(chan int, len(shardTestSelectors))
	for i, sel := range shardTestSelectors {
		q := url.Values{"watch": {"1"}, "resourceVersion": {"0"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
			"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"600"}, "shardSelector": {sel}}
		decoders[i] = open(t, ts.URL+"/api/v1/pods?"+q.Encode())
		defer func(d *wire.WatchDecoder) { _ = d.Close() }(decoders[i])
		go func() {
			defer func() { progress.end(i); done <- i }()
			received[i] = readWatch(t, decoders[i], func(rv uint64) { progress.saw(i, rv) })
		}()
	}
	if !progress.waitAll(30, time.Minute) {
		t.Fatal("no initial-events-end bookmark within a minute")
	}

	// The changes, as (type, object) at rv 31 on.
	type change struct {
		typ wire.EventType
		e   *snapshot.Entry
	}
	var log []change
	rv := uint64(30)
	apply := func(typ wire.EventType, p podGen) {
		rv++
		e := shardedPod(p.ns, p.name, p.gen, rv)
		store.Apply(snapshot.Change{Deleted: typ == wire.Deleted, Entry: e}, rv)
		log = append(log, change{typ, e})
	}
	for i, p := range pods {
		apply(wire.Modified, p)
		if i%4 == 0 {
			apply(wire.Deleted, p)
			p.gen++
			apply(wire.Added, p) // the same name, another uid
		}
	}
	for i := range 10 {
		apply(wire.Added, podGen{ns: "ns-new", name: fmt.Sprintf("q%d", i)})
	}
	if !progress.waitAll(rv, time.Minute) {
		t.Fatalf("no bookmark at the last change %d within a minute", rv)
	}
	for _, d := range decoders {
		_ = d.Close()
	}
	for range decoders {
		<-done
	}

	events := 0
	for i, s := range shardTestSelectors {
		sel, err := shardparser.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		in := func(e *snapshot.Entry) bool {
			var obj metav1.PartialObjectMetadata
			if err := json.Unmarshal(e.Raw, &obj); err != nil {
				t.Fatal(err)
			}
			ok, err := sel.Matches(&obj)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		var want []watchEvent
		for _, e := range initial {
			if in(e) {
				want = append(want, watchEvent{wire.Added, e.Name(), e.RV})
			}
		}
		initialEvents := len(want)
		for _, c := range log {
			if in(c.e) {
				want = append(want, watchEvent{c.typ, c.e.Name(), c.e.RV})
			}
		}
		if initialEvents == 0 || initialEvents == len(initial) || len(want) == initialEvents {
			t.Fatalf("%s: %d initial events of %d, %d events after: not a test", s, initialEvents, len(initial), len(want)-initialEvents)
		}
		if problem := checkWatch(received[i], want); problem != "" {
			t.Errorf("%s: %s", s, problem)
		}
		if n := len(received[i]) - countBookmarks(received[i]); n != len(want) {
			t.Errorf("%s: %d events, want %d", s, n, len(want))
		}
		events += len(want) - initialEvents
	}
	if events != len(log) {
		t.Errorf("the two halves of the hash space got %d events of %d changes, want each once", events, len(log))
	}
}

// compareKeys orders object keys as a store does.
func compareKeys(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func countBookmarks(events []watchEvent) int {
	n := 0
	for _, ev := range events {
		if ev.Type == wire.Bookmark {
			n++
		}
	}
	return n
}

// A watch whose shard selector does not parse gets the apiserver's 500
// Status as its response, not an ERROR event; with serving shard selectors
// off, a watch with one passes through (passed_through_total reason
// shard_selector), and one with an empty shardSelector (none) is served.
func TestShardWatchRejectedOrPassedThrough(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{shardedPod("a", "p", 0, 1)}, 5)
	reg := podsRegistry(t, store, time.Minute)

	h := NewHandler(NewServer(Config{ServeShardSelectors: true}), reg, nil)
	const bad = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"
	_, parseErr := shardparser.Parse(bad)
	for _, q := range []string{"watch=1&resourceVersion=5", "watch=1&resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?"+q+"&shardSelector="+url.QueryEscape(bad), nil)
		if !h.ServeWatch(rec, r) {
			t.Fatalf("%s: passed through; want the apiserver's 500", q)
		}
		var status map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatalf("%s: %v: %s", q, err, rec.Body.String())
		}
		_, hasReason := status["reason"]
		if rec.Code != http.StatusInternalServerError || hasReason || status["kind"] != "Status" || status["message"] != "invalid shard selector: "+parseErr.Error() {
			t.Errorf("%s: HTTP %d %s; want the apiserver's 500 for %v", q, rec.Code, rec.Body.String(), parseErr)
		}
	}

	metricsReg := prometheus.NewRegistry()
	m, err := NewMetrics(metricsReg)
	if err != nil {
		t.Fatal(err)
	}
	off := NewHandler(NewServer(Config{Metrics: m}), reg, nil)
	for _, sel := range []string{shardTestSelectors[0], bad} {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1&resourceVersion=5&shardSelector="+url.QueryEscape(sel), nil)
		if off.Cacheable(r) {
			t.Errorf("serving shard selectors off, %s: cacheable", sel)
		}
		if off.ServeWatch(httptest.NewRecorder(), r) {
			t.Errorf("serving shard selectors off, %s: served", sel)
		}
	}
	if got := testutil.ToFloat64(m.passThrough.WithLabelValues("", "shard_selector")); got != 2 {
		t.Errorf("passed_through_total{reason=shard_selector} = %v, want 2", got)
	}
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1&resourceVersion=5&timeoutSeconds=1&shardSelector=", nil)
	if !off.Cacheable(r) {
		t.Error("serving shard selectors off, an empty shardSelector (none): not cacheable")
	}
}

// A gzipped watch-list's initial events cache their chunks for the whole
// collection without a namespace or selector, for a shard under its key
// with a shard selector alone, and not otherwise.
func TestShardWatchGzipCache(t *testing.T) {
	sel, err := shardparser.Parse(shardTestSelectors[0])
	if err != nil {
		t.Fatal(err)
	}
	match := func(*snapshot.Entry) bool { return true }
	tests := []struct {
		name   string
		target Target
		want   snapshot.GzipCache
	}{
		{name: "no selector", want: snapshot.GzipCache{Build: true}},
		{name: "a namespace", target: Target{Namespace: "ns"}},
		{name: "a selector", target: Target{Match: match}},
		{name: "a shard alone", target: Target{Match: match, Shard: sel, ShardOnly: true},
			want: snapshot.GzipCache{Build: true, Key: snapshot.GzipKey(sel.String())}},
		{name: "a shard and another selector", target: Target{Match: match, Shard: sel}},
		{name: "a shard alone in a namespace", target: Target{Namespace: "ns", Match: match, Shard: sel, ShardOnly: true}},
	}
	for _, tc := range tests {
		if got := tc.target.gzipCache(); got != tc.want {
			t.Errorf("%s: gzipCache() = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
