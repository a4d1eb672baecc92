package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/consistencydetector"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// podInformers starts n client-go pod informers of namespace ns with
// cs's defaults (watch-list on) and waits until they synced.
func podInformers(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, n int) []cache.SharedIndexInformer {
	t.Helper()
	var infs []cache.SharedIndexInformer
	for range n {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
		infs = append(infs, f.Core().V1().Pods().Informer())
		f.Start(ctx.Done())
	}
	for i, inf := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("informer %d never synced", i)
		}
	}
	return infs
}

// informersConverge waits until every informer's store equals the
// apiserver's list of pods in ns (keys and resourceVersions).
func informersConverge(ctx context.Context, t *testing.T, apiDyn dynamic.Interface, ns string, infs []cache.SharedIndexInformer) {
	t.Helper()
	for i, inf := range infs {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := apiDyn.Resource(corev1Pods).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			last = diffKeys(keysAndRVs(list.Items), storeKeysAndRVs(inf.GetStore()))
			return last == "", nil
		})
		if err != nil {
			t.Errorf("informer %d never equalled the apiserver's list: %s", i, last)
		}
	}
}

// TestWatchersAcrossStoreDrop: the consistency check drops a corrupted
// pods store while informers stream from it. Their watches end (a store
// that broke continuity cannot prove what its watchers missed), the
// informers re-establish, and once writes stop every informer's store
// equals the apiserver's list.
func TestWatchersAcrossStoreDrop(t *testing.T) {
	defer consistencydetector.SetDataConsistencyDetectionForWatchListEnabledForTest(true)()
	const ns, watchers = "watch-drop", 10
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 10 {
		createPodWhenAble(ctx, t, cs, ns, fmt.Sprintf("before-%d", i))
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
	// The corrupted store is JSON; the informers' (protobuf) store is
	// dropped with it, as every store of the resource is.
	warmPods(ctx, t, newRawClient(t, lp.Config()), wire.JSON, wire.Protobuf)
	infs := podInformers(ctx, t, kubernetes.NewForConfigOrDie(lp.Config()), ns, watchers)
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_open", `resource="pods"`); got != watchers {
		t.Fatalf("listproxy_watch_open{pods} = %v, want the %d informers' watches; open %v, passed through %v", got, watchers, m["listproxy_watch_open"], m["listproxy_watch_passed_through_total"])
	}

	corruptPods(t, lp, ns+"/before-0", ns+"/before-1")
	if r := resultsByFormat(t, checkNow(t, lp.Config()))["json"]; !r.Dropped {
		t.Fatalf("json pods store not dropped: %+v", r)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m = framework.Scrape(t, nil, lp.URL+"/metrics")
		return m.Sum("listproxy_watch_ended_total", `resource="pods"`, `reason="store_reset"`) >= watchers, nil
	})
	if err != nil {
		t.Fatalf("watches of the dropped store not ended: %v", m["listproxy_watch_ended_total"])
	}

	for i := range 5 {
		createPodWhenAble(ctx, t, cs, ns, fmt.Sprintf("after-%d", i))
		if err := cs.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("before-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, fmt.Sprintf("before-%d", 5+i), types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"z"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	informersConverge(ctx, t, dynamic.NewForConfigOrDie(cp.AdminConfig), ns, infs)
}

// TestStalledWatchClient: a client that sends a watch and then never reads
// is ended as too slow after --watch-write-timeout, while an informer of
// the same store gets every event meanwhile: the stalled one holds up
// neither the feed nor other watchers.
func TestStalledWatchClient(t *testing.T) {
	const ns, objects = "watch-stalled", 40
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=configmaps", "--watch-write-timeout=3s")
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	warmUp(ctx, t, newRawClient(t, lp.Config()), []target{{path: path}})

	// The stalled client: a small receive buffer, a watch request, and
	// no read ever.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := dialer.DialContext(ctx, "tcp", strings.TrimPrefix(lp.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600 HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n\r\n",
		path, strings.TrimPrefix(lp.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_watch_open", `resource="configmaps"`) == 1, nil
	})
	if err != nil {
		t.Fatal("the stalled client's watch never opened")
	}

	// The informer reads everything.
	f := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(lp.Config()), 0, informers.WithNamespace(ns))
	inf := f.Core().V1().ConfigMaps().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}

	// 40 configmaps of 256 KiB: far more than the stalled connection's
	// socket buffers hold.
	cs := cp.Clientset(framework.UserAdmin)
	data := map[string]string{"pad": strings.Repeat("x", 256<<10)}
	start := time.Now()
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i)}, Data: data}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(inf.GetStore().List()) == objects, nil
	})
	if err != nil {
		t.Fatalf("informer has %d of %d configmaps", len(inf.GetStore().List()), objects)
	}
	t.Logf("the informer had all %d configmaps %v after the first write (writes took %v)", objects, time.Since(start).Round(time.Millisecond), written.Round(time.Millisecond))
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_served_total", `resource="configmaps"`); got < 2 {
		t.Errorf("listproxy served %v configmap watches, want the stalled one and the informer's; passed through: %v", got, m["listproxy_watch_passed_through_total"])
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		m = framework.Scrape(t, nil, lp.URL+"/metrics")
		return m.Sum("listproxy_watch_ended_total", `resource="configmaps"`, `reason="too_slow"`) == 1, nil
	})
	if err != nil {
		t.Fatalf("stalled watch not ended as too slow: %v", m["listproxy_watch_ended_total"])
	}
	if got := m.Sum("listproxy_watch_open", `resource="configmaps"`); got != 1 {
		t.Errorf("listproxy_watch_open{configmaps} = %v, want 1 (the informer's)", got)
	}
}
