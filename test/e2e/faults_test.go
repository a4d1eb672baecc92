package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/test/framework"
)

// Fault tests: a watch that silently stalls, and an apiserver
// restarted under listproxy's watches. Through both, consistent reads are
// never stale, resourceVersion=0 reads keep being answered from the last
// snapshot (and metrics say the store is not being fed), and the stores
// resync afterwards.

// podsSeries are the label pairs of the JSON pods store's metrics.
var podsSeries = []string{`resource="pods"`, `format="json"`}

// TestStalledWatchIsReestablished freezes listproxy's pods watches at a
// proxy between listproxy and the apiserver (the streams stay open and
// deliver nothing), writes pods, and checks both ways a stalled watch is
// re-established: silence (no event or bookmark for --watch-stall-timeout,
// and etcd then shows changes the store does not reach within
// --watch-lag-timeout) and evidence (consistent reads prove with etcd that
// the store is behind for --watch-lag-timeout). The silence listproxy is
// checked before anything reads from it, so that only its stall timer can
// notice; the evidence listproxy's stall timer is out of reach.
func TestStalledWatchIsReestablished(t *testing.T) {
	const ns = "stall"
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 3 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("before-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sp := framework.StartStallProxy(t, cp)
	common := []string{"--etcd-servers=" + cp.EtcdEndpoint, "--resources=pods", "--consistent-read-timeout=1s"}
	proxies := []struct {
		name   string
		lp     *framework.Listproxy
		reason string // how its stalled watch is detected
	}{
		{name: "silence", reason: "stalled",
			lp: framework.StartListproxyVia(t, cp, sp.URL, append(common, "--watch-stall-timeout=4s", "--watch-lag-timeout=2s")...)},
		{name: "evidence", reason: "lagging",
			lp: framework.StartListproxyVia(t, cp, sp.URL, append(common, "--watch-stall-timeout=1h", "--watch-lag-timeout=2s")...)},
	}
	path := "/api/v1/namespaces/" + ns + "/pods"
	clients := make([]rawClient, len(proxies))
	for i, p := range proxies {
		clients[i] = newRawClient(t, p.lp.Config())
		// Synced, and the etcd prefix verified by a consistent read.
		waitServed(ctx, t, clients[i], path, url.Values{})
		waitWatchHealthy(ctx, t, p.lp.URL, 1)
	}

	// Freeze both pods watches, again until both were caught open.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if sp.Freeze() == len(proxies) {
			return true, nil
		}
		sp.Thaw()
		return false, nil
	})
	if err != nil {
		t.Fatalf("could not freeze both pods watches (%d open): %v", sp.OpenWatches(), err)
	}
	frozenAt := time.Now()
	before := make([]framework.Metrics, len(proxies))
	for i, p := range proxies {
		before[i] = framework.Scrape(t, nil, p.lp.URL+"/metrics")
	}

	// Writes the frozen watches do not deliver.
	var want []string
	for i := range 3 {
		name := fmt.Sprintf("during-%d", i)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, name, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	updated, err := cs.CoreV1().Pods(ns).Patch(ctx, "before-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"stall":"seen"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %v and updated before-0 at resourceVersion %s with the watches frozen", want, updated.ResourceVersion)
	// hasWrites reports whether a list holds every write above.
	hasWrites := func(p listAnswer) bool {
		names := namesOf(p.items)
		for _, n := range want {
			if !slices.Contains(names, n) {
				return false
			}
		}
		for _, item := range p.items {
			if item.Name == "before-0" {
				return item.Labels["stall"] == "seen"
			}
		}
		return false
	}

	for i, p := range proxies {
		t.Run(p.name, func(t *testing.T) {
			c := clients[i]
			if p.reason == "stalled" {
				// Nothing has read from this listproxy since the freeze: only
				// its stall timer can find the watch broken.
				stalled := append(slices.Clone(podsSeries), `reason="stalled"`)
				err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
					after := framework.Scrape(t, nil, p.lp.URL+"/metrics")
					return after.Sum("listproxy_snapshot_watch_restarts_total", stalled...) > before[i].Sum("listproxy_snapshot_watch_restarts_total", stalled...), nil
				})
				if err != nil {
					t.Fatalf("the silent, frozen watch was not restarted as stalled: %v", err)
				}
			}
			// Consistent reads are never stale: while the store lags they
			// pass through, and once it is answered from the snapshot, the
			// snapshot has the writes.
			var last listAnswer
			var fromAPIServer int
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				var err error
				last, err = getListAnswer(ctx, c, path, url.Values{})
				if err != nil {
					return false, err
				}
				if last.code != http.StatusOK || !hasWrites(last) {
					return false, fmt.Errorf("stale or failed consistent LIST: HTTP %d from %q at resourceVersion %s, %d items %v",
						last.code, last.servedFrom, last.meta.ResourceVersion, len(last.items), namesOf(last.items))
				}
				if last.servedFrom != "snapshot" {
					fromAPIServer++
				}
				return last.servedFrom == "snapshot", nil
			})
			if err != nil {
				t.Fatalf("consistent LISTs: %v", err)
			}
			t.Logf("consistent LISTs served from the snapshot with the writes %v after the freeze (%d passed through meanwhile)",
				time.Since(frozenAt).Round(time.Millisecond), fromAPIServer)
			// And resourceVersion=0 reads see them too: the snapshot is fed again.
			rv0, err := getListAnswer(ctx, c, path, url.Values{"resourceVersion": {"0"}})
			if err != nil || rv0.code != http.StatusOK || rv0.servedFrom != "snapshot" || !hasWrites(rv0) {
				t.Errorf("resourceVersion=0 LIST after the watch was re-established: HTTP %d from %q, %v (err %v)", rv0.code, rv0.servedFrom, namesOf(rv0.items), err)
			}

			after := framework.Scrape(t, nil, p.lp.URL+"/metrics")
			const restarts = "listproxy_snapshot_watch_restarts_total"
			for _, reason := range []string{"stalled", "lagging"} {
				pairs := append(slices.Clone(podsSeries), `reason="`+reason+`"`)
				n := after.Sum(restarts, pairs...) - before[i].Sum(restarts, pairs...)
				switch {
				case reason == p.reason && n < 1:
					t.Errorf("%s{reason=%q} rose by %v, want at least 1", restarts, reason, n)
				case reason != p.reason && n != 0:
					t.Errorf("%s{reason=%q} rose by %v, want 0 (out of reach here)", restarts, reason, n)
				}
			}
		})
	}
}

