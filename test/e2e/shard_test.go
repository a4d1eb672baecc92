package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	shardparser "k8s.io/apiserver/pkg/sharding"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

// shardOracle answers what the apiserver with ShardedListAndWatch on
// (1.37+) answers a sharded request. Where the apiserver has the gate on,
// it is the apiserver itself; on a release without it (1.31), which
// ignores shardSelector, it is the apiserver's unsharded answer filtered by
// the selector's own Matches on each object (the 1.37 semantics).
type shardOracle struct {
	gated bool
	api   rawClient
}

// inShard reports whether the object raw (an item or a watch event's
// object in format f) is in sel's shard, as the apiserver's selector
// decides on it.
func inShard(t *testing.T, sel sharding.Selector, f wire.Format, raw []byte) bool {
	t.Helper()
	meta, err := wire.ExtractMeta(f, raw)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := wire.ObjectUID(f, raw)
	if err != nil || uid == "" {
		t.Fatalf("uid of %s/%s: %q, %v", meta.Namespace, meta.Name, uid, err)
	}
	ok, err := sel.Matches(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: meta.Namespace, Name: meta.Name, UID: types.UID(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestShardSelectorDifferential: LISTs, watch-lists and watches with a
// shard selector (KEP-5866) are served from snapshots exactly as the 1.37
// apiserver with its ShardedListAndWatch gate on answers them: for several
// random selectors over 300 pods in three namespaces, a walk in pages of
// 50 equals the apiserver's walk at the same resourceVersion page by page,
// byte for byte (items, resourceVersion, continue, no remainingItemCount,
// metadata.shardInfo in JSON and protobuf, none in metadata lists and
// Tables); a watch-list's initial events and the events of a watch-list
// and of a watch from a resourceVersion, after writes, equal the
// apiserver's; the four quarters of the hash space hold the whole
// collection, each object once. On a release without the gate (1.31) the
// apiserver ignores the parameter, and the same answers are computed from
// its unsharded ones; there page boundaries are not compared, only what a
// walk returns.
func TestShardSelectorDifferential(t *testing.T) {
	start := time.Now()
	cp, v, gated := startShardControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	namespaces := []string{"shard-a", "shard-b", "shard-c"}
	for _, ns := range namespaces {
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
	}
	cs := cp.Clientset(framework.UserAdmin)
	const pods = 300
	if err := framework.Parallel(ctx, 8, pods, func(ctx context.Context, i int) error {
		ns := namespaces[i%len(namespaces)]
		_, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("pod-%03d", i), i), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
	lpc := newRawClient(t, lp.Config())
	oracle := shardOracle{gated: gated, api: newRawClient(t, cp.AdminConfig)}
	const path = "/api/v1/pods"
	warmUp(ctx, t, lpc, []target{{path: path}})
	warmUpTable(ctx, t, lpc, path)
	t.Logf("control plane, %d pods and listproxy ready in %v", pods, time.Since(start).Round(time.Millisecond))

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5866))
	t.Logf("shard selectors drawn with seed %d (apiserver %s, ShardedListAndWatch %v)", seed, v, gated)
	selectors := []string{
		randomRanges(rng, "object.metadata.uid", 1),
		randomRanges(rng, "object.metadata.uid", 1),
		randomRanges(rng, "object.metadata.uid", 3),
		namespaceRanges(rng, namespaces),
	}

	// LIST walks in pages of 50, per format.
	for _, sel := range selectors {
		for _, f := range []wire.Format{wire.JSON, wire.Protobuf, wire.MetaJSON} {
			checkShardWalk(ctx, t, lpc, oracle, path, sel, f)
		}
		checkShardTable(ctx, t, lpc, oracle, path, sel)
	}

	// The four quarters of the hash space are the whole collection.
	quarters := []string{
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')",
		"shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')",
		"shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')",
	}
	listRV := checkQuarters(ctx, t, lpc, oracle, path, quarters)

	// Watches: a watch-list and a watch from the LIST's resourceVersion per
	// selector (JSON; protobuf for the first), on both servers, then writes.
	type watchPair struct {
		name    string
		sel     sharding.Selector
		format  wire.Format
		lp, api *frameReader
		apiAll  bool // the apiserver's stream is unsharded: filter it
	}
	var pairs []watchPair
	const watchSeconds = "10"
	for i, s := range []string{selectors[0], selectors[3], quarters[1]} {
		sel, err := shardparser.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		formats := []wire.Format{wire.JSON}
		if i == 0 {
			formats = append(formats, wire.Protobuf)
		}
		for _, f := range formats {
			wl := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
				"allowWatchBookmarks": {"true"}, "timeoutSeconds": {watchSeconds}, "shardSelector": {s}}
			name := fmt.Sprintf("watch-list %v %s", f, s)
			lpr, hdr := openWatch(ctx, t, lpc, path, wl, f)
			if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
				t.Fatalf("%s: served from %q", name, got)
			}
			lpInit, lpRV := initialFramesRV(t, lpr)
			var apiInit []frame
			var apir *frameReader
			if gated {
				apir, _ = openWatch(ctx, t, oracle.api, path, wl, f)
				apiInit = initialFrames(t, apir)
			} else {
				// No watch-list on 1.31: the LIST at the end bookmark's
				// resourceVersion and the watch from it, unsharded.
				typ := wire.ObjectType{GVK: corev1.SchemeGroupVersion.WithKind("Pod")}
				for _, fr := range listAsWatchFrames(ctx, t, oracle.api, path, "", lpRV, f, typ) {
					if inShard(t, sel, f, frameObject(t, f, fr)) {
						apiInit = append(apiInit, fr)
					}
				}
				apir, _ = openWatch(ctx, t, oracle.api, path, url.Values{"watch": {"1"}, "resourceVersion": {lpRV}, "timeoutSeconds": {watchSeconds}}, f)
			}
			if len(apiInit) == 0 || len(apiInit) == pods {
				t.Fatalf("%s: %d initial events of %d pods: not a test", name, len(apiInit), pods)
			}
			if d := diffShardFrames(lpInit, apiInit); d != "" {
				t.Errorf("%s: initial events: %s", name, d)
			}
			pairs = append(pairs, watchPair{name: name, sel: sel, format: f, lp: lpr, api: apir, apiAll: !gated})

			name = fmt.Sprintf("watch from %s %v %s", listRV, f, s)
			from := url.Values{"watch": {"1"}, "resourceVersion": {listRV}, "timeoutSeconds": {watchSeconds}, "shardSelector": {s}}
			lpr, _ = openWatch(ctx, t, lpc, path, from, f)
			if !gated {
				from.Del("shardSelector")
			}
			apir, _ = openWatch(ctx, t, oracle.api, path, from, f)
			pairs = append(pairs, watchPair{name: name, sel: sel, format: f, lp: lpr, api: apir, apiAll: !gated})
		}
	}

	// Writes to the apiserver: 60 pods relabelled, 20 deleted, 20 created,
	// across the namespaces.
	order := rng.Perm(pods)
	if err := framework.Parallel(ctx, 8, 100, func(ctx context.Context, i int) error {
		n := order[i]
		ns, name := namespaces[n%len(namespaces)], fmt.Sprintf("pod-%03d", n)
		switch {
		case i < 60:
			_, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
			return err
		case i < 80:
			return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("new-%03d", i), i), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d watches open, writes done at %v", 2*len(pairs), time.Since(start).Round(time.Millisecond))

	// Each watch ends at its timeout; every event after the initial ones
	// must be the apiserver's (bookmarks excepted: their timing is each
	// server's own).
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Go(func() {
			lpEv, lpErr := eventsToEnd(p.lp)
			apiEv, apiErr := eventsToEnd(p.api)
			if lpErr != nil || apiErr != nil {
				t.Errorf("%s: reading events: listproxy %v, apiserver %v", p.name, lpErr, apiErr)
				return
			}
			if p.apiAll {
				var in []frame
				for _, fr := range apiEv {
					if inShard(t, p.sel, p.format, frameObject(t, p.format, fr)) {
						in = append(in, fr)
					}
				}
				apiEv = in
			}
			if len(apiEv) == 0 {
				t.Errorf("%s: no event after the writes: not a test", p.name)
			}
			if d := diffShardFrames(lpEv, apiEv); d != "" {
				t.Errorf("%s: events: %s", p.name, d)
			}
		})
	}
	wg.Wait()
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_passed_through_total"); got != 0 {
		t.Errorf("listproxy_watch_passed_through_total = %v, want 0", got)
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// TestShardSelectorInformers: client-go pod informers at their defaults
// (watch-lists) through listproxy, four with shard selectors on
// metadata.uid that split the hash space at random uneven points (one
// shard two ranges joined by ||) and one without, partition a namespace
// exactly across 100 creates, 100 label updates and 50 deletes of its
// 200 pods: the union of the shards' stores equals the unsharded store,
// which equals the apiserver's LIST (namespace/name → resourceVersion);
// no pod is in two shards; every pod in a shard's store, and every add,
// update and delete its handlers receive, is in the shard by the
// apiserver's own rule (sharding.Selector.Matches). listproxy serves the
// sharded watch-lists from snapshots and passes none through. On a
// release without ShardedListAndWatch (1.31), which ignores
// shardSelector, the answers are the same.
func TestShardSelectorInformers(t *testing.T) {
	start := time.Now()
	cp, v, gated := startShardControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, seeded = "shard-informers", 200
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	pods := make([]*corev1.Pod, seeded)
	for i := range pods {
		pods[i] = newPod(ns, fmt.Sprintf("pod-%03d", i), i)
	}
	if err := seed.Pods(ctx, cs, pods, seed.Options{Workers: 8}); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
	// Typed informers read protobuf: their store answers from the start.
	warmPods(ctx, t, newRawClient(t, lp.Config()), wire.Protobuf)

	rngSeed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(rngSeed, 5866))
	t.Logf("shards drawn with seed %d (apiserver %s, ShardedListAndWatch %v)", rngSeed, v, gated)
	var shards []*shardInformer
	for i, s := range randomPartition(rng) {
		sel, err := shardparser.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		t.Logf("shard %d: %s", i, s)
		shards = append(shards, &shardInformer{selector: s, sel: sel, events: map[string]int{}})
	}

	informerCtx, stopInformers := context.WithCancel(ctx)
	var factories []informers.SharedInformerFactory
	defer func() {
		stopInformers()
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	newInformer := func(tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
		f := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(lp.Config()), 0,
			informers.WithNamespace(ns), informers.WithTweakListOptions(tweak))
		factories = append(factories, f)
		return f.Core().V1().Pods().Informer()
	}
	for _, s := range shards {
		s.inf = newInformer(func(o *metav1.ListOptions) { o.ShardSelector = s.selector })
		if _, err := s.inf.AddEventHandler(s.handler()); err != nil {
			t.Fatal(err)
		}
	}
	whole := newInformer(func(*metav1.ListOptions) {})
	for _, f := range factories {
		f.Start(informerCtx.Done())
	}
	for i, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("informer %d of %v through listproxy never synced", i, typ)
			}
		}
	}
	t.Logf("control plane, %d pods, listproxy and %d informers ready in %v", seeded, len(factories), time.Since(start).Round(time.Millisecond))

	// Writes: 100 pods created, 100 of the seeded relabelled, 50 others
	// deleted, in random order.
	const created, updated, deleted = 100, 100, 50
	order := rng.Perm(seeded)
	writes := rng.Perm(created + updated + deleted)
	if err := framework.Parallel(ctx, 8, len(writes), func(ctx context.Context, i int) error {
		switch w := writes[i]; {
		case w < created:
			_, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("new-%03d", w), w), metav1.CreateOptions{})
			return err
		case w < created+updated:
			_, err := cs.CoreV1().Pods(ns).Patch(ctx, pods[order[w-created]].Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
			return err
		default:
			return cs.CoreV1().Pods(ns).Delete(ctx, pods[order[w-created]].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("writes done at %v", time.Since(start).Round(time.Millisecond))

	// The stores converge on the apiserver's LIST, partitioned, and the
	// handlers are notified of every write; a pod outside its shard, in a
	// store or a notification, fails at once.
	var last, outside string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if outside = outsideShards(shards); outside != "" {
			return false, errors.New("a pod outside its shard")
		}
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if last == "" {
				last = "LIST from the apiserver: " + err.Error()
			}
			return false, nil
		}
		want := make(map[string]string, len(list.Items))
		for _, p := range list.Items {
			want[p.Namespace+"/"+p.Name] = p.ResourceVersion
		}
		last = partitionDiff(want, whole.GetStore(), shards)
		if last == "" {
			last = eventsDiff(shards, seeded+created, updated, deleted)
		}
		return last == "", nil
	})
	if outside != "" {
		t.Fatalf("pods outside their shard: %s", outside)
	}
	if err != nil {
		t.Fatalf("the informers never partitioned the apiserver's %d pods exactly: %s", seeded+created-deleted, last)
	}
	t.Logf("converged at %v", time.Since(start).Round(time.Millisecond))
	for i, s := range shards {
		n := len(s.inf.GetStore().ListKeys())
		if n == 0 {
			t.Errorf("shard %d %s holds no pod: not a test", i, s.selector)
		}
		s.mu.Lock()
		t.Logf("shard %d: %d pods, notified of %v", i, n, s.events)
		s.mu.Unlock()
	}

	// listproxy served the shards' watch-lists; they count once they end.
	stopInformers()
	for _, f := range factories {
		f.Shutdown()
	}
	if outside := outsideShards(shards); outside != "" {
		t.Errorf("pods outside their shard: %s", outside)
	}
	const sharded = "listproxy_http_sharded_requests_total"
	var m framework.Metrics
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m = framework.Scrape(t, nil, lp.URL+"/metrics")
		return m.Sum(sharded, `verb="watch"`, `source="snapshot"`) >= float64(len(shards)), nil
	})
	bySource := m.ByLabel(sharded, "source")
	t.Logf("%s by source: %v; from snapshots by verb: %v", sharded, bySource, m.ByLabel(sharded, "verb", `source="snapshot"`))
	if err != nil || len(bySource) != 1 || bySource[httpapi.SourceSnapshot] == 0 {
		t.Errorf("%s by source: %v; want only %q, with the %d shards' watch-lists", sharded, bySource, httpapi.SourceSnapshot, len(shards))
	}
	if got := m.Sum("listproxy_watch_passed_through_total"); got != 0 {
		t.Errorf("listproxy_watch_passed_through_total = %v, want 0", got)
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// startShardControlPlane starts a control plane of the selected release,
// with the ShardedListAndWatch gate on where the release has it (1.37+),
// and returns it, the release and whether the gate is on.
func startShardControlPlane(t *testing.T) (cp *framework.ControlPlane, release string, gated bool) {
	t.Helper()
	v, minor := kubeRelease(t)
	var cfg framework.ControlPlaneConfig
	gated = minor >= 37
	if gated {
		cfg.ExtraAPIServerArgs = []string{"--feature-gates=ShardedListAndWatch=true"}
	}
	return framework.Start(t, cfg), v, gated
}

// randomRanges is a shard selector of n random ranges of the hash space on
// key, spelled as a client might (no spaces, parentheses).
func randomRanges(rng *rand.Rand, key string, n int) string {
	var parts []string
	for range n {
		a, b := rng.Uint64(), rng.Uint64()
		if a > b {
			a, b = b, a
		}
		// At least an eighth of the space, so that the shard holds pods.
		if b-a < 1<<61 {
			b = a + 1<<61
			if b < a {
				a, b = 0, 1<<61
			}
		}
		parts = append(parts, fmt.Sprintf("shardRange(%s,'0x%016x','0x%016x')", key, a, b))
	}
	return "(" + strings.Join(parts, "||") + ")"
}

// namespaceRanges is a shard selector on metadata.namespace of one or two
// of namespaces, each a range starting at its hash: three namespaces lie
// anywhere in the hash space, and a random range holds all or none of
// them as often as not.
func namespaceRanges(rng *rand.Rand, namespaces []string) string {
	var parts []string
	for _, i := range rng.Perm(len(namespaces))[:1+rng.IntN(2)] {
		h, err := strconv.ParseUint(sharding.HashField(namespaces[i]), 16, 64)
		if err != nil {
			panic(err)
		}
		end := fmt.Sprintf("0x%016x", h+1)
		if h == math.MaxUint64 {
			end = "0x10000000000000000"
		}
		parts = append(parts, fmt.Sprintf("shardRange(object.metadata.namespace, '0x%016x', '%s')", h, end))
	}
	return strings.Join(parts, " || ")
}

// warmUpTable lists path as a Table through listproxy until its Table
// store answers.
func warmUpTable(ctx context.Context, t *testing.T, lpc rawClient, path string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, hdr, _, err := lpc.get(ctx, path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}}, acceptTableV1)
		return err == nil && hdr.Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot, nil
	})
	if err != nil {
		t.Fatalf("%s as a Table never served from a snapshot: %v", path, err)
	}
}

