package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// Consistent reads proven through the apiserver (no etcd) under conditions
// the proof must survive: a feed whose events arrive late or without
// bookmarks, and apiservers that hang or restart behind a TCP balancer.
// Reads may pass through; none may be stale.

const metricProofs = "listproxy_freshness_apiserver_proofs_total"

// proofPaths returns the configmaps proofs by path between two scrapes.
func proofPaths(before, after framework.Metrics) map[string]float64 {
	paths := map[string]float64{}
	for _, path := range []string{"fast", "aux", "no_bookmarks", "inconclusive"} {
		label := `path="` + path + `"`
		paths[path] = after.Sum(metricProofs, `resource="configmaps"`, label) - before.Sum(metricProofs, `resource="configmaps"`, label)
	}
	return paths
}

// auxResults returns the configmaps auxiliary watches by result between
// two scrapes.
func auxResults(before, after framework.Metrics) map[string]float64 {
	const m = "listproxy_freshness_aux_watches_total"
	results := map[string]float64{}
	for _, r := range []string{"bookmark", "no_bookmark", "expired", "error"} {
		label := `result="` + r + `"`
		results[r] = after.Sum(m, `resource="configmaps"`, label) - before.Sum(m, `resource="configmaps"`, label)
	}
	return results
}

// outcomes returns the configmaps consistent reads by outcome between two
// scrapes, as "outcome n" strings.
func outcomes(before, after framework.Metrics) string {
	const m = "listproxy_freshness_consistent_reads_total"
	var out []string
	for _, o := range []string{"served", "probe_failed", "progress_timeout", "snapshot_timeout", "no_bookmarks", "no_proof"} {
		label := `outcome="` + o + `"`
		if n := after.Sum(m, `resource="configmaps"`, label) - before.Sum(m, `resource="configmaps"`, label); n > 0 {
			out = append(out, o+" "+strconv.FormatFloat(n, 'f', -1, 64))
		}
	}
	return strings.Join(out, ", ")
}

// TestConsistentWithoutEtcdDelayedFeed runs checkLinearizable with listproxy
// given no etcd and reaching the apiserver through a DelayProxy: the
// stores' feeds deliver each event 0–5 s late (in order) while probes and
// auxiliary watches are prompt, or the feeds, or every watch, lose their
// bookmarks. A feed behind the probed revision must never be taken for one
// that reached it.
func TestConsistentWithoutEtcdDelayedFeed(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	for _, tc := range []struct {
		name    string
		proxy   framework.DelayProxyConfig
		writers int
		quiet   bool
		args    []string
		// wantPath is a proof path the run must take.
		wantPath string
		// noAuxBookmarks: no auxiliary watch may see a bookmark.
		noAuxBookmarks bool
	}{{
		// Events reach the store up to 5 s after the apiserver sent them:
		// the proof waits for the store (up to 8 s) rather than trusting it.
		name:     "delayed-feed",
		proxy:    framework.DelayProxyConfig{MaxDelay: 5 * time.Second, LongWatchesOnly: true},
		writers:  linWriters,
		args:     []string{"--consistent-read-timeout=8s"},
		wantPath: "aux",
	}, {
		// The feed advances only by events, on a quiet resource in a
		// busy cluster; the auxiliary watches keep their bookmarks. State
		// probes, which would prove this small resource's reads, are off.
		name:     "feed-without-bookmarks",
		proxy:    framework.DelayProxyConfig{DropBookmarks: true, LongWatchesOnly: true},
		quiet:    true,
		args:     []string{"--consistent-state-proof-max-objects=0"},
		wantPath: "aux",
	}, {
		// No watch carries bookmarks, as for a resource without a watch
		// cache: the feed's own events prove reads, and an auxiliary
		// watch (when the feed is not at the probed revision within the
		// fast path's wait) ends without a bookmark, after which only the
		// feed proves anything.
		name:           "no-bookmarks",
		proxy:          framework.DelayProxyConfig{DropBookmarks: true},
		writers:        linWriters,
		wantPath:       "fast",
		noAuxBookmarks: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dp := framework.StartDelayProxy(t, cp, tc.proxy)
			lp := framework.StartListproxyVia(t, cp, dp.URL, tc.args...)
			scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
			before := scrape()
			res := checkLinearizable(t, cp, lp, linRun{namespace: tc.name, duration: 15 * time.Second, writers: tc.writers, quiet: tc.quiet, passThrough: true})
			after := scrape()
			paths, aux := proofPaths(before, after), auxResults(before, after)
			t.Logf("%d LISTs, %.1f%% served from snapshots; proof paths %v; auxiliary watches %v; consistent reads: %s; proxy: %d watches treated, %d events delivered, %d bookmarks dropped",
				res.lists, 100*float64(res.fromSnapshot)/float64(max(res.lists, 1)), paths, aux, outcomes(before, after),
				dp.Treated(), dp.Events(), dp.DroppedBookmarks())
			if dp.Treated() == 0 {
				t.Errorf("the proxy treated no watch")
			}
			if paths[tc.wantPath] == 0 {
				t.Errorf("no proof took path %s", tc.wantPath)
			}
			if tc.noAuxBookmarks && aux["bookmark"] != 0 {
				t.Errorf("%.0f auxiliary watches saw a bookmark the proxy should have dropped", aux["bookmark"])
			}
			if res.fromSnapshot == 0 {
				t.Errorf("no LIST was served from a snapshot: nothing was proven")
			}
		})
	}
}

