package consistency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

func TestHashKeys(t *testing.T) {
	sum := sha256.Sum256([]byte("a/x\x001\nb\x0022\n"))
	want := hex.EncodeToString(sum[:])
	if got := hashKeys(slices.Values([]keyRV{{"a/x", 1}, {"b", 22}})); got != want {
		t.Errorf("hashKeys = %s, want %s", got, want)
	}
	// A key that ends where another begins must not collide.
	if hashKeys(slices.Values([]keyRV{{"a", 11}})) == hashKeys(slices.Values([]keyRV{{"a\x001", 1}})) {
		t.Error("hashKeys collides on key/resourceVersion boundaries")
	}
	empty := sha256.Sum256(nil)
	if got := hashKeys(slices.Values([]keyRV(nil))); got != hex.EncodeToString(empty[:]) {
		t.Errorf("hashKeys(nothing) = %s, want sha256 of nothing", got)
	}
}

func TestDiffKeys(t *testing.T) {
	tests := []struct {
		name          string
		snap, api     []keyRV
		examples      int
		want          KeyDiff
		wantSummaries string
	}{
		{name: "equal", snap: []keyRV{{"a", 1}, {"b", 2}}, api: []keyRV{{"a", 1}, {"b", 2}}, examples: 5,
			wantSummaries: "missing 0 [], extra 0 [], different 0 []"},
		{name: "both_empty", examples: 5, wantSummaries: "missing 0 [], extra 0 [], different 0 []"},
		{name: "missing_extra_different", snap: []keyRV{{"a", 1}, {"c", 3}, {"d", 4}}, api: []keyRV{{"a", 1}, {"b", 2}, {"d", 5}}, examples: 5,
			want:          KeyDiff{Missing: []string{"b"}, MissingCount: 1, Extra: []string{"c"}, ExtraCount: 1, Different: []RVDifference{{Key: "d", Snapshot: 4, APIServer: 5}}, DifferentCount: 1},
			wantSummaries: "missing 1 [b], extra 1 [c], different 1 [d snapshot=4 apiserver=5]"},
		{name: "snapshot_empty", api: []keyRV{{"a", 1}, {"b", 2}, {"c", 3}}, examples: 2,
			want:          KeyDiff{Missing: []string{"a", "b"}, MissingCount: 3},
			wantSummaries: "missing 3 [a b], extra 0 [], different 0 []"},
		{name: "apiserver_empty", snap: []keyRV{{"a", 1}, {"b", 2}}, examples: 1,
			want:          KeyDiff{Extra: []string{"a"}, ExtraCount: 2},
			wantSummaries: "missing 0 [], extra 2 [a], different 0 []"},
		{name: "tail_differs", snap: []keyRV{{"a", 1}, {"z", 9}}, api: []keyRV{{"a", 1}, {"y", 8}}, examples: 5,
			want:          KeyDiff{Missing: []string{"y"}, MissingCount: 1, Extra: []string{"z"}, ExtraCount: 1},
			wantSummaries: "missing 1 [y], extra 1 [z], different 0 []"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := diffKeys(tc.snap, tc.api, tc.examples)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("diffKeys (-want +got):\n%s", diff)
			}
			if got.Empty() != (tc.wantSummaries == "missing 0 [], extra 0 [], different 0 []") {
				t.Errorf("Empty() = %v for %v", got.Empty(), got)
			}
			if s := got.String(); s != tc.wantSummaries {
				t.Errorf("String() = %q, want %q", s, tc.wantSummaries)
			}
		})
	}
}

