package main

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	shardparser "k8s.io/apiserver/pkg/sharding"
	"k8s.io/client-go/tools/cache"
)

// boundSyntax is a bound as the apiserver's parser takes it: 0x and 16
// lowercase hex digits, or 2^64.
var boundSyntax = regexp.MustCompile(`^0x([0-9a-f]{16}|10000000000000000)$`)

// tilingProblems lists how ranges fail to tile the hash space [0, 2^64)
// in order, each range's selector parsed by the apiserver's own parser
// with the bounds the range has; none when they tile it.
func tilingProblems(ranges []shardRange) []string {
	var problems []string
	if len(ranges) == 0 {
		return []string{"no ranges"}
	}
	if ranges[0].start.Sign() != 0 {
		problems = append(problems, fmt.Sprintf("the first range starts at %s, not 0", hexBound(ranges[0].start)))
	}
	if last := ranges[len(ranges)-1].end; last.Cmp(hashSpace) != 0 {
		problems = append(problems, fmt.Sprintf("the last range ends at %s, not 2^64", hexBound(last)))
	}
	for i, r := range ranges {
		if r.start.Cmp(r.end) >= 0 {
			problems = append(problems, fmt.Sprintf("range %d is empty: [%s, %s)", i, hexBound(r.start), hexBound(r.end)))
		}
		if i > 0 && ranges[i-1].end.Cmp(r.start) != 0 {
			problems = append(problems, fmt.Sprintf("range %d ends at %s, range %d starts at %s", i-1, hexBound(ranges[i-1].end), i, hexBound(r.start)))
		}
		sel, err := shardparser.Parse(r.selector())
		if err != nil {
			problems = append(problems, fmt.Sprintf("range %d: the apiserver does not parse %q: %v", i, r.selector(), err))
			continue
		}
		reqs := sel.Requirements()
		if len(reqs) != 1 || reqs[0].Key != "object.metadata.uid" || reqs[0].Start != hexBound(r.start) || reqs[0].End != hexBound(r.end) {
			problems = append(problems, fmt.Sprintf("range %d: %q parses as %+v", i, r.selector(), reqs))
		}
		for _, b := range []string{hexBound(r.start), hexBound(r.end)} {
			if !boundSyntax.MatchString(b) {
				problems = append(problems, fmt.Sprintf("range %d: bound %q is not 0x and 16 lowercase hex digits", i, b))
			}
		}
	}
	return problems
}

// probeHashes are hashes at and around every bound of ranges, the ends of
// the space and random ones.
func probeHashes(ranges []shardRange) []uint64 {
	hs := []uint64{0, 1, ^uint64(0), ^uint64(0) - 1}
	for _, r := range ranges {
		for _, b := range []*big.Int{r.start, r.end} {
			if b.Cmp(hashSpace) < 0 {
				h := b.Uint64()
				hs = append(hs, h, h-1, h+1)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		hs = append(hs, rng.Uint64())
	}
	return hs
}

// everyHashOnce returns the first probe hash of ranges that is not
// selected by exactly one range's selector, as the apiserver's selector
// compares (sharding.HexLess on "0x" and 16 hex digits), or not contained
// in exactly one range; ok when there is none.
func everyHashOnce(t *testing.T, ranges []shardRange) (h uint64, bySelector, byContains int, ok bool) {
	t.Helper()
	var reqs []sharding.ShardRangeRequirement
	for _, r := range ranges {
		sel, err := shardparser.Parse(r.selector())
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, sel.Requirements()...)
	}
	for _, h := range probeHashes(ranges) {
		hash := fmt.Sprintf("0x%016x", h)
		bySelector, byContains := 0, 0
		for _, req := range reqs {
			if !sharding.HexLess(hash, req.Start) && sharding.HexLess(hash, req.End) {
				bySelector++
			}
		}
		for _, r := range ranges {
			if r.contains(h) {
				byContains++
			}
		}
		if bySelector != 1 || byContains != 1 {
			return h, bySelector, byContains, false
		}
	}
	return 0, 0, 0, true
}

// TestShardRangesTile: the ranges of any count tile the hash space, so
// that every hash is selected by exactly one shard's selector.
func TestShardRangesTile(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 8, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ranges := shardRanges(n)
			if len(ranges) != n {
				t.Fatalf("%d ranges, want %d", len(ranges), n)
			}
			for _, p := range tilingProblems(ranges) {
				t.Error(p)
			}
			if h, sel, con, ok := everyHashOnce(t, ranges); !ok {
				t.Errorf("hash %#016x: selected by %d selectors, contained in %d ranges; want 1 and 1", h, sel, con)
			}
		})
	}
}