// TestAPIServerRestartMidWatch stops the apiserver under listproxy's pods
// watch and starts it again. While it is down, resourceVersion=0 reads are
// answered from the last snapshot and metrics say so; consistent reads are
// answered from the snapshot only while etcd proves it current, and after a
// change the snapshot cannot have seen (made here directly in etcd, as
// another apiserver of an HA control plane would) they fail with a Status
// rather than return stale items. After the restart, the store resyncs.
// (TestAPIServerDownAndBack covers pass-through and readiness.)
func TestAPIServerRestartMidWatch(t *testing.T) {
	const ns = "restart"
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 4 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("p-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods",
		"--consistent-read-timeout=1s", "--watch-lag-timeout=2s")
	c := newRawClient(t, lp.Config())
	metrics := lp.URL + "/metrics"
	path := "/api/v1/namespaces/" + ns + "/pods"
	rv0 := url.Values{"resourceVersion": {"0"}}
	waitServed(ctx, t, c, path, url.Values{})
	waitWatchHealthy(ctx, t, lp.URL, 1)
	warm, err := getListAnswer(ctx, c, path, url.Values{})
	if err != nil || warm.code != http.StatusOK {
		t.Fatalf("consistent LIST before the restart: %v %d", err, warm.code)
	}
	warmNames := namesOf(warm.items)
	t.Logf("before the restart: %v at resourceVersion %s", warmNames, warm.meta.ResourceVersion)

	atStop := framework.Scrape(t, nil, metrics)
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	apiserverUp := false
	defer func() {
		if !apiserverUp { // leave the control plane whole for its cleanup
			_ = cp.StartAPIServer(context.Background())
		}
	}()
	waitWatchHealthy(ctx, t, lp.URL, 0)

	t.Run("rv0_from_last_snapshot", func(t *testing.T) {
		before := framework.Scrape(t, nil, metrics)
		p, err := getListAnswer(ctx, c, path, rv0)
		if err != nil {
			t.Fatal(err)
		}
		if p.code != http.StatusOK || p.servedFrom != "snapshot" || !slices.Equal(namesOf(p.items), warmNames) {
			t.Errorf("resourceVersion=0 LIST with the apiserver down: HTTP %d from %q with %v, want 200 from snapshot with %v", p.code, p.servedFrom, namesOf(p.items), warmNames)
		}
		after := framework.Scrape(t, nil, metrics)
		const stale = "listproxy_lists_served_stale_total"
		if n := after.Sum(stale, `resource="pods"`) - before.Sum(stale, `resource="pods"`); n != 1 {
			t.Errorf("%s rose by %v, want 1", stale, n)
		}
		if v := after.Sum("listproxy_snapshot_watch_healthy", podsSeries...); v != 0 {
			t.Errorf("listproxy_snapshot_watch_healthy = %v with the apiserver down, want 0", v)
		}
		if last := after.Sum("listproxy_snapshot_last_progress_timestamp_seconds", podsSeries...); last <= 0 {
			t.Errorf("listproxy_snapshot_last_progress_timestamp_seconds = %v, want the time of the last list or event", last)
		}
	})

	t.Run("consistent_while_proven_current", func(t *testing.T) {
		// No pod changed since the store's last event: etcd proves the
		// snapshot current, the apiserver is not needed.
		p, err := getListAnswer(ctx, c, path, url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		if p.code != http.StatusOK || p.servedFrom != "snapshot" || !slices.Equal(namesOf(p.items), warmNames) {
			t.Errorf("consistent LIST with the apiserver down and no change: HTTP %d from %q with %v, want 200 from snapshot with %v (%s)",
				p.code, p.servedFrom, namesOf(p.items), warmNames, p.status.Message)
		}
	})

	// A change the store cannot see while its apiserver is down.
	deleted := "p-0"
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cp.EtcdEndpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	del, err := etcd.Delete(ctx, "/registry/pods/"+ns+"/"+deleted)
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete %s in etcd: %v (%d deleted)", deleted, err, del.Deleted)
	}
	t.Logf("deleted %s in etcd at revision %d", deleted, del.Header.Revision)

	t.Run("consistent_after_unseen_change", func(t *testing.T) {
		for range 3 {
			p, err := getListAnswer(ctx, c, path, url.Values{})
			if err != nil {
				t.Fatal(err) // includes an error body that is not a Status
			}
			if p.code == http.StatusOK {
				if slices.Contains(namesOf(p.items), deleted) {
					t.Fatalf("stale consistent LIST: 200 from %q at resourceVersion %s still has %s", p.servedFrom, p.meta.ResourceVersion, deleted)
				}
				continue
			}
			if p.status.Kind != "Status" || p.status.Status != metav1.StatusFailure || p.status.Code != int32(p.code) {
				t.Errorf("HTTP %d with body kind %q status %q code %d, want a Failure Status", p.code, p.status.Kind, p.status.Status, p.status.Code)
			}
			t.Logf("consistent LIST: HTTP %d from %q: %s", p.code, p.servedFrom, p.status.Message)
		}
		// resourceVersion=0 still gets the last snapshot, as promised.
		p, err := getListAnswer(ctx, c, path, rv0)
		if err != nil || p.code != http.StatusOK || p.servedFrom != "snapshot" {
			t.Errorf("resourceVersion=0 LIST: HTTP %d from %q (%v), want 200 from snapshot", p.code, p.servedFrom, err)
		}
	})

	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	apiserverUp = true
	restarted := time.Now()
	created := createPodWhenAble(ctx, t, cs, ns, "after-restart")
	t.Logf("apiserver writes again %v after it started", time.Since(restarted).Round(time.Millisecond))

	t.Run("resync", func(t *testing.T) {
		var passedThrough int
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := getListAnswer(ctx, c, path, url.Values{})
			if err != nil {
				return false, err
			}
			if p.code != http.StatusOK {
				// The apiserver may still be warming up behind a pass-through.
				passedThrough++
				return false, nil
			}
			names := namesOf(p.items)
			if !slices.Contains(names, created.Name) || slices.Contains(names, deleted) {
				return false, fmt.Errorf("stale consistent LIST: 200 from %q at resourceVersion %s: %v (want %s, not %s)",
					p.servedFrom, p.meta.ResourceVersion, names, created.Name, deleted)
			}
			if p.servedFrom != "snapshot" {
				passedThrough++
			}
			return p.servedFrom == "snapshot", nil
		})
		if err != nil {
			t.Fatalf("consistent LISTs after the restart: %v", err)
		}
		t.Logf("consistent LISTs served from the resynced snapshot %v after the apiserver started (%d answered otherwise meanwhile)",
			time.Since(restarted).Round(time.Millisecond), passedThrough)
		waitWatchHealthy(ctx, t, lp.URL, 1)
		after := framework.Scrape(t, nil, metrics)
		delta := func(name string, pairs ...string) float64 {
			pairs = append(slices.Clone(podsSeries), pairs...)
			return after.Sum(name, pairs...) - atStop.Sum(name, pairs...)
		}
		const restarts = "listproxy_snapshot_watch_restarts_total"
		t.Logf("since the apiserver stopped: relists %v; watch restarts: closed %v, error %v, gone %v, lagging %v",
			delta("listproxy_snapshot_relists_total"), delta(restarts, `reason="closed"`), delta(restarts, `reason="error"`),
			delta(restarts, `reason="gone"`), delta(restarts, `reason="lagging"`))
		// Fed again: served_stale stays put.
		p, err := getListAnswer(ctx, c, path, rv0)
		if err != nil || p.code != http.StatusOK || p.servedFrom != "snapshot" || !slices.Contains(namesOf(p.items), created.Name) {
			t.Errorf("resourceVersion=0 LIST after the resync: HTTP %d from %q with %v (%v)", p.code, p.servedFrom, namesOf(p.items), err)
		}
		const stale = "listproxy_lists_served_stale_total"
		if n := framework.Scrape(t, nil, metrics).Sum(stale, `resource="pods"`) - after.Sum(stale, `resource="pods"`); n != 0 {
			t.Errorf("%s rose by %v with the store fed, want 0", stale, n)
		}
	})
}

// waitWatchHealthy polls listproxy_snapshot_watch_healthy of the JSON pods
// store until it is want.
func waitWatchHealthy(ctx context.Context, t *testing.T, lpURL string, want float64) {
	t.Helper()
	awaitMetric(ctx, t, lpURL, time.Minute, want, "listproxy_snapshot_watch_healthy", podsSeries...)
}

// createPodWhenAble creates pod name, retrying while the apiserver is not
// ready to write.
func createPodWhenAble(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var created *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, name, 0), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // an earlier attempt timed out but happened
			created, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return created
}
