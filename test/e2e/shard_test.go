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

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/binaries"
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

// startShardControlPlane starts a control plane of the selected release,
// with the ShardedListAndWatch gate on where the release has it (1.37+),
// and returns it, the release and whether the gate is on.
func startShardControlPlane(t *testing.T) (cp *framework.ControlPlane, release string, gated bool) {
	t.Helper()
	v, err := binaries.KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.Split(v, ".")[1])
	if err != nil {
		t.Fatalf("release %q: %v", v, err)
	}
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