// TestShardRangesEight: the scenario's eight ranges, as selectors.
func TestShardRangesEight(t *testing.T) {
	want := []string{
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x2000000000000000')",
		"shardRange(object.metadata.uid, '0x2000000000000000', '0x4000000000000000')",
		"shardRange(object.metadata.uid, '0x4000000000000000', '0x6000000000000000')",
		"shardRange(object.metadata.uid, '0x6000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0xa000000000000000')",
		"shardRange(object.metadata.uid, '0xa000000000000000', '0xc000000000000000')",
		"shardRange(object.metadata.uid, '0xc000000000000000', '0xe000000000000000')",
		"shardRange(object.metadata.uid, '0xe000000000000000', '0x10000000000000000')",
	}
	for i, r := range shardRanges(shardCount) {
		if got := r.selector(); got != want[i] {
			t.Errorf("range %d: %s, want %s", i, got, want[i])
		}
	}
}

// TestTilingProblemsCatchMutants: ranges that leave a gap, overlap, stop
// short of 2^64 or write a bound otherwise are caught, by the checks and
// by the probes of TestShardRangesTile.
func TestTilingProblemsCatchMutants(t *testing.T) {
	n := big.NewInt
	sub := func(a, b *big.Int) *big.Int { return new(big.Int).Sub(a, b) }
	good := shardRanges(8)
	mutate := func(f func(rs []shardRange)) []shardRange {
		rs := make([]shardRange, len(good))
		for i, r := range good {
			rs[i] = shardRange{start: new(big.Int).Set(r.start), end: new(big.Int).Set(r.end)}
		}
		f(rs)
		return rs
	}
	for name, rs := range map[string][]shardRange{
		"gap between two ranges": mutate(func(rs []shardRange) { rs[3].end = sub(rs[3].end, n(1)) }),
		"overlap":                mutate(func(rs []shardRange) { rs[4].start = sub(rs[4].start, n(1)) }),
		"top end 0xffffffffffffffff": mutate(func(rs []shardRange) {
			rs[7].end = sub(hashSpace, n(1))
		}),
		"first start 1":   mutate(func(rs []shardRange) { rs[0].start = n(1) }),
		"a range missing": append(append([]shardRange{}, good[:2]...), good[3:]...),
	} {
		t.Run(name, func(t *testing.T) {
			if len(tilingProblems(rs)) == 0 {
				t.Error("tilingProblems found nothing")
			}
			if _, _, _, ok := everyHashOnce(t, rs); ok {
				t.Error("every probe hash is in exactly one range")
			}
		})
	}
}

// TestUIDHash: the hash is the apiserver's (sharding.HashField).
func TestUIDHash(t *testing.T) {
	for _, uid := range []types.UID{"", "0c3b6a0e-6f2b-4c0e-9d0a-2f6a7e1d9b11", "x"} {
		if got, want := fmt.Sprintf("%016x", uidHash(uid)), sharding.HashField(string(uid)); got != want {
			t.Errorf("uidHash(%q) = %s, want %s", uid, got, want)
		}
	}
}

// uidIn returns a uid whose hash r contains, and its pod.
func uidIn(t *testing.T, r shardRange, seed int) types.UID {
	t.Helper()
	for i := range 1 << 16 {
		uid := types.UID(fmt.Sprintf("uid-%d-%d", seed, i))
		if r.contains(uidHash(uid)) {
			return uid
		}
	}
	t.Fatal("no uid found in range")
	return ""
}

