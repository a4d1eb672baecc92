package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	shardparser "k8s.io/apiserver/pkg/sharding"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

var podFields = snapshot.NewFieldNames("spec.nodeName")

// pod is a Widget-typed object with a node, as a pod's entry carries it.
func pod(name, node string, rv uint64) *snapshot.Entry {
	raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d"},"spec":{"nodeName":%q}}`, name, rv, node)
	return snapshot.NewEntry("ns", name, rv, nil, podFields, []string{node}, []byte(raw))
}

// nodeTarget is the target of a node agent's watch: its node's pods.
func nodeTarget(store *snapshot.Store, node string, matches *atomic.Int64) Target {
	return Target{
		Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store,
		Match: func(e *snapshot.Entry) bool {
			if matches != nil {
				matches.Add(1)
			}
			return e.Fields().Get("spec.nodeName") == node
		},
		Wake:              snapshot.FieldValue{Field: "spec.nodeName", Value: node},
		WatchListDefaults: true,
	}
}

// sink is a ResponseWriter that keeps what is written.
type sink struct {
	mu     sync.Mutex
	header http.Header
	buf    bytes.Buffer
}

func (s *sink) Header() http.Header { return s.header }
func (s *sink) WriteHeader(int)     {}
func (s *sink) Flush()              {}
func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestNodeWatchersWokenByTheirNodeOnly: of 2,000 watchers each of one
// node's pods, a change to a pod of node-7 wakes node-7's watcher only;
// no other reads the change or evaluates its selector, then or later.
func TestNodeWatchersWokenByTheirNodeOnly(t *testing.T) {
	const watchers = 2000
	waits := make(chan string, 4*watchers) // node of each watcher that waits
	testHookWait = func(t Target) { waits <- t.Wake.Value }
	store := snapshot.NewStore(snapshot.StoreConfig{})
	var entries []*snapshot.Entry
	for i := range watchers {
		entries = append(entries, pod(fmt.Sprintf("p%d", i), fmt.Sprintf("node-%d", i), 5))
	}
	store.Replace(entries, 10)

	srv := NewServer(Config{})
	q := "watch=1&resourceVersion=10&timeoutSeconds=3600"
	d := Decide(q)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	matches := make([]atomic.Int64, watchers)
	sinks := make([]*sink, watchers)
	for i := range sinks {
		sinks[i] = &sink{header: http.Header{}}
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/?"+q, nil)
		target := nodeTarget(store, fmt.Sprintf("node-%d", i), &matches[i])
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.Serve(sinks[i], r, d, target)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		testHookWait = nil
	})
	for range watchers {
		<-waits
	}

	// Each change is read by its node's watcher, which then waits again;
	// a watcher woken by another's change would wait again too.
	var got []string
	store.Apply(snapshot.Change{Entry: pod("p7", "node-7", 11)}, 11)
	got = append(got, <-waits)
	store.Apply(snapshot.Change{Entry: pod("p8", "node-8", 12)}, 12)
	got = append(got, <-waits)
	cancel()
	wg.Wait()
	close(waits)
	for node := range waits {
		got = append(got, node)
	}
	if diff := cmp.Diff([]string{"node-7", "node-8"}, got); diff != "" {
		t.Errorf("watchers that read changes (-want +got):\n%s", diff)
	}
	// Only the two watchers woken read changes, and each only its own:
	// node-8's skips the change to p7, which its wait proves is not its.
	evaluated := map[int]int64{}
	for i := range matches {
		if n := matches[i].Load(); n > 0 {
			evaluated[i] = n
		}
	}
	if diff := cmp.Diff(map[int]int64{7: 2, 8: 2}, evaluated); diff != "" {
		t.Errorf("selector evaluations by watcher (-want +got):\n%s", diff)
	}
	for i, want := range map[int]string{7: `"name":"p7"`, 8: `"name":"p8"`, 9: ""} {
		if got := sinks[i].String(); !bytes.Contains([]byte(got), []byte(want)) || (want == "" && got != "") {
			t.Errorf("node-%d's watcher got %q, want %s", i, got, want)
		}
	}
}

