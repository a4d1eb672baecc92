package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"
)

// Benchmarks at the scale docs/design.md "Goals" is about: 100k pods of about 4 KB, each
// built from testdata/pod.json (a Deployment's running pod as an item of
// the apiserver's JSON list, managedFields included). Run with
//
//	go test -run XXX -bench . -benchmem ./pkg/snapshot/
//
// LISTPROXY_BENCH_OBJECTS sets another number of objects, e.g. 1000000 for
// a store beyond what one test machine's control plane can hold (`make
// bench-scale`).

const (
	benchNamespaces = 100
	benchPageLimit  = 500
)

// benchObjects is the store size of the benchmarks: 100,000, or
// $LISTPROXY_BENCH_OBJECTS.
var benchObjects = envCount("LISTPROXY_BENCH_OBJECTS", 100_000)

// envCount is the positive integer in the environment variable name, or def
// when it is unset. A value that is not a positive integer panics: a
// benchmark must not quietly run at another scale than asked.
func envCount(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		panic(fmt.Sprintf("%s=%q: want a positive integer", name, v))
	}
	return n
}

// podTemplate is testdata/pod.json, compacted as the apiserver sends it,
// with $NAME, $NAMESPACE, $APP, $UID, $RV, $IDX, $TIER, $NODE and $IP
// filled in per object.
var podTemplate = sync.OnceValues(func() (string, error) {
	raw, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", fmt.Errorf("compact testdata/pod.json: %w", err)
	}
	return buf.String(), nil
})

// benchEntry builds object i the way the proxy's extractor does: its own
// Raw bytes (or shared, when not nil), labels, and
// the pod field set the proxy extracts for selectors.
func benchEntry(tmpl string, i int, rv uint64, shared []byte) *Entry {
	ns := fmt.Sprintf("team-%03d", i%benchNamespaces)
	app := fmt.Sprintf("svc-%02d", (i/benchNamespaces)%40)
	name := fmt.Sprintf("%s-7d4b9c8f6-%05x", app, i)
	node := fmt.Sprintf("node-%04d", i%2000)
	idx := strconv.Itoa(i % 10)
	tier := []string{"web", "api", "worker"}[i%3]
	ip := fmt.Sprintf("10.%d.%d.%d", 64+i>>16, (i>>8)&255, i&255)
	raw := shared
	if raw == nil {
		raw = []byte(strings.NewReplacer(
			"$NAMESPACE", ns, "$NAME", name, "$APP", app, "$NODE", node, "$IDX", idx, "$TIER", tier, "$IP", ip,
			"$UID", fmt.Sprintf("5b1f8e2a-%04x-4c3d-9e7f-%012x", i&0xffff, i),
			"$RV", strconv.FormatUint(rv, 10),
		).Replace(tmpl))
	}
	e := NewEntry(ns, name, rv, map[string]string{
		"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "storefront",
		"idx": idx, "pod-template-hash": "7d4b9c8f6", "tier": tier,
	}, benchFieldNames, []string{node, "Always", "default-scheduler", app, "false", "Running", ip, ""}, nil)
	e.Raw = raw
	return e
}

// benchFieldNames are the pod fields the proxy extracts for selectors.
var benchFieldNames = NewFieldNames("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
	"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")

// benchEntries returns n entries; with distinctRaw each has its own ~4 KB
// Raw, otherwise all share one (Page and Apply never read Raw, only its
// length).
func benchEntries(tb testing.TB, n int, distinctRaw bool) []*Entry {
	tb.Helper()
	tmpl, err := podTemplate()
	if err != nil {
		tb.Fatal(err)
	}
	var shared []byte
	if !distinctRaw {
		shared = []byte(tmpl)
	}
	entries := make([]*Entry, n)
	for i := range entries {
		entries[i] = benchEntry(tmpl, i, uint64(1000+i), shared)
	}
	return entries
}