// shardPage is one decoded page of a sharded LIST.
type shardPage struct {
	page
	servedFrom string
}

// getShardPage sends a LIST and decodes it as a sharded list.
func getShardPage(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values, f wire.Format) shardPage {
	t.Helper()
	code, hdr, body, err := c.get(ctx, path, q, formatAccept[f])
	if err != nil || code != http.StatusOK {
		t.Fatalf("LIST %s?%s (%v): HTTP %d %v: %.300s", path, q.Encode(), f, code, err, body)
	}
	var p shardPage
	p.servedFrom = hdr.Get(httpapi.HeaderServedFrom)
	p.env, err = wire.DecodeShardedList(f, bytes.NewReader(body), func(raw []byte) error {
		p.items = append(p.items, bytes.Clone(raw))
		return nil
	})
	if err != nil {
		t.Fatalf("decode LIST %s?%s (%v): %v", path, q.Encode(), f, err)
	}
	return p
}

// checkShardWalk walks path with shard selector sel in pages of 50 through
// listproxy, from a consistent first page, and compares it with the
// oracle's walk at the same resourceVersion.
func checkShardWalk(ctx context.Context, t *testing.T, lpc rawClient, oracle shardOracle, path, s string, f wire.Format) {
	t.Helper()
	sel, err := shardparser.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := ""
	if f == wire.JSON || f == wire.Protobuf {
		wantInfo = sel.String()
	}
	name := fmt.Sprintf("%v walk of %s", f, s)
	var lpPages []shardPage
	q := url.Values{"shardSelector": {s}, "limit": {"50"}}
	for {
		p := getShardPage(ctx, t, lpc, path, q, f)
		if p.servedFrom != httpapi.SourceSnapshot {
			t.Fatalf("%s: page %d served from %q", name, len(lpPages)+1, p.servedFrom)
		}
		lpPages = append(lpPages, p)
		if p.env.ListMeta.Continue == "" {
			break
		}
		q = url.Values{"shardSelector": {s}, "limit": {"50"}, "continue": {p.env.ListMeta.Continue}}
	}
	rv := lpPages[0].env.ListMeta.ResourceVersion
	var lpItems [][]byte
	for i, p := range lpPages {
		if p.env.ListMeta.ShardSelector != wantInfo {
			t.Errorf("%s: page %d shardInfo %q, want %q", name, i+1, p.env.ListMeta.ShardSelector, wantInfo)
		}
		if p.env.ListMeta.RemainingItemCount != nil {
			t.Errorf("%s: page %d remainingItemCount %d, want none", name, i+1, *p.env.ListMeta.RemainingItemCount)
		}
		if p.env.ListMeta.ResourceVersion != rv || len(p.items) > 50 {
			t.Errorf("%s: page %d at %s with %d items, want at %s, at most 50", name, i+1, p.env.ListMeta.ResourceVersion, len(p.items), rv)
		}
		lpItems = append(lpItems, p.items...)
	}

	if !oracle.gated {
		all := getShardPage(ctx, t, oracle.api, path, url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}, f)
		var want [][]byte
		for _, it := range all.items {
			if inShard(t, sel, f, it) {
				want = append(want, it)
			}
		}
		if len(want) == 0 || len(want) == len(all.items) {
			t.Errorf("%s: %d of %d pods: not a test", name, len(want), len(all.items))
		}
		if d := diffShardItems(lpItems, want); d != "" {
			t.Errorf("%s at %s: %s", name, rv, d)
		}
		return
	}
	q = url.Values{"shardSelector": {s}, "limit": {"50"}, "resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}
	var apiItems [][]byte
	for i := 0; ; i++ {
		api := getShardPage(ctx, t, oracle.api, path, q, f)
		apiItems = append(apiItems, api.items...)
		if i < len(lpPages) {
			if d := comparePages(lpPages[i].page, api.page, false); d != "" {
				t.Errorf("%s at %s: page %d: %s", name, rv, i+1, d)
			}
			if api.env.ListMeta.ShardSelector != lpPages[i].env.ListMeta.ShardSelector {
				t.Errorf("%s at %s: page %d shardInfo %q, apiserver %q", name, rv, i+1, lpPages[i].env.ListMeta.ShardSelector, api.env.ListMeta.ShardSelector)
			}
		}
		if api.env.ListMeta.Continue == "" {
			if i+1 != len(lpPages) {
				t.Errorf("%s at %s: %d pages, apiserver %d", name, rv, len(lpPages), i+1)
			}
			break
		}
		q = url.Values{"shardSelector": {s}, "limit": {"50"}, "continue": {api.env.ListMeta.Continue}}
	}
	if len(apiItems) == 0 {
		t.Errorf("%s: the apiserver's shard is empty: not a test", name)
	}
}