// TestNodeWatchersTransition: a pod moving from node-a to node-b is
// DELETED for node-a's watcher (its last state on node-a, at the move's
// resourceVersion) and ADDED for node-b's, as the apiserver's watch cache
// sends them.
func TestNodeWatchersTransition(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{pod("p1", "node-a", 5), pod("p2", "node-b", 6)}, 10)
	client := &http.Client{Timeout: time.Minute} // ends the test if an event never comes
	t.Cleanup(client.CloseIdleConnections)
	open := func(node string) *wire.WatchDecoder {
		t.Helper()
		ts := serveWith(t, store, Config{}, func(target *Target) {
			*target = nodeTarget(store, node, nil)
		})
		resp, err := client.Get(ts.URL + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		dec := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
		t.Cleanup(func() { _ = dec.Close() })
		return dec
	}
	a, b := open("node-a"), open("node-b")
	if diff := cmp.Diff([]got{{wire.Added, "p1", "5", false}, {wire.Bookmark, "", "10", true}}, next(t, a, 2)); diff != "" {
		t.Fatalf("node-a's initial events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]got{{wire.Added, "p2", "6", false}, {wire.Bookmark, "", "10", true}}, next(t, b, 2)); diff != "" {
		t.Fatalf("node-b's initial events (-want +got):\n%s", diff)
	}

	store.Apply(snapshot.Change{Entry: pod("p1", "node-b", 11)}, 11)
	if diff := cmp.Diff([]got{{wire.Deleted, "p1", "11", false}}, next(t, a, 1)); diff != "" {
		t.Errorf("node-a's events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]got{{wire.Added, "p1", "11", false}}, next(t, b, 1)); diff != "" {
		t.Errorf("node-b's events (-want +got):\n%s", diff)
	}
}

// TestIdleNodeWatcherSleepsThroughOthers: a node's watcher that sleeps
// while other nodes' pods change, many times more than the feed keeps, is
// not ended as too slow: its periodic bookmark carries the
// newest change, and its own pod's next change reaches it.
func TestIdleNodeWatcherSleepsThroughOthers(t *testing.T) {
	waits := make(chan string, 16)
	testHookWait = func(t Target) { waits <- t.Wake.Value }
	t.Cleanup(func() { testHookWait = nil })
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 16})
	store.Replace([]*snapshot.Entry{pod("mine", "node-a", 5), pod("other", "node-b", 6)}, 10)
	clk := testingclock.NewFakeClock(time.Now())
	ts := serveWith(t, store, Config{BookmarkInterval: time.Minute, Clock: clk}, func(target *Target) {
		*target = nodeTarget(store, "node-a", nil)
	})
	d := open(t, ts.URL+"?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=600")
	defer d.Close()
	<-waits
	others := func(from, to uint64) {
		for rv := from; rv <= to; rv++ {
			store.Apply(snapshot.Change{Entry: pod("other", "node-b", rv)}, rv)
		}
	}

	others(11, 110)
	clk.Step(time.Minute)
	if diff := cmp.Diff([]got{{wire.Bookmark, "", "110", false}}, next(t, d, 1)); diff != "" {
		t.Errorf("after 100 changes to another node (-want +got):\n%s", diff)
	}
	<-waits
	others(111, 210)
	store.Apply(snapshot.Change{Entry: pod("mine", "node-a", 211)}, 211)
	if diff := cmp.Diff([]got{{wire.Modified, "mine", "211", false}}, next(t, d, 1)); diff != "" {
		t.Errorf("its own pod's change after 100 to another node (-want +got):\n%s", diff)
	}
}

// TestShardWatchersWokenByTheirShardOnly: of 8 watchers each of one eighth
// of the hash space of uids, a change to a pod wakes the watcher of its
// shard only; no other reads the change or evaluates its selector, then or
// later.
func TestShardWatchersWokenByTheirShardOnly(t *testing.T) {
	const shards = 8
	waits := make(chan string, 4*shards) // shard selector of each watcher that waits
	testHookWait = func(t Target) { waits <- t.Shard.String() }
	uidOf := func(e *snapshot.Entry) (string, error) { return wire.ObjectUID(wire.JSON, e.Raw) }
	store := snapshot.NewStore(snapshot.StoreConfig{UID: uidOf})
	var entries []*snapshot.Entry
	for i := range 100 {
		entries = append(entries, shardedPod("ns", fmt.Sprintf("p%02d", i), 0, 5))
	}
	store.Replace(entries, 10)

	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{ServeShardSelectors: true, Metrics: m})
	q := "watch=1&resourceVersion=10&timeoutSeconds=3600"
	d := Decide(q)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	matches := make([]atomic.Int64, shards)
	selectors := make([]sharding.Selector, shards)
	for i := range shards {
		start := fmt.Sprintf("0x%016x", uint64(i)<<61)
		end := fmt.Sprintf("0x%016x", uint64(i+1)<<61)
		if i == shards-1 {
			end = "0x10000000000000000"
		}
		sel, err := shardparser.Parse(fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", start, end))
		if err != nil {
			t.Fatal(err)
		}
		selectors[i] = sel
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/?"+q, nil)
		target := Target{
			Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store,
			Match: func(e *snapshot.Entry) bool {
				matches[i].Add(1)
				return inShardJSON(t, sel, e)
			},
			Shard:             sel,
			WatchListDefaults: true,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.Serve(&sink{header: http.Header{}}, r, d, target)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		testHookWait = nil
	})
	for range shards {
		<-waits
	}

	// Each change is read by its shard's watcher, which then waits again;
	// a watcher woken by another's change would wait again too.
	shardOf := func(e *snapshot.Entry) int {
		for i, sel := range selectors {
			if inShardJSON(t, sel, e) {
				return i
			}
		}
		t.Fatalf("%s in no shard", e.Key)
		return -1
	}
	var want, got []string
	wantEvaluated := map[int]int64{}
	for i, name := range []string{"p07", "p42", "p99"} {
		e := shardedPod("ns", name, 0, uint64(11+i))
		store.Apply(snapshot.Change{Entry: e}, e.RV)
		want = append(want, selectors[shardOf(e)].String())
		wantEvaluated[shardOf(e)] += 2 // the object and its state before
		got = append(got, <-waits)
	}
	cancel()
	wg.Wait()
	close(waits)
	for s := range waits {
		got = append(got, s)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("watchers that read changes (-want +got):\n%s", diff)
	}
	evaluated := map[int]int64{}
	for i := range matches {
		if n := matches[i].Load(); n > 0 {
			evaluated[i] = n
		}
	}
	if diff := cmp.Diff(wantEvaluated, evaluated); diff != "" {
		t.Errorf("selector evaluations by watcher (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.changesRead); got != 3 {
		t.Errorf("listproxy_watch_changes_read_total = %v, want 3: each change read by its shard's watcher only", got)
	}
}

// inShardJSON reports whether e's JSON object is in sel's shard, by the
// apiserver's selector.
func inShardJSON(t *testing.T, sel sharding.Selector, e *snapshot.Entry) bool {
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(e.Raw, &obj); err != nil {
		t.Error(err)
		return false
	}
	ok, err := sel.Matches(&obj)
	return ok && err == nil
}
