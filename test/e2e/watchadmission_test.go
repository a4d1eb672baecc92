package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// TestWatchListsAdmittedAsLists: a watch-list's initial events take room in
// the LIST admission. While a stalled client's watch-list of large
// ConfigMaps holds the only slot (--max-inflight-lists=1), the watch-lists
// of client-go informers with their default settings get the apiserver's
// 429 with Retry-After instead of each materialising their page; the
// stalled one is cut by the LIST write timeout, and the informers, retrying
// as client-go does, then sync from snapshots to the apiserver's state.
func TestWatchListsAdmittedAsLists(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createNamespaceWithPods(ctx, t, cp, "a", 20)
	admin := cp.Clientset(framework.UserAdmin)
	// About 11 MB of ConfigMaps: more than the socket buffers of a client
	// that reads nothing, so its initial events stay unwritten.
	pad := strings.Repeat("x", 900<<10)
	for i := range 12 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%02d", i)}, Data: map[string]string{"pad": pad}}
		if _, err := admin.CoreV1().ConfigMaps("a").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint,
		"--max-inflight-lists=1", "--list-queue-wait=0s", "--list-write-timeout=5s")
	lpc := newRawClient(t, lp.Config())
	for _, path := range []string{"/api/v1/pods", "/api/v1/configmaps"} {
		for _, f := range []wire.Format{wire.JSON, wire.Protobuf} {
			awaitSnapshot(ctx, t, lpc, path, formatAccept[f])
		}
	}
	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }

	// The stalled client reads the response head and nothing more, over
	// HTTP/1.1 (an HTTP/2 client buffers a stream's window of its own).
	stalledCfg := rest.CopyConfig(lp.Config())
	stalledCfg.NextProtos = []string{"http/1.1"}
	httpClient, err := rest.HTTPClientFor(stalledCfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lp.URL+"/api/v1/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "identity") // gzip would shrink the padding to nothing
	stalled, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	if got := stalled.Header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
		t.Fatalf("stalled watch-list answered by %q, want the snapshot", got)
	}

	// Informers start while it holds the slot.
	informerCount := 5
	synced := make([]cache.SharedIndexInformer, informerCount)
	for i := range synced {
		f := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(lp.Config()), 0)
		synced[i] = f.Core().V1().Pods().Informer()
		f.Start(ctx.Done())
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return scrape().Sum("listproxy_lists_rejected_total") >= 1, nil
	}); err != nil {
		t.Fatalf("no watch-list was refused room while the stalled one held it: %v", err)
	}
	for i, inf := range synced {
		syncCtx, done := context.WithTimeout(ctx, 2*time.Minute)
		ok := cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced)
		done()
		if !ok {
			t.Fatalf("informer %d never synced", i)
		}
	}
	want, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, inf := range synced {
		if got := len(inf.GetStore().ListKeys()); got != len(want.Items) {
			t.Errorf("informer %d holds %d pods, want %d", i, got, len(want.Items))
		}
	}
	m := scrape()
	if got := m.Sum("listproxy_watch_ended_total", `resource="configmaps"`, `reason="too_slow"`); got != 1 {
		t.Errorf("stalled watch-list ended as too slow %v times, want 1 (cut by the LIST write timeout); ended: %v", got, m["listproxy_watch_ended_total"])
	}
	if got := m.Sum("listproxy_watch_served_total", `resource="pods"`); got < float64(informerCount) {
		t.Errorf("%v pod watches served from snapshots, want at least %d (the informers' watch-lists)", got, informerCount)
	}
}