// checkShardTable compares listproxy's Table of the shard (kubectl get
// --raw with a shardSelector) with the oracle's at the same
// resourceVersion: the same rows, by object, and no shardInfo.
func checkShardTable(ctx context.Context, t *testing.T, lpc rawClient, oracle shardOracle, path, s string) {
	t.Helper()
	sel, err := shardparser.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	name := "Table of " + s
	type tableList struct {
		Metadata map[string]any `json:"metadata"`
		Rows     []struct {
			Object metav1.PartialObjectMetadata `json:"object"`
		} `json:"rows"`
	}
	get := func(c rawClient, q url.Values) (tableList, string) {
		code, hdr, body, err := c.get(ctx, path, q, acceptTableV1)
		var tl tableList
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &tl) != nil {
			t.Fatalf("%s: HTTP %d %v: %.300s", name, code, err, body)
		}
		return tl, hdr.Get(httpapi.HeaderServedFrom)
	}
	rows := func(tl tableList, filter bool) []string {
		var keys []string
		for _, r := range tl.Rows {
			if filter {
				if ok, err := sel.Matches(&r.Object); err != nil || !ok {
					continue
				}
			}
			keys = append(keys, r.Object.Namespace+"/"+r.Object.Name+"/"+string(r.Object.UID))
		}
		return keys
	}
	lp, from := get(lpc, url.Values{"shardSelector": {s}})
	if from != httpapi.SourceSnapshot {
		t.Fatalf("%s: served from %q", name, from)
	}
	rv, _ := lp.Metadata["resourceVersion"].(string)
	q := url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}
	if oracle.gated {
		q.Set("shardSelector", s)
	}
	api, _ := get(oracle.api, q)
	for who, tl := range map[string]tableList{"listproxy": lp, "apiserver": api} {
		if _, ok := tl.Metadata["shardInfo"]; ok {
			t.Errorf("%s: %s's Table has shardInfo %v, want none", name, who, tl.Metadata["shardInfo"])
		}
	}
	if got, want := rows(lp, false), rows(api, !oracle.gated); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("%s at %s: rows %d, apiserver %d (first differences: %v)", name, rv, len(got), len(want), firstKeyDiffs(got, want))
	}
}