func TestShardStoresDiff(t *testing.T) {
	ranges := shardRanges(4)
	pod := func(name, rv string, shard int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, UID: uidIn(t, ranges[shard], len(name)+shard)}}
	}
	a, b, c := pod("a", "1", 0), pod("bb", "2", 2), pod("ccc", "3", 3)
	list := func(pods ...*corev1.Pod) listView {
		v := listView{rv: "100"}
		for _, p := range pods {
			v.items = append(v.items, runtime.Object(p))
		}
		return v
	}
	stores := func(shards ...[]*corev1.Pod) []cache.Store {
		out := make([]cache.Store, len(shards))
		for i, ps := range shards {
			out[i] = cache.NewStore(cache.MetaNamespaceKeyFunc)
			for _, p := range ps {
				if err := out[i].Add(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		return out
	}
	older := a.DeepCopy()
	older.ResourceVersion = "0"
	for _, tc := range []struct {
		name     string
		stores   []cache.Store
		want     listView
		wantDiff bool
	}{
		{name: "each pod in its shard", stores: stores([]*corev1.Pod{a}, nil, []*corev1.Pod{b}, []*corev1.Pod{c}), want: list(a, b, c)},
		{name: "empty", stores: stores(nil, nil, nil, nil), want: list()},
		{name: "pod in two shards", stores: stores([]*corev1.Pod{a}, []*corev1.Pod{a}, []*corev1.Pod{b}, []*corev1.Pod{c}), want: list(a, b, c), wantDiff: true},
		{name: "pod in the wrong shard", stores: stores([]*corev1.Pod{a, b}, nil, nil, []*corev1.Pod{c}), want: list(a, b, c), wantDiff: true},
		{name: "pod missing", stores: stores([]*corev1.Pod{a}, nil, nil, []*corev1.Pod{c}), want: list(a, b, c), wantDiff: true},
		{name: "pod not listed", stores: stores([]*corev1.Pod{a}, nil, []*corev1.Pod{b}, []*corev1.Pod{c}), want: list(a, b), wantDiff: true},
		{name: "older resourceVersion", stores: stores([]*corev1.Pod{older}, nil, []*corev1.Pod{b}, []*corev1.Pod{c}), want: list(a, b, c), wantDiff: true},
		{name: "one unsharded store", stores: stores([]*corev1.Pod{a, b, c}), want: list(a, b, c)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := ranges
			if len(tc.stores) == 1 {
				rs = shardRanges(1)
			}
			if err := shardStoresDiff(tc.stores, rs, tc.want); (err != nil) != tc.wantDiff {
				t.Errorf("shardStoresDiff() = %v, want a difference: %v", err, tc.wantDiff)
			}
		})
	}
}

func TestPodReads(t *testing.T) {
	ev := func(id, verb, resource, ua, uri string) auditv1.Event {
		return auditv1.Event{AuditID: types.UID(id), Verb: verb, UserAgent: ua, RequestURI: uri,
			ObjectRef: &auditv1.ObjectReference{Resource: resource}}
	}
	evs := []auditv1.Event{
		// listproxy's store watch, started and ended: one request.
		ev("1", "watch", "pods", "listproxy", "/api/v1/pods?watch=true"),
		ev("1", "watch", "pods", "listproxy", "/api/v1/pods?watch=true"),
		// Its consistency check, with client-go's agent.
		ev("2", "list", "pods", "listproxy/v0.0.0 (linux/amd64) kubernetes/$Format", "/api/v1/pods?limit=500"),
		// Not reads of pods.
		ev("3", "patch", "pods", "listproxy-bench/1.0 (linux/amd64)", "/api/v1/namespaces/a/pods/b"),
		ev("4", "list", "configmaps", "bench/v0.0.0", "/api/v1/configmaps"),
		// A client's watch-list passed through, then a sharded one passed
		// through with listproxy's agent.
		ev("5", "watch", "pods", "bench/v0.0.0", "/api/v1/pods?watch=true&sendInitialEvents=true"),
		ev("6", "watch", "pods", "listproxy", "/api/v1/pods?shardSelector=shardRange%28object.metadata.uid%2C%27x%27%29&watch=true"),
		ev("6", "watch", "pods", "listproxy", "/api/v1/pods?shardSelector=shardRange%28object.metadata.uid%2C%27x%27%29&watch=true"),
	}
	evs = append(evs, auditv1.Event{AuditID: "7", Verb: "list"}) // no object
	own, other, first := podReads(evs)
	if own != 2 || other != 2 {
		t.Errorf("podReads() = %d own, %d other; want 2, 2", own, other)
	}
	if want := "watch /api/v1/pods?watch=true&sendInitialEvents=true (bench/v0.0.0)"; first != want {
		t.Errorf("first = %q, want %q", first, want)
	}
}

// TestAuditTail: the tail reads what the log gained after it was opened,
// across a rotation (the old file renamed, a new one created), and leaves
// out a last line still being written.
func TestAuditTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line := func(id string) string { return `{"auditID":"` + id + `","verb":"list"}` + "\n" }
	write := func(p, s string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write(path, line("before"))
	a, err := openAuditTail(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	write(path, line("a"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	write(path, line("b")+`{"auditID":"partial`)
	evs, err := a.events()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ev := range evs {
		ids = append(ids, string(ev.AuditID))
	}
	if got := strings.Join(ids, ","); got != "a,b" {
		t.Errorf("events %s, want a,b", got)
	}
}