// benchStore is a pods store (spec.nodeName index, as the proxy builds it)
// holding entries, and its entries' keys in list order.
func benchStore(entries []*Entry, cfg StoreConfig) (*Store, []string) {
	cfg.IndexField = "spec.nodeName"
	s := NewStore(cfg)
	s.Replace(entries, uint64(1000+len(entries)))
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	slices.Sort(keys)
	return s, keys
}

// sharedBench is built once per process: 100k entries sharing one Raw, for
// the benchmarks that never read Raw.
var sharedBench = sync.OnceValues(func() ([]*Entry, error) {
	tmpl, err := podTemplate()
	if err != nil {
		return nil, err
	}
	entries := make([]*Entry, benchObjects)
	for i := range entries {
		entries[i] = benchEntry(tmpl, i, uint64(1000+i), []byte(tmpl))
	}
	return entries, nil
})

func sharedEntries(tb testing.TB) []*Entry {
	tb.Helper()
	entries, err := sharedBench()
	if err != nil {
		tb.Fatal(err)
	}
	return entries
}

// pagePositions are where BenchmarkPage starts a page, as a fraction of the
// list: a first page and a page near the end.
var pagePositions = []struct {
	name     string
	fraction float64
}{
	{"position=0", 0},
	{"position=99pct", 0.99},
}

// afterKey is the PageRequest.After for a page at fraction of keys.
func afterKey(keys []string, fraction float64) string {
	if fraction == 0 {
		return ""
	}
	return keys[int(fraction*float64(len(keys)))-1]
}

func benchPage(snap *Snapshot, after string) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		req := PageRequest{After: after, Limit: benchPageLimit}
		for b.Loop() {
			if p := snap.Page(req); len(p.Items) != benchPageLimit || !p.More {
				b.Fatalf("page has %d items, more %v", len(p.Items), p.More)
			}
		}
	}
}

// BenchmarkPage: one page of 500 from a snapshot of benchObjects costs
// O(log n + limit), the same at the start and near the end of the list.
func BenchmarkPage(b *testing.B) {
	s, keys := benchStore(sharedEntries(b), StoreConfig{})
	snap, _, _ := s.Latest()
	for _, pos := range pagePositions {
		b.Run(pos.name, benchPage(snap, afterKey(keys, pos.fraction)))
	}
}

// BenchmarkPageSelector: a label selector matching 10% of the objects
// (idx=3), evaluated as the proxy does, over a first page of 500 (about 5000
// objects examined) and over the whole list.
func BenchmarkPageSelector(b *testing.B) {
	s, _ := benchStore(sharedEntries(b), StoreConfig{})
	snap, _, _ := s.Latest()
	labelSel, err := labels.Parse("idx=3")
	if err != nil {
		b.Fatal(err)
	}
	fieldSel := fields.Everything()
	match := func(e *Entry) bool { return labelSel.Matches(e.Labels()) && fieldSel.Matches(e.Fields()) }
	for _, limit := range []int{benchPageLimit, 0} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			b.ReportAllocs()
			req := PageRequest{Limit: limit, Match: match, ScanBudget: 100_000}
			want := benchObjects / 10
			if limit > 0 {
				want = limit
			}
			for b.Loop() {
				if p := snap.Page(req); len(p.Items) != want {
					b.Fatalf("page has %d items, want %d", len(p.Items), want)
				}
			}
		})
	}
}