// checkQuarters lists the whole collection through listproxy, then each
// quarter of the hash space at its resourceVersion: together, they hold
// each object of it once, as stored; each quarter equals the oracle's. It
// returns the resourceVersion.
func checkQuarters(ctx context.Context, t *testing.T, lpc rawClient, oracle shardOracle, path string, quarters []string) string {
	t.Helper()
	whole := getShardPage(ctx, t, lpc, path, url.Values{}, wire.JSON)
	rv := whole.env.ListMeta.ResourceVersion
	byKey := map[string][]byte{}
	for _, it := range whole.items {
		m, err := wire.ExtractMeta(wire.JSON, it)
		if err != nil {
			t.Fatal(err)
		}
		byKey[m.Namespace+"/"+m.Name] = it
	}
	seen := map[string]string{}
	for _, s := range quarters {
		q := url.Values{"shardSelector": {s}, "resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}
		p := getShardPage(ctx, t, lpc, path, q, wire.JSON)
		if len(p.items) == 0 {
			t.Errorf("quarter %s is empty: not a test", s)
		}
		for _, it := range p.items {
			m, err := wire.ExtractMeta(wire.JSON, it)
			if err != nil {
				t.Fatal(err)
			}
			key := m.Namespace + "/" + m.Name
			if other, ok := seen[key]; ok {
				t.Errorf("%s in quarter %s and %s", key, other, s)
			}
			seen[key] = s
			if !bytes.Equal(it, byKey[key]) {
				t.Errorf("%s in quarter %s: %.200s, in the whole list %.200s", key, s, it, byKey[key])
			}
		}
		if oracle.gated {
			api := getShardPage(ctx, t, oracle.api, path, q, wire.JSON)
			if d := comparePages(p.page, api.page, false); d != "" {
				t.Errorf("quarter %s at %s: %s", s, rv, d)
			}
		}
	}
	if len(seen) != len(byKey) {
		t.Errorf("the quarters hold %d objects, the whole list %d", len(seen), len(byKey))
	}
	return rv
}

// frameObject is the object of a watch frame in format f.
func frameObject(t *testing.T, f wire.Format, fr frame) []byte {
	t.Helper()
	ev, err := wire.NewWatchDecoder(f, io.NopCloser(bytes.NewReader(fr.raw)), wire.WatchOptions{}).Next()
	if err != nil {
		t.Fatal(err)
	}
	return ev.Object
}

// eventsToEnd reads r's frames until its stream ends and returns those
// that are not bookmarks.
func eventsToEnd(r *frameReader) ([]frame, error) {
	var out []frame
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if fr.typ != wire.Bookmark {
			out = append(out, fr)
		}
	}
}

