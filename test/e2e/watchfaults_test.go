package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=configmaps", "--watch-write-timeout=3s")
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	warmUp(ctx, t, newRawClient(t, lp.Config()), []target{{path: path}})

	// The stalled client: a small receive buffer, a watch request, and
	// no read ever.
	stalledWatch(ctx, t, lp, path+"?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=600")
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
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

// stalledWatch sends a watch of pathAndQuery (JSON) to lp over a connection
// with a 4 KiB receive buffer and reads nothing: the stalled client. Its
// response is read from the returned connection, if at all.
func stalledWatch(ctx context.Context, t *testing.T, lp *framework.Listproxy, pathAndQuery string) net.Conn {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	host := strings.TrimPrefix(lp.URL, "http://")
	conn, err := dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n\r\n", pathAndQuery, host); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestStalledWatchClientResumes: a client that stops reading while
// listproxy has more for it than its socket buffers hold, and while more
// changes are made than the store's least history of changes (1024), is
// parked, not ended: once it reads again it gets every change, in order,
// exactly as they were made; an informer of the same store got them all
// meanwhile.
func TestStalledWatchClientResumes(t *testing.T) {
	const ns, big, small = "watch-parked", 40, 1100
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=configmaps")
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	warmUp(ctx, t, newRawClient(t, lp.Config()), []target{{path: path}})
	lpc := kubernetes.NewForConfigOrDie(lp.Config())
	list, err := lpc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn := stalledWatch(ctx, t, lp, path+"?watch=1&resourceVersion="+list.ResourceVersion+"&timeoutSeconds=600")
	stalledAt := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_watch_open", `resource="configmaps"`) == 1, nil
	})
	if err != nil {
		t.Fatal("the stalled client's watch never opened")
	}
	f := informers.NewSharedInformerFactoryWithOptions(lpc, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().ConfigMaps().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}

	// 40 configmaps of 256 KiB fill the stalled connection; then one small
	// configmap changes 1,100 times. want is every change as made.
	type change struct{ Type, Name, RV string }
	var want []change
	cs := cp.Clientset(framework.UserAdmin)
	pad := map[string]string{"pad": strings.Repeat("x", 256<<10)}
	for i := range big {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i)}, Data: pad}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, change{"ADDED", cm.Name, cm.ResourceVersion})
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, change{"ADDED", cm.Name, cm.ResourceVersion})
	for i := range small {
		patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, i)
		cm, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "small", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, change{"MODIFIED", cm.Name, cm.ResourceVersion})
	}
	last := want[len(want)-1].RV
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		o, ok, _ := inf.GetStore().GetByKey(ns + "/small")
		return ok && o.(*corev1.ConfigMap).ResourceVersion == last && len(inf.GetStore().List()) == big+1, nil
	})
	if err != nil {
		t.Fatalf("the informer did not get every change (%d configmaps, want %d and small at %s)", len(inf.GetStore().List()), big+1, last)
	}

	t.Logf("%d changes made in %v while the client read nothing", len(want), time.Since(stalledAt).Round(time.Millisecond))

	// The stalled client reads again, for at most a minute, with the
	// receive buffer a client has by default (through a 4 KiB window,
	// 10 MiB would take minutes).
	if err := conn.(*net.TCPConn).SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	readAt := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Not resp.Body.Close, which would read the watch to its end: closing
	// the connection (stalledWatch) ends it.
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	d := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
	var got []change
	for len(got) < len(want) {
		ev, err := d.Next()
		if err != nil {
			t.Fatalf("after %d of %d changes: %v", len(got), len(want), err)
		}
		switch ev.Type {
		case wire.Bookmark:
			continue
		case wire.Error:
			t.Fatalf("after %d of %d changes, an ERROR event: %s", len(got), len(want), ev.Object)
		}
		meta, err := wire.ExtractMeta(wire.JSON, ev.Object)
		if err != nil {
			t.Fatalf("event %d (%s): %v", len(got), ev.Type, err)
		}
		got = append(got, change{string(ev.Type), meta.Name, meta.ResourceVersion})
	}
	t.Logf("the stalled client read them in %v", time.Since(readAt).Round(time.Millisecond))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the stalled client's changes (-made +received):\n%s", diff)
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	for _, reason := range []string{"too_slow", "expired"} {
		if n := m.Sum("listproxy_watch_ended_total", `resource="configmaps"`, `reason="`+reason+`"`); n != 0 {
			t.Errorf("%v configmap watches ended as %s, want none", n, reason)
		}
	}
}