// TestConsistentWithoutEtcdTwoAPIServers runs checkLinearizable with two
// kube-apiservers on one etcd behind a TCP balancer, the balancer being
// listproxy's upstream (no etcd) and the writers'. During the run one
// apiserver is paused (SIGSTOP) for 3 s and resumed, and the other is
// restarted: connections move between instances whose watch caches lag
// each other.
func TestConsistentWithoutEtcdTwoAPIServers(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	second := framework.StartAPIServers(t, cp, 1)[0]
	probe, err := framework.APIServerReadyProbe(cp)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(u string) string { return strings.TrimPrefix(u, "https://") }
	bal, err := framework.StartBalancerProbing([]string{addr(cp.APIServerURL), addr(second.URL)}, probe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bal.Close() })
	balURL := "https://" + bal.Addr
	lp := framework.StartListproxyAt(t, cp, balURL)
	wcfg := cp.UserConfig(framework.UserAdmin)
	wcfg.Host = balURL
	writers, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}

	faults := func(ctx context.Context) {
		step := func(d time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
		if !step(3 * time.Second) {
			return
		}
		first := cp.APIServerProcess()
		if err := first.Pause(); err != nil {
			t.Errorf("pause: %v", err)
			return
		}
		t.Logf("paused the first apiserver (connections so far: %d, %d)", bal.BackendConnections(0), bal.BackendConnections(1))
		step(3 * time.Second)
		if err := first.Resume(); err != nil {
			t.Errorf("resume: %v", err)
			return
		}
		t.Logf("resumed the first apiserver")
		if !step(2 * time.Second) {
			return
		}
		begin := time.Now()
		if err := second.Stop(); err != nil {
			t.Errorf("stop the second apiserver: %v", err)
			return
		}
		if err := second.Start(ctx); err != nil {
			t.Errorf("start the second apiserver: %v", err)
			return
		}
		t.Logf("restarted the second apiserver in %v (connections so far: %d, %d)",
			time.Since(begin).Round(time.Millisecond), bal.BackendConnections(0), bal.BackendConnections(1))
	}

	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
	before := scrape()
	res := checkLinearizable(t, cp, lp, linRun{
		namespace: "two-apiservers", duration: 20 * time.Second, writers: linWriters, writeTo: writers,
		// The writers stop while their apiserver is paused.
		minWriteRate: linMinRate / 2,
		passThrough:  true, unavailable: true, faults: faults,
	})
	after := scrape()
	t.Logf("%d LISTs, %.1f%% served from snapshots, %d unavailable; proof paths %v; auxiliary watches %v; consistent reads: %s; balancer connections: %d, %d",
		res.lists, 100*float64(res.fromSnapshot)/float64(max(res.lists, 1)), res.unavailable, proofPaths(before, after), auxResults(before, after), outcomes(before, after),
		bal.BackendConnections(0), bal.BackendConnections(1))
	if res.fromSnapshot == 0 {
		t.Errorf("no LIST was served from a snapshot: nothing was proven")
	}
}