// diffShardFrames describes the first difference between two frame sequences.
func diffShardFrames(got, want []frame) string {
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i].raw, want[i].raw) {
			return fmt.Sprintf("frame %d of %d: listproxy %s %.300q, apiserver %s %.300q", i, len(want), got[i].typ, got[i].raw, want[i].typ, want[i].raw)
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d frames, apiserver %d", len(got), len(want))
	}
	return ""
}

// diffShardItems describes the first difference between two item sequences.
func diffShardItems(got, want [][]byte) string {
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i], want[i]) {
			return fmt.Sprintf("item %d of %d: listproxy %.200s, apiserver %.200s", i, len(want), got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d items, apiserver %d", len(got), len(want))
	}
	return ""
}

// firstKeyDiffs are the first few keys where got and want differ.
func firstKeyDiffs(got, want []string) []string {
	var out []string
	for i := range max(len(got), len(want)) {
		g, w := "", ""
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			out = append(out, fmt.Sprintf("%d: %q vs %q", i, g, w))
			if len(out) == 3 {
				break
			}
		}
	}
	return out
}

// randomPartition splits the hash space of object.metadata.uid at four
// random points into five uneven ranges, each at least a sixteenth of it
// (so that each holds pods), and deals them to four shard selectors: one
// takes two ranges that do not touch, joined by " || ". Ranges are
// half-open, their bounds 16 hex digits, the last end 0x10000000000000000.
func randomPartition(rng *rand.Rand) []string {
	const minWidth = 1 << 60
	var cuts []uint64
	for {
		cuts = []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()}
		slices.Sort(cuts)
		ok := cuts[0] >= minWidth && cuts[3] <= math.MaxUint64-minWidth+1
		for i := 1; i < len(cuts); i++ {
			ok = ok && cuts[i]-cuts[i-1] >= minWidth
		}
		if ok {
			break
		}
	}
	bounds := []string{"0x0000000000000000"}
	for _, c := range cuts {
		bounds = append(bounds, fmt.Sprintf("0x%016x", c))
	}
	bounds = append(bounds, "0x10000000000000000")
	ranges := make([]string, len(bounds)-1)
	for i := range ranges {
		ranges[i] = fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", bounds[i], bounds[i+1])
	}
	apart := [][2]int{{0, 2}, {0, 3}, {0, 4}, {1, 3}, {1, 4}, {2, 4}}
	pair := apart[rng.IntN(len(apart))]
	if rng.IntN(2) == 0 {
		pair[0], pair[1] = pair[1], pair[0]
	}
	shards := []string{ranges[pair[0]] + " || " + ranges[pair[1]]}
	for i, r := range ranges {
		if i != pair[0] && i != pair[1] {
			shards = append(shards, r)
		}
	}
	rng.Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })
	return shards
}

