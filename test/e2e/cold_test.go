package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
)

// Cold stores and warm starts: a storm of informers on a store that has not
// synced costs the apiserver the store's one list, and --preload keeps a
// replica unready until its stores have synced.

// noWatchList marks a ListWatch as not supporting watch-list semantics, so
// that its reflector lists and then watches (client-go
// watchlist.DoesClientNotSupportWatchListSemantics), as clients with
// WatchListClient off do.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// newPodInformer returns an informer of every pod through cfg, a watch-list
// client (client-go's default) or a LIST+WATCH one.
func newPodInformer(cfg *rest.Config, watchList bool) cache.SharedIndexInformer {
	cs := kubernetes.NewForConfigOrDie(cfg)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Pods("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods("").Watch(ctx, o)
		},
	}
	var lister cache.ListerWatcher = lw
	if !watchList {
		lister = cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{})
	}
	return cache.NewSharedIndexInformer(lister, &corev1.Pod{}, 0, cache.Indexers{})
}

// apiserverLists counts the apiserver's audit events of LISTs of resource's
// collection; a LIST of one name (fieldSelector=metadata.name=NAME, whose
// audit event names the object) is a lookup, and a LIST of one object
// (limit=1, how a warm start counts the collection to check a peer's list)
// a count: neither is counted.
func apiserverLists(t *testing.T, cp *framework.ControlPlane, resource string) int {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range events {
		if ev.Verb != "list" || ev.ObjectRef == nil || ev.ObjectRef.Resource != resource || ev.ObjectRef.Name != "" {
			continue
		}
		if u, err := url.Parse(ev.RequestURI); err == nil && u.Query().Get("limit") == "1" {
			continue
		}
		n++
	}
	return n
}

// TestColdStoreStorm starts 20 informers of every pod at once (10 watch-list
// clients, 10 LIST+WATCH clients) against a listproxy whose pods store has
// not started: every request waits for the store's one list, so the
// apiserver serves that list's pages and nothing else, and every informer
// syncs every pod from listproxy.
func TestColdStoreStorm(t *testing.T) {
	const pods, informers, pageSize = 3000, 20, 500
	cp, ctx := startWithNamespace(t, loadNamespace, 5*time.Minute)
	seedLoadPods(ctx, t, cp, pods)
	// Generous wait: the first list runs under -race on a busy machine.
	lp := framework.StartListproxy(t, cp, "--resources=pods", "--etcd-servers="+cp.EtcdEndpoint,
		"--consistency-check-interval=0", "--cold-store-wait=2m")
	before := apiserverLists(t, cp, "pods")

	cfg := lp.Config()
	cfg.UserAgent = "cold-storm"
	stop := make(chan struct{})
	defer close(stop)
	all := make([]cache.SharedIndexInformer, informers)
	begin := time.Now()
	for i := range all {
		all[i] = newPodInformer(rest.CopyConfig(cfg), i%2 == 0)
		go all[i].Run(stop)
	}
	for i, inf := range all {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("informer %d did not sync", i)
		}
	}
	t.Logf("%d informers synced %d pods through a cold listproxy in %v", informers, pods, time.Since(begin).Round(time.Millisecond))
	for i, inf := range all {
		if got := len(inf.GetStore().ListKeys()); got != pods {
			t.Errorf("informer %d holds %d pods, want %d", i, got, pods)
		}
	}

	// The store's list is complete before any informer synced, so its
	// audit events are written.
	wantPages := (pods + pageSize - 1) / pageSize
	if got := apiserverLists(t, cp, "pods") - before; got != wantPages {
		t.Errorf("the apiserver served %d LISTs of pods during the storm, want %d (the pages of listproxy's one list)", got, wantPages)
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	for _, verb := range []string{"list", "watch"} {
		if n := m.Sum("listproxy_http_requests_total", `verb="`+verb+`"`, `source="apiserver"`); n != 0 {
			t.Errorf("%v %s requests passed through to the apiserver, want 0", n, verb)
		}
	}
}

// TestPreloadReadiness: with --preload, /readyz fails until the preloaded
// store has synced, so the first LIST of the resource is served from the
// snapshot without waiting; a preloaded store is never dropped as idle,
// while a store started on demand is.
func TestPreloadReadiness(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 50 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pre-%02d", i)}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// StartListproxy waits for /readyz: the store must have synced by then.
	lp := framework.StartListproxy(t, cp, "--preload=configmaps,configmaps/json", "--idle-resource-ttl=1s",
		"--cold-store-wait=0", "--consistency-check-interval=0")
	objects := func(resource, format string) (float64, bool) {
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		match := []string{`resource="` + resource + `"`, `format="` + format + `"`}
		return m.Sum("listproxy_snapshot_objects", match...), m.Has("listproxy_snapshot_objects", match...)
	}
	// configmaps without a format: protobuf, what typed clients ask for.
	for _, format := range []string{"protobuf", "json"} {
		if n, _ := objects("configmaps", format); n < 50 {
			t.Fatalf("listproxy ready with %v configmaps in its preloaded %s store, want at least 50", n, format)
		}
	}
	lpc := newRawClient(t, lp.Config())
	served := func(path string) bool {
		code, hdr, _, err := lpc.get(ctx, path, url.Values{"resourceVersion": {"0"}}, acceptJSON)
		if err != nil {
			t.Fatal(err)
		}
		return code == http.StatusOK && hdr.Get("X-Listproxy-Served-From") == "snapshot"
	}
	// Served at once: with --cold-store-wait=0 a cold store's reads pass
	// through.
	if !served("/api/v1/configmaps") {
		t.Fatal("the first LIST of preloaded configmaps was not served from the snapshot")
	}
	// A store started on demand (secrets) is dropped once idle; by then the
	// preloaded one has been idle as long and is kept.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return served("/api/v1/secrets"), nil
	})
	if err != nil {
		t.Fatalf("secrets never served from a snapshot: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, false, func(context.Context) (bool, error) {
		_, ok := objects("secrets", "json")
		return !ok, nil
	})
	if err != nil {
		t.Fatalf("the on-demand secrets store was never dropped as idle: %v", err)
	}
	if _, ok := objects("configmaps", "json"); !ok {
		t.Error("the preloaded configmaps store was dropped as idle")
	}
	if !served("/api/v1/configmaps") {
		t.Error("LIST of preloaded configmaps after an idle period not served from the snapshot")
	}
}