// BenchmarkApplyClone is the per-event cost of Apply on a benchObjects pods
// store: replace one object, then Clone the object, count and index trees
// into a new published snapshot. history=none keeps no superseded
// snapshots; history=N runs at a steady history depth of N snapshots (one
// event per fake millisecond, History N ms, filled before timing), where
// each event also retires the oldest snapshot, as a store at the default
// 150s window does at N/150 events per second.
func BenchmarkApplyClone(b *testing.B) {
	entries := sharedEntries(b)
	// updates relabel objects spread over the whole key space.
	updates := make([]*Entry, 4096)
	for i := range updates {
		e := entries[(i*7919)%len(entries)]
		updates[i] = e.WithRV(e.RV)
		updates[i].attrs.labels = newAttrs(nil, nil, map[string]string{"idx": strconv.Itoa(i % 10)}).labels
	}
	for _, depth := range []int{0, 1000, 10_000} {
		name := "history=none"
		if depth > 0 {
			name = fmt.Sprintf("history=%d", depth)
		}
		b.Run(name, func(b *testing.B) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
			s, _ := benchStore(entries, StoreConfig{History: time.Duration(depth) * time.Millisecond, Clock: clk})
			rv := uint64(10 * benchObjects)
			i := 0
			apply := func() {
				rv++
				clk.SetTime(clk.Now().Add(time.Millisecond))
				u := updates[i%len(updates)]
				s.Apply(Change{Entry: u.WithRV(rv)}, rv)
				i++
			}
			for range depth + 1 {
				apply()
			}
			b.ReportAllocs()
			for b.Loop() {
				apply()
			}
			if v := s.current.Load(); len(v.history) < depth || len(v.history) > depth+2 {
				b.Fatalf("history depth %d, want %d", len(v.history), depth)
			}
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkStoreMemory builds a store of benchObjects objects from objects with their
// own bytes, as the feeder does, and reports the store's in-memory overhead
// per object beyond the objects' encoded bytes: the Entry, its strings,
// label and field maps (entry-bytes/obj) and the trees (tree-bytes/obj).
// The loop times a full Replace (a relist) of the built entries.
func BenchmarkStoreMemory(b *testing.B) {
	before := heapInUse()
	entries := benchEntries(b, benchObjects, true)
	var raw, slack int64
	for _, e := range entries {
		raw += int64(len(e.Raw))
		// The allocator rounds each Raw up to a size class; the extractor's
		// copy does the same.
		slack += int64(roundupsize(len(e.Raw)) - len(e.Raw))
	}
	withEntries := heapInUse()
	s, _ := benchStore(entries, StoreConfig{})
	withStore := heapInUse()
	n := float64(benchObjects)
	entryBytes := float64(int64(withEntries-before)-raw) / n
	treeBytes := float64(withStore-withEntries) / n
	b.Logf("%d objects, %.0f raw bytes each: overhead %.0f bytes/object (entry %.0f of which %.0f is Raw's size-class rounding, trees %.0f), %.1f%% of raw",
		benchObjects, float64(raw)/n, entryBytes+treeBytes, entryBytes, float64(slack)/n, treeBytes, 100*(entryBytes+treeBytes)*n/float64(raw))
	runtime.KeepAlive(s)

	b.ReportAllocs()
	for b.Loop() {
		s.Replace(entries, uint64(2*benchObjects))
	}
	// After the loop: b.Loop's timer reset drops metrics reported before it.
	b.ReportMetric(float64(raw)/n, "raw-bytes/obj")
	b.ReportMetric(entryBytes, "entry-bytes/obj")
	b.ReportMetric(float64(slack)/n, "raw-slack-bytes/obj")
	b.ReportMetric(treeBytes, "tree-bytes/obj")
	b.ReportMetric(entryBytes+treeBytes, "overhead-bytes/obj")
}

// roundupsize is the size the allocator gives a small []byte of n bytes:
// what cap(append([]byte(nil), make([]byte, n)...)) reports.
func roundupsize(n int) int {
	return cap(append([]byte(nil), make([]byte, n)...))
}

// countingSnapshot is a snapshot of entries whose key tree counts the key
// comparisons made on it, built as Store.Replace builds its tree.
func countingSnapshot(entries []*Entry) (*Snapshot, *int) {
	compares := new(int)
	objects := btree.NewG(btreeDegree, func(a, b *Entry) bool {
		*compares++
		return a.Key < b.Key
	})
	for _, e := range entries {
		objects.ReplaceOrInsert(e)
	}
	return &Snapshot{objects: objects, counts: btree.NewG(btreeDegree, lessCount)}, compares
}

// TestPageCostIndependentOfPosition checks that a page is O(log n +
// limit)": a page of 500 costs the same at the start of a 100k list and at
// 99% of it.
//
// Timing on a shared 2-core machine is too noisy to fail on at 20%, so the
// 20% check is deterministic: the work Page does, counted as key
// comparisons in the tree plus entries examined (Match calls), and its
// allocations must agree within 20% between the two positions. Comparisons
// catch a seek that is not logarithmic. A walk from the first key that
// skips to the start without comparing through the tree would escape them,
// so the timings (testing.Benchmark, best of 3, logged) must also agree
// within 3x: no noise explains 3x, and such a walk is about 200x slower at
// 99%.
func TestPageCostIndependentOfPosition(t *testing.T) {
	n := benchObjects
	if testing.Short() {
		n = 60_000 // 1% of it still fills a page of 500
	}
	entries := benchEntries(t, n, false)
	snap, compares := countingSnapshot(entries)
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	slices.Sort(keys)

	type cost struct {
		compares, examined int
		allocs             float64
		nsPerOp            int64
	}
	costs := make([]cost, len(pagePositions))
	for i, pos := range pagePositions {
		examined := 0
		req := PageRequest{After: afterKey(keys, pos.fraction), Limit: benchPageLimit, Match: func(*Entry) bool { examined++; return true }}
		*compares = 0
		p := snap.Page(req)
		if len(p.Items) != benchPageLimit || !p.More {
			t.Fatalf("%s: page has %d items, more %v", pos.name, len(p.Items), p.More)
		}
		if want := afterKey(keys, pos.fraction); want != "" && p.Items[0].Key <= want {
			t.Fatalf("%s: page starts at %q, not after %q", pos.name, p.Items[0].Key, want)
		}
		costs[i].compares, costs[i].examined = *compares, examined
		costs[i].allocs = testing.AllocsPerRun(20, func() { snap.Page(req) })
	}
	// Timings on the store's own tree, without the counting comparator.
	s, _ := benchStore(entries, StoreConfig{})
	plain, _, _ := s.Latest()
	for round := 0; round < 3; round++ {
		for i, pos := range pagePositions {
			r := testing.Benchmark(benchPage(plain, afterKey(keys, pos.fraction)))
			if ns := r.NsPerOp(); costs[i].nsPerOp == 0 || ns < costs[i].nsPerOp {
				costs[i].nsPerOp = ns
			}
		}
	}

	first, last := costs[0], costs[len(costs)-1]
	for i, pos := range pagePositions {
		c := costs[i]
		t.Logf("%d objects, %s: %d key comparisons, %d examined, %.0f allocs, %d ns/op (best of 3)", n, pos.name, c.compares, c.examined, c.allocs, c.nsPerOp)
	}
	ratio := func(a, b float64) float64 { return max(a, b) / max(min(a, b), 1) }
	if r := ratio(float64(first.compares+first.examined), float64(last.compares+last.examined)); r > 1.2 {
		t.Errorf("work (comparisons + examined) differs by %.2fx between positions, want ≤ 1.2x", r)
	}
	if first.examined != last.examined {
		t.Errorf("examined %d entries at the start, %d near the end; want equal", first.examined, last.examined)
	}
	// Building the start key from After is the one allocation a later page
	// may add.
	if d := last.allocs - first.allocs; d < 0 || d > 1 {
		t.Errorf("%.0f allocations at the start, %.0f near the end; want the same, or one more for the start key", first.allocs, last.allocs)
	}
	r := ratio(float64(first.nsPerOp), float64(last.nsPerOp))
	t.Logf("time ratio between positions: %.2fx", r)
	if r > 3 {
		t.Errorf("page time differs by %.2fx between positions (%d vs %d ns/op), want about 1x", r, first.nsPerOp, last.nsPerOp)
	}
}