// shardInformer is a pod informer with a shard selector, and what its
// handlers were notified of.
type shardInformer struct {
	selector string
	sel      sharding.Selector
	inf      cache.SharedIndexInformer

	mu      sync.Mutex
	events  map[string]int // notifications by kind: add, update, delete
	outside []string       // notifications of pods outside the shard
}

func (s *shardInformer) handler() cache.ResourceEventHandler {
	record := func(kind string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.events[kind]++
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			s.outside = append(s.outside, fmt.Sprintf("%s of a %T", kind, obj))
			return
		}
		if in, err := s.sel.Matches(pod); err != nil || !in {
			s.outside = append(s.outside, kind+" "+describeShardMiss(pod, err))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}
}

// partitionDiff describes how the informers' stores fail to partition
// want, the apiserver's namespace/name → resourceVersion: the unsharded
// store and the union of the shards' must equal it, and no pod may be in
// two shards. "" when they partition it.
func partitionDiff(want map[string]string, whole cache.Store, shards []*shardInformer) string {
	var diffs, twice []string
	if d := diffKeys(want, storeKeysAndRVs(whole)); d != "" {
		diffs = append(diffs, "unsharded informer: "+d)
	}
	union := map[string]string{}
	shardOf := map[string]int{}
	for i, s := range shards {
		for _, obj := range s.inf.GetStore().List() {
			pod := obj.(*corev1.Pod)
			key := pod.Namespace + "/" + pod.Name
			if j, ok := shardOf[key]; ok {
				twice = append(twice, fmt.Sprintf("%s in shards %d and %d", key, j, i))
			}
			shardOf[key] = i
			union[key] = pod.ResourceVersion
		}
	}
	if d := diffKeys(want, union); d != "" {
		diffs = append(diffs, "union of the shards: "+d)
	}
	if len(twice) > 0 {
		diffs = append(diffs, fmt.Sprintf("%d pods in two shards: %s", len(twice), capped(twice, 5)))
	}
	return strings.Join(diffs, "; ")
}