// crdWrite is the last acknowledged write of one widget; seq numbers the
// writes to the widget in the order they were sent.
type crdWrite struct {
	rv      uint64
	deleted bool
	seq     int
}

// TestConsistentWithoutEtcdCRD: consistent LISTs of a custom resource
// through listproxy given no etcd, while one writer creates, relabels and
// deletes widgets at the apiserver ten times a second: every LIST holds
// every write acknowledged before it was sent (a widget written at R
// appears at R or later, a widget deleted at R is absent or re-created
// later), and its resourceVersion is not older than theirs. A widget
// with a write in flight while the LIST was sent or answered is not
// checked: that write may or may not show.
func TestConsistentWithoutEtcdCRD(t *testing.T) {
	const namespace = "crd"
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	createWidgetCRD(t, cp.AdminConfig)
	ctx := t.Context()
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp)
	lpc := newRawClient(t, lp.Config())
	path := "/apis/" + widgetGVR.Group + "/" + widgetGVR.Version + "/namespaces/" + namespace + "/" + widgetGVR.Resource
	waitServed(ctx, t, lpc, path, url.Values{})
	widgets := dynamic.NewForConfigOrDie(cp.AdminConfig).Resource(widgetGVR).Namespace(namespace)

	var mu sync.Mutex
	acked := map[string]crdWrite{} // guarded by mu
	sent := map[string]int{}       // writes sent per widget; guarded by mu
	stop := make(chan struct{})
	time.AfterFunc(15*time.Second, func() { close(stop) })
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; running(); i++ {
			<-tick.C
			name := fmt.Sprintf("w-%02d", i%20)
			mu.Lock()
			last, known := acked[name]
			sent[name]++
			w := crdWrite{seq: sent[name]}
			mu.Unlock()
			switch {
			case !known || last.deleted:
				obj, err := widgets.Create(ctx, newWidget(namespace, name, i), metav1.CreateOptions{})
				if err != nil {
					t.Errorf("create %s: %v", name, err)
					return
				}
				w.rv = parseRV(t, obj.GetResourceVersion())
			case i%3 == 0:
				if err := widgets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete %s: %v", name, err)
					return
				}
				// A delete's resourceVersion is not returned; the next
				// LIST through the apiserver tells a bound.
				list, err := widgets.List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Errorf("list: %v", err)
					return
				}
				w.rv, w.deleted = parseRV(t, list.GetResourceVersion()), true
			default:
				patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"n":"%d"}}}`, i))
				obj, err := widgets.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				if err != nil {
					t.Errorf("patch %s: %v", name, err)
					return
				}
				w.rv = parseRV(t, obj.GetResourceVersion())
			}
			mu.Lock()
			acked[name] = w
			mu.Unlock()
		}
	})
	var lists, fromSnapshot, violations atomic.Int64
	for range 2 {
		wg.Go(func() {
			for running() {
				mu.Lock()
				before, sentBefore := maps.Clone(acked), maps.Clone(sent)
				mu.Unlock()
				p, err := getListAnswer(ctx, lpc, path, url.Values{})
				mu.Lock()
				sentAfter := maps.Clone(sent)
				mu.Unlock()
				if err != nil || p.code != http.StatusOK {
					t.Errorf("LIST: %v (HTTP %d %s)", err, p.code, p.status.Message)
					return
				}
				lists.Add(1)
				if p.servedFrom == "snapshot" {
					fromSnapshot.Add(1)
				}
				listRV := parseRV(t, p.meta.ResourceVersion)
				got := map[string]uint64{}
				for _, it := range p.items {
					got[it.Name] = parseRV(t, it.ResourceVersion)
				}
				for name, w := range before {
					if sentBefore[name] != w.seq || sentAfter[name] != w.seq {
						continue // a write in flight
					}
					rv, present := got[name]
					switch {
					case listRV < w.rv && !w.deleted:
						t.Errorf("LIST at %d (from %s) is older than %s's write at %d, acknowledged before it", listRV, p.servedFrom, name, w.rv)
					case w.deleted && present && rv <= w.rv:
						t.Errorf("LIST at %d (from %s) still holds %s at %d, deleted before it", listRV, p.servedFrom, name, rv)
					case !w.deleted && (!present || rv < w.rv):
						t.Errorf("LIST at %d (from %s) holds %s at %d (present %v), written at %d before it", listRV, p.servedFrom, name, rv, present, w.rv)
					default:
						continue
					}
					violations.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d LISTs, %d from snapshots, %d violations", lists.Load(), fromSnapshot.Load(), violations.Load())
	if fromSnapshot.Load() == 0 {
		t.Errorf("no LIST was served from a snapshot: nothing was proven")
	}
}

// TestConsistentWithoutEtcdKeepsProvenRevision: after a consistent LIST of
// a quiet resource, proven at R through the apiserver, what a client sends
// next at R — a watch from the list's resourceVersion (kubectl get -w,
// rollout status, RetryWatcher), a NotOlderThan read at R — is served from
// the snapshot at once (the read at R or later) instead of passing through
// or waiting for the feed's next bookmark.
func TestConsistentWithoutEtcdKeepsProvenRevision(t *testing.T) {
	const namespace = "quiet"
	cp, ctx := startWithNamespace(t, namespace, 0)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig)
	for i := range 5 {
		if _, err := admin.CoreV1().PodTemplates(namespace).Create(ctx, newPodTemplate(fmt.Sprintf("t-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lp := framework.StartListproxy(t, cp)
	lpc := newRawClient(t, lp.Config())
	path := "/api/v1/namespaces/" + namespace + "/podtemplates"
	waitServed(ctx, t, lpc, path, url.Values{})
	writeElsewhere := writerElsewhere(ctx, t, admin)

	for round := range 3 {
		// A write elsewhere moves the revision past the quiet store's.
		writeElsewhere()
		list, err := getListAnswer(ctx, lpc, path, url.Values{})
		if err != nil || list.code != http.StatusOK || list.servedFrom != "snapshot" {
			t.Fatalf("round %d: consistent LIST: %v, HTTP %d, served from %q; want 200 from the snapshot", round, err, list.code, list.servedFrom)
		}
		rv := list.meta.ResourceVersion
		listRV, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			t.Fatalf("round %d: the LIST's resourceVersion %q: %v", round, rv, err)
		}

		watch := url.Values{"watch": {"true"}, "resourceVersion": {rv}, "timeoutSeconds": {"1"}}
		code, hdr, _, err := lpc.get(ctx, path, watch, acceptJSON)
		if err != nil || code != http.StatusOK || hdr.Get(headerServedFrom) != "snapshot" {
			t.Errorf("round %d: WATCH from the list's resourceVersion %s: %v, HTTP %d, served from %q; want 200 from the snapshot",
				round, rv, err, code, hdr.Get(headerServedFrom))
		}

		start := time.Now()
		notOlder := url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"NotOlderThan"}}
		p, err := getListAnswer(ctx, lpc, path, notOlder)
		took := time.Since(start)
		if err != nil || p.code != http.StatusOK || p.servedFrom != "snapshot" {
			t.Errorf("round %d: NotOlderThan LIST at %s: %v, HTTP %d, served from %q; want 200 from the snapshot", round, rv, err, p.code, p.servedFrom)
		} else if got, _ := strconv.ParseUint(p.meta.ResourceVersion, 10, 64); got < listRV || len(p.items) != 5 {
			t.Errorf("round %d: NotOlderThan LIST at %s answered at %s with %d items; want at %s or later with 5", round, rv, p.meta.ResourceVersion, len(p.items), rv)
		}
		// The resource is at rv already: nothing to wait for (an
		// auxiliary watch's bookmark takes up to 2.25 s, the proof
		// timeout is 3 s).
		if took > time.Second {
			t.Errorf("round %d: NotOlderThan LIST at %s took %v; the store was already there", round, rv, took)
		}
	}
}

// TestConsistentWithoutEtcdSmallQuietPassesThrough: proving through the
// apiserver, a consistent LIST of a quiet namespace of 50 podtemplates
// passes through at once (reason direct_cheaper: the apiserver answers it
// in milliseconds, an auxiliary watch's bookmark takes up to 2.25 s), with
// --consistent-read-fallback=reject never a 429; a quiet namespace of 600
// and the whole resource (650) still wait for the proof and are served
// from the snapshot. Each read follows a write elsewhere, so the store's
// own feed is behind the probed revision.
func TestConsistentWithoutEtcdSmallQuietPassesThrough(t *testing.T) {
	const (
		small, large = "small-quiet", "large-quiet"
		nSmall       = 50
		nLarge       = 600
		rounds       = 5
	)
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig)
	for ns, n := range map[string]int{small: nSmall, large: nLarge} {
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					if _, err := admin.CoreV1().PodTemplates(ns).Create(ctx, newPodTemplate(fmt.Sprintf("t-%d", i)), metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// No --etcd-servers: the apiserver proves consistent reads.
	lp := framework.StartListproxy(t, cp, "--consistent-pass-through-max-objects=500", "--consistent-read-fallback=reject")
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
	smallPath := "/api/v1/namespaces/" + small + "/podtemplates"
	largePath := "/api/v1/namespaces/" + large + "/podtemplates"
	waitServed(ctx, t, lpc, smallPath, url.Values{"resourceVersion": {"0"}})

	writeElsewhere := writerElsewhere(ctx, t, admin)
	const (
		resource = `resource="podtemplates"`
		lists    = "listproxy_lists_total"
	)
	before := scrape()
	passed := 0
	var took, direct []time.Duration
	for round := range rounds {
		writeElsewhere()
		start := time.Now()
		p, err := getListAnswer(ctx, lpc, smallPath, url.Values{})
		took = append(took, time.Since(start))
		if err != nil || p.code != http.StatusOK || len(p.items) != nSmall {
			t.Fatalf("round %d: consistent LIST of %s: %v, HTTP %d (%s), %d items; want 200 with %d", round, small, err, p.code, p.status.Message, len(p.items), nSmall)
		}
		switch p.servedFrom {
		case "apiserver":
			passed++
		case "snapshot":
			// The store's feed reached the probed revision within the
			// fast path's wait (a bookmark just then): proven, served.
		default:
			t.Errorf("round %d: served from %q", round, p.servedFrom)
		}
		start = time.Now()
		if _, err := getListAnswer(ctx, apic, smallPath, url.Values{}); err != nil {
			t.Fatal(err)
		}
		direct = append(direct, time.Since(start))
	}
	after := scrape()
	slices.Sort(took)
	slices.Sort(direct)
	t.Logf("%d of %d consistent LISTs of %d objects passed through; median %v through listproxy, %v direct", passed, rounds, nSmall, took[rounds/2], direct[rounds/2])
	if passed == 0 {
		t.Errorf("no consistent LIST of the small quiet namespace passed through")
	}
	diff := func(name string, pairs ...string) float64 { return rose(before, after, name, pairs...) }
	if got := diff(lists, resource, `source="apiserver"`, `reason="direct_cheaper"`); got != float64(passed) {
		t.Errorf("listproxy_lists_total{reason=direct_cheaper} rose by %v, want %d", got, passed)
	}
	if got := diff(metricProofs, resource, `path="direct_cheaper"`); got != float64(passed) {
		t.Errorf("%s{path=direct_cheaper} rose by %v, want %d", metricProofs, got, passed)
	}
	if got := diff(metricProofs, resource, `path="aux"`); got != 0 {
		t.Errorf("%v small reads were proven by an auxiliary watch", got)
	}
	if got := diff(lists, resource, `reason="too_many_requests"`) + diff(lists, resource, `source="listproxy"`); got != 0 {
		t.Errorf("%v small reads were rejected", got)
	}

	// Large quiet scopes wait for the proof: that is where listproxy
	// saves the apiserver real work.
	for _, tc := range []struct {
		path string
		n    int
	}{{largePath, nLarge}, {"/api/v1/podtemplates", nSmall + nLarge}} {
		writeElsewhere()
		before := scrape()
		p, err := getListAnswer(ctx, lpc, tc.path, url.Values{})
		if err != nil || p.code != http.StatusOK || p.servedFrom != "snapshot" || len(p.items) != tc.n {
			t.Errorf("consistent LIST of %s: %v, HTTP %d (%s), served from %q, %d items; want 200 from the snapshot with %d",
				tc.path, err, p.code, p.status.Message, p.servedFrom, len(p.items), tc.n)
		}
		if got := rose(before, scrape(), metricProofs, resource, `path="direct_cheaper"`); got != 0 {
			t.Errorf("consistent LIST of %s: %v proofs passed it through as cheaper", tc.path, got)
		}
	}
}

// TestConsistentWithoutEtcdSmallResourceByState: proving through the
// apiserver, the consistent reads of a small quiet resource (40
// podtemplates, written by nothing else) and of an empty one (limitranges)
// are served from the snapshot, proven by the state probe at once: a LIST
// of each and a watch-list of the podtemplates each round, after a write
// elsewhere has moved the revision past their stores' feeds. A WATCH from
// the LIST's resourceVersion is served from the store too. None passes
// through and no auxiliary watch is opened. The watch-list's objects are
// the apiserver's at its end bookmark, and a podtemplate created after it
// arrives on both watches, beyond their start.
func TestConsistentWithoutEtcdSmallResourceByState(t *testing.T) {
	const (
		namespace = "small-state"
		n         = 40
		rounds    = 3
	)
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig)
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := admin.CoreV1().PodTemplates(namespace).Create(ctx, newPodTemplate(fmt.Sprintf("t-%02d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// No --etcd-servers: the apiserver proves consistent reads.
	lp := framework.StartListproxy(t, cp)
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	templates := "/api/v1/namespaces/" + namespace + "/podtemplates"
	const limitRanges = "/api/v1/limitranges"
	waitServed(ctx, t, lpc, templates, url.Values{"resourceVersion": {"0"}})
	waitServed(ctx, t, lpc, limitRanges, url.Values{"resourceVersion": {"0"}})
	writeElsewhere := writerElsewhere(ctx, t, admin)
	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }

	before := scrape()
	want := n
	var listRV string
	for round := range rounds {
		for _, tc := range []struct {
			path string
			n    int
		}{{templates, want}, {limitRanges, 0}} {
			writeElsewhere()
			p, err := getListAnswer(ctx, lpc, tc.path, url.Values{})
			if err != nil || p.code != http.StatusOK || p.servedFrom != "snapshot" || len(p.items) != tc.n {
				t.Fatalf("round %d: consistent LIST of %s: %v, HTTP %d (%s), served from %q, %d items; want 200 from the snapshot with %d",
					round, tc.path, err, p.code, p.status.Message, p.servedFrom, len(p.items), tc.n)
			}
			if tc.path == templates {
				listRV = p.meta.ResourceVersion
			}
		}

		// A WATCH from the LIST's resourceVersion, past the quiet store's
		// progress, as kubectl get --watch and informers without
		// watch-lists send it: the probe shows that the resource reached
		// it, so it is served from the store without waiting for the
		// store or an auxiliary watch (the metrics below).
		fctx, cancelFrom := context.WithCancel(ctx)
		from, fromHdr := openWatch(fctx, t, lpc, templates, url.Values{"watch": {"true"}, "resourceVersion": {listRV},
			"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}, wire.JSON)
		if got := fromHdr.Get(headerServedFrom); got != "snapshot" {
			t.Fatalf("round %d: watch from the LIST's resourceVersion %s served from %q, want the snapshot", round, listRV, got)
		}

		writeElsewhere()
		wctx, cancel := context.WithCancel(ctx)
		q := url.Values{"watch": {"true"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
			"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}
		r, hdr := openWatch(wctx, t, lpc, templates, q, wire.JSON)
		if got := hdr.Get(headerServedFrom); got != "snapshot" {
			t.Fatalf("round %d: watch-list served from %q, want the snapshot", round, got)
		}
		added, endRV := initialFramesRV(t, r)
		var got []string
		for _, fr := range added {
			var ev struct {
				Object metav1.PartialObjectMetadata `json:"object"`
			}
			if err := json.Unmarshal(fr.raw, &ev); err != nil {
				t.Fatal(err)
			}
			got = append(got, objectKey(ev.Object.Namespace, ev.Object.Name))
		}
		exact, err := getListAnswer(ctx, apic, templates, url.Values{"resourceVersion": {endRV}, "resourceVersionMatch": {"Exact"}})
		if err != nil || exact.code != http.StatusOK {
			t.Fatalf("round %d: the apiserver's LIST at %s: %v, HTTP %d", round, endRV, err, exact.code)
		}
		var wantKeys []string
		for _, it := range exact.items {
			wantKeys = append(wantKeys, objectKey(it.Namespace, it.Name))
		}
		slices.Sort(got)
		if d := wlKeyDiff(wantKeys, got); d != "" {
			t.Errorf("round %d: watch-list's objects differ from the apiserver's at its end bookmark %s: %s", round, endRV, d)
		}

		name := fmt.Sprintf("new-%d", round)
		created, err := admin.CoreV1().PodTemplates(namespace).Create(ctx, newPodTemplate(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want++
		evs, err := nextEvents(r, 1)
		if err != nil {
			t.Fatalf("round %d: waiting for the ADDED event of %s: %v", round, name, err)
		}
		if evs[0].typ != wire.Added || evs[0].rv != created.ResourceVersion {
			t.Errorf("round %d: after the end bookmark at %s, event %s at %s; want ADDED %s at %s", round, endRV, evs[0].typ, evs[0].rv, name, created.ResourceVersion)
		}
		evs, err = nextEvents(from, 1)
		if err != nil {
			t.Fatalf("round %d: the watch from %s, waiting for the ADDED event of %s: %v", round, listRV, name, err)
		}
		if evs[0].typ != wire.Added || evs[0].rv != created.ResourceVersion {
			t.Errorf("round %d: the watch from %s: first event %s at %s; want ADDED %s at %s", round, listRV, evs[0].typ, evs[0].rv, name, created.ResourceVersion)
		}
		cancel()
		cancelFrom()
	}
	after := scrape()
	const resource = `resource="podtemplates"`
	if got := rose(before, after, metricProofs, resource, `path="state"`); got < 1 {
		t.Errorf("%s{path=state} rose by %v, want the podtemplates' reads proven by state probes", metricProofs, got)
	}
	if got := rose(before, after, metricProofs, `resource="limitranges"`, `path="state"`); got != rounds {
		t.Errorf("%s{resource=limitranges,path=state} rose by %v, want %d", metricProofs, got, rounds)
	}
	for _, path := range []string{"aux", "direct_cheaper"} {
		if got := rose(before, after, metricProofs, `path="`+path+`"`); got != 0 {
			t.Errorf("%s{path=%s} rose by %v, want 0", metricProofs, path, got)
		}
	}
}

// newPodTemplate is a podtemplate named name: an object of a resource
// nothing else in the control plane writes.
func newPodTemplate(name string) *corev1.PodTemplate {
	return &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}},
		}},
	}
}

// writerElsewhere returns a function that creates one more configmap in
// namespace default: a write that moves the cluster's revision past the
// stores of quiet resources.
func writerElsewhere(ctx context.Context, t *testing.T, admin kubernetes.Interface) func() {
	writes := 0
	return func() {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("elsewhere-%d", writes)}}
		writes++
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// rose is how much the sum of name's series with pairs rose between two
// scrapes.
func rose(before, after framework.Metrics, name string, pairs ...string) float64 {
	return after.Sum(name, pairs...) - before.Sum(name, pairs...)
}