func TestGroupByRV(t *testing.T) {
	c := func(format wire.Format, lo, hi uint64) storeCheck { return storeCheck{format: format, lo: lo, hi: hi} }
	tests := []struct {
		name   string
		checks []storeCheck
		want   map[uint64][]wire.Format // LIST resourceVersion -> formats it checks
	}{
		{name: "none", want: map[uint64][]wire.Format{}},
		{name: "one", checks: []storeCheck{c(wire.JSON, 5, 9)}, want: map[uint64][]wire.Format{9: {wire.JSON}}},
		{name: "same_rv", checks: []storeCheck{c(wire.JSON, 9, 9), c(wire.Protobuf, 9, 9)}, want: map[uint64][]wire.Format{9: {wire.JSON, wire.Protobuf}}},
		{name: "overlapping_share_newest_common", checks: []storeCheck{c(wire.Protobuf, 7, 12), c(wire.JSON, 5, 10)},
			want: map[uint64][]wire.Format{10: {wire.JSON, wire.Protobuf}}},
		{name: "disjoint", checks: []storeCheck{c(wire.JSON, 5, 6), c(wire.Protobuf, 7, 8)},
			want: map[uint64][]wire.Format{6: {wire.JSON}, 8: {wire.Protobuf}}},
		{name: "two_points_cover_three", checks: []storeCheck{c(wire.JSON, 1, 4), c(wire.Protobuf, 3, 9), c(wire.MetaJSON, 5, 6)},
			want: map[uint64][]wire.Format{4: {wire.JSON}, 6: {wire.MetaJSON, wire.Protobuf}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[uint64][]wire.Format{}
			for _, g := range groupByRV(tc.checks) {
				for _, c := range g.checks {
					if g.rv < c.lo || g.rv > c.hi {
						t.Errorf("%v [%d, %d] checked at %d", c.format, c.lo, c.hi, g.rv)
					}
					got[g.rv] = append(got[g.rv], c.format)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeMetaAPIServer answers paginated PartialObjectMetadataList LISTs of
// pods in protobuf at exactly one resourceVersion, as the apiserver does;
// other resourceVersions get 410 Gone.
type fakeMetaAPIServer struct {
	t       *testing.T
	rv      uint64
	objects []keyRV // in key order

	mu    sync.Mutex
	lists []string // resourceVersion of each first page
	pages int
}

func (f *fakeMetaAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	if r.URL.Path != "/api/v1/pods" || r.Header.Get("Accept") != wire.MetaProtobuf.ListAccept() {
		f.t.Errorf("unexpected request %s Accept %q", r.URL, r.Header.Get("Accept"))
		http.Error(w, "unexpected", http.StatusBadRequest)
		return
	}
	f.pages++
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		f.t.Errorf("request %s without a limit", r.URL)
	}
	start := 0
	if c := q.Get("continue"); c != "" {
		if q.Has("resourceVersion") || q.Has("resourceVersionMatch") {
			f.t.Errorf("continue with resourceVersion: %s", r.URL)
		}
		start, _ = strconv.Atoi(c)
	} else {
		f.lists = append(f.lists, q.Get("resourceVersion"))
		if q.Get("resourceVersionMatch") != "Exact" || q.Get("resourceVersion") != strconv.FormatUint(f.rv, 10) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}`))
			return
		}
	}
	end := min(start+limit, len(f.objects))
	var items [][]byte
	for _, o := range f.objects[start:end] {
		ns, name, ok := strings.Cut(o.key, "/")
		if !ok {
			ns, name = "", o.key
		}
		raw, err := (&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.FormatUint(o.rv, 10)}}).Marshal()
		if err != nil {
			f.t.Fatal(err)
		}
		items = append(items, raw)
	}
	lm := wire.ListMeta{ResourceVersion: strconv.FormatUint(f.rv, 10)}
	if end < len(f.objects) {
		lm.Continue = strconv.Itoa(end)
	}
	var buf bytes.Buffer
	if err := wire.WriteList(&buf, wire.MetaProtobuf, wire.EnvelopeFor(wire.MetaProtobuf, schema.GroupVersionKind{}, false, lm), items); err != nil {
		f.t.Fatal(err)
	}
	w.Header().Set("Content-Type", wire.MetaProtobuf.ContentType())
	_, _ = w.Write(buf.Bytes())
}

func (f *fakeMetaAPIServer) firstPages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lists)
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// testStore is a synced store holding objects; its latest snapshot holds
// the state for every resourceVersion in [rv, progress].
func testStore(objects []keyRV, rv, progress uint64) *snapshot.Store {
	s := snapshot.NewStore(snapshot.StoreConfig{})
	var entries []*snapshot.Entry
	for _, o := range objects {
		entries = append(entries, &snapshot.Entry{Key: o.key, RV: o.rv, Raw: []byte("x")})
	}
	s.Replace(entries, rv)
	s.MarkProgress(progress)
	return s
}

// fakeCache holds stores of pods by format.
type fakeCache struct {
	mu     sync.Mutex
	stores map[wire.Format]*snapshot.Store
}

func newFakeCache() *fakeCache { return &fakeCache{stores: map[wire.Format]*snapshot.Store{}} }

func (c *fakeCache) add(format wire.Format, s *snapshot.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores[format] = s
}

func (c *fakeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.stores)
}

func (c *fakeCache) Resources() []schema.GroupVersionResource {
	if c.len() == 0 {
		return nil
	}
	return []schema.GroupVersionResource{podsGVR}
}

func (c *fakeCache) Stores(gvr schema.GroupVersionResource) []Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stores []Store
	for format, s := range c.stores {
		if snap, progress, err := s.Latest(); err == nil && gvr == podsGVR {
			stores = append(stores, Store{Format: format, Snapshot: snap, Progress: progress})
		}
	}
	return stores
}

func (c *fakeCache) Drop(schema.GroupVersionResource, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.stores)
}

// httpLister lists pods from a test server.
type httpLister struct{ srv *httptest.Server }

func (l httpLister) List(ctx context.Context, _ schema.GroupVersionResource, format wire.Format, q url.Values) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.srv.URL+"/api/v1/pods?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", format.ListAccept())
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return nil, fmt.Errorf("%s: %w", body, snapshot.ErrGone)
	}
	return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
}

func newTestChecker(t *testing.T, apiserver *httptest.Server, reg prometheus.Registerer, cache *fakeCache) *Checker {
	t.Helper()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PageSize, cfg.Metrics = 2, m
	return New(cfg, cache, httpLister{apiserver})
}

func TestCheckConsistency(t *testing.T) {
	objects := []keyRV{{"a/p1", 3}, {"a/p2", 5}, {"b/p1", 7}, {"b/p2", 8}, {"c/p1", 9}}
	corrupted := []keyRV{{"a/p1", 3}, {"b/p1", 6}, {"b/p2", 8}, {"c/p1", 9}, {"d/p1", 4}}
	tests := []struct {
		name string
		// The JSON store holds [10, 12], the protobuf store [11, 15]: one
		// LIST at 12 checks both.
		apiRV          uint64
		json, protobuf []keyRV
		wantResults    map[string]string // format -> result
		wantDropped    bool
		wantDiff       *KeyDiff
		wantMetrics    string
	}{
		{name: "match", apiRV: 12, json: objects, protobuf: objects,
			wantResults: map[string]string{"json": Match, "protobuf": Match},
			wantMetrics: `
listproxy_consistency_checks_total{format="json",resource="pods",result="match"} 1
listproxy_consistency_checks_total{format="protobuf",resource="pods",result="match"} 1
`},
		{name: "json_differs_drops_both", apiRV: 12, json: corrupted, protobuf: objects,
			wantResults: map[string]string{"json": Mismatch, "protobuf": Match},
			wantDropped: true,
			wantDiff: &KeyDiff{
				Missing: []string{"a/p2"}, MissingCount: 1,
				Extra: []string{"d/p1"}, ExtraCount: 1,
				Different: []RVDifference{{Key: "b/p1", Snapshot: 6, APIServer: 7}}, DifferentCount: 1,
			},
			wantMetrics: `
listproxy_consistency_checks_total{format="json",resource="pods",result="mismatch"} 1
listproxy_consistency_checks_total{format="protobuf",resource="pods",result="match"} 1
`},
		{name: "gone_is_inconclusive", apiRV: 20, json: corrupted, protobuf: objects,
			wantResults: map[string]string{"json": Error, "protobuf": Error},
			wantMetrics: `
listproxy_consistency_checks_total{format="json",resource="pods",result="error"} 1
listproxy_consistency_checks_total{format="protobuf",resource="pods",result="error"} 1
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeMetaAPIServer{t: t, rv: tc.apiRV, objects: objects}
			srv := httptest.NewServer(api)
			defer srv.Close()
			reg := prometheus.NewRegistry()
			cache := newFakeCache()
			chk := newTestChecker(t, srv, reg, cache)
			cache.add(wire.JSON, testStore(tc.json, 10, 12))
			cache.add(wire.Protobuf, testStore(tc.protobuf, 11, 15))

			report := chk.Check(context.Background())
			if diff := cmp.Diff([]string{"12"}, api.firstPages()); diff != "" {
				t.Errorf("apiserver LISTs by resourceVersion (-want +got):\n%s", diff)
			}
			got := map[string]string{}
			for _, r := range report.Results {
				got[r.Format] = r.Result
				if r.Dropped != tc.wantDropped {
					t.Errorf("%s: Dropped = %v, want %v", r.Format, r.Dropped, tc.wantDropped)
				}
				if r.ResourceVersion != "12" || r.Resource != "pods" || r.Version != "v1" {
					t.Errorf("%s: result for %s %s at %s, want pods v1 at 12", r.Format, r.Resource, r.Version, r.ResourceVersion)
				}
				if r.Result == Error && !strings.Contains(r.Error, "resource version gone") {
					t.Errorf("%s: Error = %q, want it to name the 410", r.Format, r.Error)
				}
				if r.Result == Match && (r.SnapshotHash != r.APIServerHash || r.Objects != len(objects) || r.APIServerObjects != len(objects)) {
					t.Errorf("%s: match with hashes %s, %s and %d, %d objects", r.Format, r.SnapshotHash, r.APIServerHash, r.Objects, r.APIServerObjects)
				}
				if r.Format == "json" {
					if diff := cmp.Diff(tc.wantDiff, r.Diff); diff != "" {
						t.Errorf("json diff (-want +got):\n%s", diff)
					}
				}
			}
			if diff := cmp.Diff(tc.wantResults, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if left := cache.len(); (left == 0) != tc.wantDropped {
				t.Errorf("%d stores left; want them dropped: %v", left, tc.wantDropped)
			}
			want := "# HELP listproxy_consistency_checks_total Snapshots compared with the apiserver at the same resourceVersion, by resource, format and result (match, mismatch: the resource's stores were dropped to resync, error: inconclusive).\n# TYPE listproxy_consistency_checks_total counter" + tc.wantMetrics
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "listproxy_consistency_checks_total"); err != nil {
				t.Error(err)
			}
			last, ok := chk.Last()
			if !ok || !cmp.Equal(last, report) {
				t.Errorf("Last() = %+v, %v; want the report", last, ok)
			}
		})
	}
}

// TestCheckConsistencyListsPerRV: stores whose snapshots share no
// resourceVersion are each checked with their own LIST.
func TestCheckConsistencyListsPerRV(t *testing.T) {
	objects := []keyRV{{"a/p1", 3}}
	api := &fakeMetaAPIServer{t: t, rv: 12, objects: objects}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cache := newFakeCache()
	chk := newTestChecker(t, srv, prometheus.NewRegistry(), cache)
	cache.add(wire.JSON, testStore(objects, 10, 12))
	cache.add(wire.MetaJSON, testStore(objects, 14, 15))
	cache.add(wire.Protobuf, snapshot.NewStore(snapshot.StoreConfig{})) // not synced: skipped

	report := chk.Check(context.Background())
	if diff := cmp.Diff([]string{"12", "15"}, api.firstPages()); diff != "" {
		t.Errorf("apiserver LISTs by resourceVersion (-want +got):\n%s", diff)
	}
	got := map[string]string{}
	for _, r := range report.Results {
		got[r.Format] = r.Result
	}
	// 15 is gone at the fake apiserver: inconclusive, nothing dropped.
	if diff := cmp.Diff(map[string]string{"json": Match, "meta-json": Error}, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if cache.len() != 3 {
		t.Errorf("%d stores left, want 3", cache.len())
	}
}

func TestRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	chk := New(Config{Interval: time.Minute, Clock: clk}, newFakeCache(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		chk.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond) // polling a condition, not synchronising
		}
	}
	var last time.Time // Started of the last report
	for i := range 3 {
		waitFor("the loop to wait", clk.HasWaiters)
		clk.Step(59 * time.Second)
		if r, _ := chk.Last(); !r.Started.Equal(last) {
			t.Fatalf("round %d: a check ran before the interval passed", i)
		}
		before := clk.Now()
		clk.Step(13 * time.Second) // past the interval plus the largest jitter
		waitFor("a check", func() bool {
			r, ok := chk.Last()
			last = r.Started
			return ok && !r.Started.Before(before)
		})
	}
}

func TestConsistencyReportJSON(t *testing.T) {
	r := Report{Duration: "1s", Results: []Result{{
		Version: "v1", Resource: "pods", Format: "json", ResourceVersion: "12", Result: Mismatch,
		Diff: &KeyDiff{Different: []RVDifference{{Key: "a/b", Snapshot: 1, APIServer: 2}}, DifferentCount: 1},
	}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"result":"mismatch"`, `"different":[{"key":"a/b","snapshotResourceVersion":"1","apiserverResourceVersion":"2"}]`, `"differentCount":1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
}