// outsideShards describes the pods in a shard's store, or in a
// notification to its handlers, that its selector does not match; ""
// when there are none.
func outsideShards(shards []*shardInformer) string {
	var diffs []string
	for i, s := range shards {
		var outside []string
		for _, obj := range s.inf.GetStore().List() {
			pod := obj.(*corev1.Pod)
			if in, err := s.sel.Matches(pod); err != nil || !in {
				outside = append(outside, describeShardMiss(pod, err))
			}
		}
		if len(outside) > 0 {
			diffs = append(diffs, fmt.Sprintf("shard %d %s holds %d: %s", i, s.selector, len(outside), capped(outside, 3)))
		}
		s.mu.Lock()
		if len(s.outside) > 0 {
			diffs = append(diffs, fmt.Sprintf("shard %d was notified of %d: %s", i, len(s.outside), capped(s.outside, 3)))
		}
		s.mu.Unlock()
	}
	return strings.Join(diffs, "; ")
}

// eventsDiff describes how the shards' handlers were notified of fewer
// than adds, updates and deletes in all, "" when they were not.
func eventsDiff(shards []*shardInformer, adds, updates, deletes int) string {
	got := map[string]int{}
	for _, s := range shards {
		s.mu.Lock()
		for k, n := range s.events {
			got[k] += n
		}
		s.mu.Unlock()
	}
	if got["add"] < adds || got["update"] < updates || got["delete"] < deletes {
		return fmt.Sprintf("the shards' handlers were notified of %d adds, %d updates, %d deletes, want at least %d, %d, %d", got["add"], got["update"], got["delete"], adds, updates, deletes)
	}
	return ""
}

// capped is the first n of items, sorted, and how many more there are.
func capped(items []string, n int) string {
	items = slices.Sorted(slices.Values(items))
	if len(items) > n {
		items = append(items[:n:n], fmt.Sprintf("… %d more", len(items)-n))
	}
	return strings.Join(items, "; ")
}

// describeShardMiss names pod and the hash of its uid, for a selector
// that did not match it (err: failed on it).
func describeShardMiss(pod *corev1.Pod, err error) string {
	d := fmt.Sprintf("%s/%s (uid %s hashes to 0x%s)", pod.Namespace, pod.Name, pod.UID, sharding.HashField(string(pod.UID)))
	if err != nil {
		d += ": " + err.Error()
	}
	return d
}
