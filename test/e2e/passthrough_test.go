package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

// The pass-through tests are the acceptance of listproxy's foundation:
// ordinary clients — kubectl, client-go watches and informers —
// work through listproxy as they work against the apiserver; large lists
// stream; an apiserver outage is reported as the apiserver would report
// it; and SIGTERM drains. Each test runs its own control plane.

// watchLatencyBound is the most a watch event may lag behind the write that
// caused it, measured from the moment the write call returns.
const watchLatencyBound = time.Second

// largeListObjects and largeListPayload size TestLargeListStreams: 12,500
// ConfigMaps of 5 KiB data each, about 69 MB as a JSON list. What is
// measured grows with the bytes, not the objects; the apiserver's cost of
// creating them grows with the objects.
const (
	largeListObjects = 12500
	largeListPayload = 5120
)

// TestKubectlThroughListproxy: kubectl pointed at listproxy (plain HTTP, no
// credentials) creates, applies, waits, reads, patches and deletes; and a
// chunked `kubectl get pods -A` through listproxy, answered from snapshots,
// returns exactly the items the apiserver returns.
func TestKubectlThroughListproxy(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	ctx := context.Background()
	dir := t.TempDir()
	viaLP := newKubectlRunner(t, cp, lp.URL)
	direct := newKubectlRunner(t, cp, "")
	admin := cp.Clientset(framework.UserAdmin)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	const ns = "kubectl-e2e"

	viaLP.run(t, "create", "namespace", ns)
	if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace created through listproxy is not in the apiserver: %v", err)
	}

	crdFile := writeManifest(t, dir, "crd.yaml", widgetCRDManifest)
	objectsFile := writeManifest(t, dir, "objects.yaml", objectsManifest)
	viaLP.run(t, "apply", "-f", crdFile)
	viaLP.run(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/widgets.demo.listproxy.io")
	viaLP.run(t, "apply", "-n", ns, "-f", objectsFile)

	got := viaLP.run(t, "get", "-n", ns, "pod/web", "configmap/settings", "widget/gizmo", "-o", "name")
	want := "pod/web\nconfigmap/settings\nwidget.demo.listproxy.io/gizmo\n"
	if got != want {
		t.Errorf("kubectl get -o name through listproxy:\n%s\nwant:\n%s", got, want)
	}
	if got := viaLP.run(t, "get", "-n", ns, "widgets", "-o", "jsonpath={.items[*].spec.color}"); got != "red" {
		t.Errorf("widget colors through listproxy = %q, want %q", got, "red")
	}

	viaLP.run(t, "patch", "-n", ns, "pod/web", "--type=merge", "-p", `{"metadata":{"labels":{"patched":"yes"}}}`)
	viaLP.run(t, "patch", "-n", ns, "widget/gizmo", "--type=merge", "-p", `{"spec":{"color":"blue"}}`)
	pod, err := admin.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get patched pod from the apiserver: %v", err)
	}
	if pod.Labels["patched"] != "yes" {
		t.Errorf("pod labels after kubectl patch through listproxy = %v, want patched=yes", pod.Labels)
	}
	widget, err := dyn.Resource(widgetGVR).Namespace(ns).Get(ctx, "gizmo", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get patched widget from the apiserver: %v", err)
	}
	if color, _, _ := unstructured.NestedString(widget.Object, "spec", "color"); color != "blue" {
		t.Errorf("widget color after kubectl patch through listproxy = %q, want blue", color)
	}

	// kubectl delete waits for the objects to be gone, with a watch.
	viaLP.run(t, "delete", "-n", ns, "pod/web", "configmap/settings", "widget/gizmo", "--timeout=60s")
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after kubectl delete through listproxy: err = %v, want NotFound", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap after kubectl delete through listproxy: err = %v, want NotFound", err)
	}
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Get(ctx, "gizmo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("widget after kubectl delete through listproxy: err = %v, want NotFound", err)
	}

	// A chunked list of 60 pods: 9 pages of 7, first a consistent read, then
	// continue tokens. listproxy must answer from snapshots, so that the
	// comparison is between listproxy and the apiserver, not the apiserver
	// and itself.
	seedWorld(t, cp, 3, 20, 0, 0)
	lpc := newRawClient(t, lp.Config())
	warmUp(ctx, t, lpc, []target{{path: "/api/v1/pods"}})
	waitServedFromSnapshot(ctx, t, lpc, "/api/v1/pods", url.Values{"limit": {"1"}})
	snapshotLists := func() float64 {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_lists_total", `resource="pods"`, `source="snapshot"`)
	}
	before := snapshotLists()
	fromLP := kubectlItemIDs(t, viaLP.run(t, "get", "pods", "-A", "-o", "json", "--chunk-size=7"))
	served := snapshotLists() - before
	fromAPI := kubectlItemIDs(t, direct.run(t, "get", "pods", "-A", "-o", "json", "--chunk-size=7"))
	if len(fromAPI) < 60 {
		t.Fatalf("apiserver lists %d pods, want at least 60", len(fromAPI))
	}
	if diff := cmp.Diff(fromAPI, fromLP); diff != "" {
		t.Errorf("kubectl get pods -A --chunk-size=7: listproxy differs from the apiserver (-want +got):\n%s", diff)
	}
	if pages := (len(fromAPI) + 6) / 7; served < float64(pages) {
		t.Errorf("listproxy answered %v LIST requests of pods from snapshots during the chunked get, want at least %d (one per page)", served, pages)
	}
	t.Logf("chunked get: %d pods, %v pages answered from snapshots", len(fromLP), served)
}

// TestWatchThroughListproxy: a watch through listproxy — `kubectl get -w`
// and a client-go watch — receives the event of a pod created directly on
// the apiserver within watchLatencyBound of the create call returning.
func TestWatchThroughListproxy(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "watch-e2e"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	admin := cp.Clientset(framework.UserAdmin)
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, "before", 0), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}

	// kubectl lists (printing pod/before), then watches from the list's
	// resourceVersion: anything created after the line appears is delivered.
	kubectlLines := newKubectlRunner(t, cp, lp.URL).stream(ctx, t, "get", "pods", "-n", ns, "-w", "-o", "name")
	if _, err := awaitLine(ctx, kubectlLines, "pod/before"); err != nil {
		t.Fatalf("kubectl get -w: %v", err)
	}

	// client-go: Watch returns once the response headers arrived, that is
	// once the apiserver has started the watch.
	lpClient := kubernetes.NewForConfigOrDie(lp.Config())
	list, err := lpClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods through listproxy: %v", err)
	}
	w, err := lpClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch pods through listproxy: %v", err)
	}
	defer w.Stop()
	clientGoAdded := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added && p.Name == "probe" {
				clientGoAdded <- time.Now()
				return
			}
		}
	}()

	if _, err := admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, "probe", 1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	created := time.Now()

	seen, err := awaitLine(ctx, kubectlLines, "pod/probe")
	if err != nil {
		t.Fatalf("kubectl get -w never printed pod/probe: %v", err)
	}
	kubectlLatency := seen.Sub(created)
	var clientGoLatency time.Duration
	select {
	case at := <-clientGoAdded:
		clientGoLatency = at.Sub(created)
	case <-ctx.Done():
		t.Fatal("client-go watch through listproxy never saw pod probe ADDED")
	}
	t.Logf("watch latency from create returning: kubectl %v, client-go %v", kubectlLatency, clientGoLatency)
	if kubectlLatency >= watchLatencyBound {
		t.Errorf("kubectl get -w through listproxy printed the new pod %v after its create returned, want < %v", kubectlLatency, watchLatencyBound)
	}
	if clientGoLatency >= watchLatencyBound {
		t.Errorf("client-go watch through listproxy delivered the new pod %v after its create returned, want < %v", clientGoLatency, watchLatencyBound)
	}
}

// TestInformerThroughListproxy: a typed pod informer (protobuf) and a
// metadata informer (PartialObjectMetadata, protobuf) on listproxy sync and then see creates,
// updates and deletes made directly on the apiserver — both as client-go
// v0.37 runs them (WatchListClient on: the initial state arrives as a
// streamed watch, passed through) and with WatchListClient off (the reflector
// pages through a resourceVersion=0 LIST, which listproxy answers from
// snapshots with its own continue tokens).
func TestInformerThroughListproxy(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp)
	ctx := context.Background()
	lpc := newRawClient(t, lp.Config())
	admin := cp.Clientset(framework.UserAdmin)

	for _, tc := range []struct {
		name      string
		watchList bool
	}{
		{name: "watch_list", watchList: true},
		{name: "list_then_watch", watchList: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, tc.watchList)
			ns := "informer-" + strings.ReplaceAll(tc.name, "_", "-")
			if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
				t.Fatal(err)
			}
			pods := make([]*corev1.Pod, 30)
			for i := range pods {
				pods[i] = newPod(ns, fmt.Sprintf("pod-%d", i), i)
			}
			if err := seed.Pods(ctx, admin, pods, seed.Options{Workers: 8}); err != nil {
				t.Fatalf("seeding: %v", err)
			}
			// Pages of 10: the reflector's pager must follow listproxy's
			// continue tokens (watch-list mode ignores the limit).
			tweak := func(o *metav1.ListOptions) {
				if !tc.watchList {
					o.Limit = 10
				}
			}
			if !tc.watchList {
				warmUp(ctx, t, lpc, []target{{path: "/api/v1/pods"}})
			}

			rec := &informerRequests{}
			cfg := lp.Config()
			cfg.WrapTransport = rec.wrap
			stop := make(chan struct{})

			typed := newInformerEvents()
			factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0,
				informers.WithNamespace(ns), informers.WithTweakListOptions(tweak))
			if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(typed.handler()); err != nil {
				t.Fatal(err)
			}
			meta := newInformerEvents()
			metaFactory := metadatainformer.NewFilteredSharedInformerFactory(metadata.NewForConfigOrDie(cfg), 0, ns, tweak)
			podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			if _, err := metaFactory.ForResource(podsGVR).Informer().AddEventHandler(meta.handler()); err != nil {
				t.Fatal(err)
			}
			factory.Start(stop)
			metaFactory.Start(stop)
			defer func() {
				close(stop)
				factory.Shutdown()
				metaFactory.Shutdown()
			}()
			syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
				if !ok {
					t.Fatalf("%v informer through listproxy did not sync", typ)
				}
			}
			for gvr, ok := range metaFactory.WaitForCacheSync(syncCtx.Done()) {
				if !ok {
					t.Fatalf("metadata informer for %v through listproxy did not sync", gvr)
				}
			}
			if n := len(factory.Core().V1().Pods().Informer().GetStore().ListKeys()); n != 30 {
				t.Errorf("typed informer synced %d pods, want 30", n)
			}
			if n := len(metaFactory.ForResource(podsGVR).Informer().GetStore().ListKeys()); n != 30 {
				t.Errorf("metadata informer synced %d pods, want 30", n)
			}

			if _, err := admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, "late", 99), metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod: %v", err)
			}
			typed.await(t, "add", "late")
			meta.await(t, "add", "late")
			if _, err := admin.CoreV1().Pods(ns).Patch(ctx, "late", types.MergePatchType, []byte(`{"metadata":{"labels":{"updated":"yes"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatalf("patch pod: %v", err)
			}
			typed.await(t, "update", "late updated=yes")
			if err := admin.CoreV1().Pods(ns).Delete(ctx, "late", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatalf("delete pod: %v", err)
			}
			typed.await(t, "delete", "late")

			lists := rec.lists()
			for _, l := range lists {
				q, _ := url.ParseQuery(l.query)
				t.Logf("informer LIST resourceVersion=%q limit=%s continue=%t Accept %q -> %d %s from %s",
					q.Get("resourceVersion"), q.Get("limit"), q.Has("continue"), l.accept, l.status, l.contentType, l.servedFrom)
			}
			t.Logf("informer requests: %d LIST, %d WATCH", len(lists), rec.watches.Load())
			if tc.watchList {
				return
			}
			// Both informers listed from snapshots, in protobuf, in one page:
			// at resourceVersion=0 the apiserver ignores limit, and so does
			// listproxy by default (--limit-for-resource-version-0), so the
			// reflector never switches to paginated relists. client-go's typed
			// clients ask for protobuf first.
			for _, informer := range []struct{ name, accept string }{
				{name: "typed", accept: "application/vnd.kubernetes.protobuf,"},
				{name: "metadata", accept: "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;"},
			} {
				pages := 0
				for _, l := range lists {
					if strings.HasPrefix(l.accept, informer.accept) && l.status == http.StatusOK &&
						l.servedFrom == "snapshot" && l.contentType == "application/vnd.kubernetes.protobuf" {
						pages++
					}
				}
				if pages != 1 {
					t.Errorf("%s informer: %d LIST pages answered from snapshots in protobuf, want exactly 1 (limit ignored at resourceVersion=0)", informer.name, pages)
				}
			}
		})
	}
}

// TestLargeListStreams: listproxy, run as its own process, answers a LIST of
// 12,500 ConfigMaps (~70 MB of JSON) from its snapshot — resourceVersion=0
// and a consistent read — without building a second copy of the response:
// its resident memory, and its Go heap allocations, grow by far less than the
// response while it streams. The same holds for a LIST passed through to the
// apiserver. The snapshot itself is in memory before the request (that is
// the cache); what is measured is the growth over that.
func TestLargeListStreams(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	const ns = "large"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	seedLargeConfigMaps(t, cp, ns, largeListObjects)
	t.Logf("created %d ConfigMaps of %d bytes in %v", largeListObjects, largeListPayload, time.Since(begin).Round(time.Millisecond))

	lp := buildAndStartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, &rest.Config{Host: lp.URL})
	begin = time.Now()
	path := "/api/v1/configmaps"
	waitServedFromSnapshot(ctx, t, lpc, path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}})
	waitServedFromSnapshot(ctx, t, lpc, path, url.Values{"limit": {"1"}})
	t.Logf("listproxy synced its snapshot of configmaps in %v", time.Since(begin).Round(time.Millisecond))

	for _, tc := range []struct {
		name       string
		query      url.Values
		servedFrom string
	}{
		{name: "rv_0", query: url.Values{"resourceVersion": {"0"}}, servedFrom: "snapshot"},
		{name: "rv_unset", query: nil, servedFrom: "snapshot"},
		// A parameter listproxy does not interpret: passed through, the
		// apiserver's streamed answer must stream through listproxy too.
		{name: "passed_through", query: url.Values{"pretty": {"false"}}, servedFrom: "apiserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const alloc = "go_memstats_alloc_bytes_total"
			allocBefore := framework.Scrape(t, nil, lp.URL+"/metrics").Sum(alloc)
			m := measureStreamingList(t, lp.Process.Pid(), lp.URL+path, tc.query)
			allocated := int64(framework.Scrape(t, nil, lp.URL+"/metrics").Sum(alloc) - allocBefore)
			t.Logf("%s: %d bytes from %s in %v; listproxy RSS %d MiB before, peak %d MiB (sampled) / %d MiB (VmHWM), growth %d MiB; Go heap allocations during the request %d MiB",
				tc.name, m.bytes, m.servedFrom, m.duration.Round(time.Millisecond),
				m.rssBefore>>20, m.rssPeakSampled>>20, m.rssPeakHWM>>20, m.growth()>>20, allocated>>20)
			if m.status != http.StatusOK {
				t.Fatalf("LIST configmaps: HTTP %d", m.status)
			}
			if m.servedFrom != tc.servedFrom {
				t.Errorf("LIST configmaps was answered by %q, want %q", m.servedFrom, tc.servedFrom)
			}
			if min := int64(largeListObjects * largeListPayload); m.bytes < min {
				t.Errorf("LIST configmaps returned %d bytes, want at least %d (%d objects of %d bytes)", m.bytes, min, largeListObjects, largeListPayload)
			}
			if !bytes.HasPrefix(m.head, []byte(`{"kind":"ConfigMapList"`)) || !bytes.HasSuffix(m.tail, []byte("]}\n")) {
				t.Errorf("LIST configmaps is not one complete ConfigMapList: starts %q, ends %q", m.head, m.tail)
			}
			if m.growth() >= m.bytes/2 {
				t.Errorf("listproxy's RSS grew by %d bytes while streaming a %d-byte response, want < half of it: the response is buffered, not streamed", m.growth(), m.bytes)
			}
			// RSS alone could hide a buffer that reuses heap freed after the
			// initial sync; the allocation counter cannot.
			if allocated >= m.bytes/2 {
				t.Errorf("listproxy allocated %d bytes while streaming a %d-byte response, want < half of it: the response is copied, not streamed from the snapshot's bytes", allocated, m.bytes)
			}
		})
	}
}

// TestAPIServerDownAndBack: while the apiserver is down, a request through
// listproxy gets the apiserver's kind of answer — 503 with a Status — and
// listproxy stays alive (/healthz 200) but not ready (/readyz 503); once the
// apiserver is back, requests succeed again without restarting listproxy.
func TestAPIServerDownAndBack(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lpc := newRawClient(t, lp.Config())
	const path = "/api/v1/namespaces/default"
	if code, _, body, err := lpc.get(ctx, path, nil, acceptJSON); err != nil || code != http.StatusOK {
		t.Fatalf("GET %s through listproxy before the outage: %d %s %v", path, code, body, err)
	}
	// A snapshot store that is fed by a watch before the outage.
	const cmPath = "/api/v1/namespaces/default/configmaps"
	rv0 := url.Values{"resourceVersion": {"0"}}
	waitServedFromSnapshot(ctx, t, lpc, cmPath, rv0)

	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("stop apiserver: %v", err)
	}
	code, hdr, body, err := lpc.get(ctx, path, nil, acceptJSON)
	if err != nil {
		t.Fatalf("GET %s through listproxy with the apiserver down: %v", path, err)
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("GET %s with the apiserver down: HTTP %d, want 503", path, code)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("503 Content-Type = %q, want application/json", ct)
	}
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("503 body is not a Status: %v\n%s", err, body)
	}
	if status.Kind != "Status" || status.Status != metav1.StatusFailure || status.Code != http.StatusServiceUnavailable {
		t.Errorf("503 body: kind %q, status %q, code %d; want Status, Failure, 503\n%s", status.Kind, status.Status, status.Code, body)
	}
	t.Logf("with the apiserver down: %d %s", code, bytes.TrimSpace(body))

	if code, _ := httpGetCode(t, lp.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with the apiserver down: %d, want 200", code)
	}
	// Readiness is cached for a second: poll until it notices.
	awaitHTTPStatus(ctx, t, lp.URL+"/readyz", http.StatusServiceUnavailable)

	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("start apiserver: %v", err)
	}
	awaitHTTPStatus(ctx, t, lp.URL+path, http.StatusOK)
	awaitHTTPStatus(ctx, t, lp.URL+"/readyz", http.StatusOK)
	lpClient := kubernetes.NewForConfigOrDie(lp.Config())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-outage"}, Data: map[string]string{"k": "v"}}
	if _, err := lpClient.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Errorf("create through listproxy after the apiserver came back: %v", err)
	}
	if _, err := lpClient.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list through listproxy after the apiserver came back: %v", err)
	}
	// The snapshot store's feed resumed: the new object appears in a
	// resourceVersion=0 list answered from the snapshot.
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, hdr, body, err := lpc.get(ctx, cmPath, rv0, acceptJSON)
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("%d from %s", code, hdr.Get("X-Listproxy-Served-From"))
		return code == http.StatusOK && hdr.Get("X-Listproxy-Served-From") == "snapshot" && bytes.Contains(body, []byte(`"name":"after-outage"`)), nil
	})
	if err != nil {
		t.Errorf("the snapshot of configmaps never showed an object created after the outage (last: %s): %v", last, err)
	}
}

// TestSIGTERMDrains: on SIGTERM the listproxy binary first fails /readyz
// while still serving (--shutdown-delay), then ends watches cleanly, lets an
// ordinary request that is still in flight finish, and exits with code 0.
func TestSIGTERMDrains(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	const shutdownDelay, gracePeriod = time.Second, 30 * time.Second
	lp := buildAndStartListproxy(t, cp, "--shutdown-delay="+shutdownDelay.String(), "--shutdown-grace-period="+gracePeriod.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{}

	// A watch: its response headers have arrived, so it is established.
	watchResp, err := client.Get(lp.URL + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatalf("watch through listproxy: %v", err)
	}
	if watchResp.StatusCode != http.StatusOK {
		t.Fatalf("watch through listproxy: HTTP %d", watchResp.StatusCode)
	}
	watchEnded := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, watchResp.Body)
		watchResp.Body.Close()
		watchEnded <- err
	}()

	// An ordinary request that takes seconds: a LIST at a resourceVersion
	// far in the future, which the apiserver holds for 3s before answering
	// 504 "Too large resource version".
	list, err := cp.Clientset(framework.UserAdmin).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	slowURL := fmt.Sprintf("%s/api/v1/namespaces/default/configmaps?resourceVersion=%d&resourceVersionMatch=NotOlderThan", lp.URL, rv+1_000_000)
	sent := make(chan struct{})
	type answer struct {
		code int
		body []byte
		err  error
		at   time.Time
	}
	slow := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) },
		}), http.MethodGet, slowURL, nil)
		req.Header.Set("Accept", acceptJSON)
		resp, err := client.Do(req)
		if err != nil {
			slow <- answer{err: err, at: time.Now()}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- answer{code: resp.StatusCode, body: body, err: err, at: time.Now()}
	}()
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatal("the slow request was never sent")
	}

	sigterm := time.Now()
	if err := syscall.Kill(lp.Process.Pid(), syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	awaitHTTPStatus(ctx, t, lp.URL+"/readyz", http.StatusServiceUnavailable)
	notReady := time.Now()
	if exited, _ := lp.Process.Exited(); exited {
		t.Fatal("listproxy exited before /readyz failed")
	}
	if code, _ := httpGetCode(t, lp.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz during the shutdown delay: %d, want 200", code)
	}

	// Watches end when the shutdown delay is over and the server stops
	// accepting connections.
	var shutdownBegan time.Time
	select {
	case err := <-watchEnded:
		shutdownBegan = time.Now()
		if err != nil {
			t.Errorf("watch ended with %v, want a clean end of stream", err)
		}
		t.Logf("watch ended cleanly %v after SIGTERM", shutdownBegan.Sub(sigterm).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("watch did not end on shutdown")
	}

	var a answer
	select {
	case a = <-slow:
	case <-ctx.Done():
		t.Fatal("the in-flight request never completed")
	}
	if a.err != nil {
		t.Fatalf("in-flight request failed during shutdown: %v", a.err)
	}
	var status metav1.Status
	if err := json.Unmarshal(a.body, &status); err != nil || a.code != http.StatusGatewayTimeout || status.Code != http.StatusGatewayTimeout {
		t.Errorf("in-flight request: HTTP %d %s, want the apiserver's 504 Status (decode error %v)", a.code, a.body, err)
	}
	if !a.at.After(shutdownBegan) {
		t.Errorf("the in-flight request completed %v after SIGTERM, before shutdown began; it proves nothing about draining", a.at.Sub(sigterm))
	}
	t.Logf("in-flight request completed %v after SIGTERM: %d %s", a.at.Sub(sigterm).Round(time.Millisecond), a.code, strings.TrimSpace(status.Message))

	select {
	case <-lp.Process.Done():
	case <-time.After(shutdownDelay + gracePeriod + 10*time.Second):
		t.Fatalf("listproxy did not exit within shutdown delay + grace period after SIGTERM")
	}
	exitedAt := time.Now()
	if _, err := lp.Process.Exited(); err != nil {
		t.Errorf("listproxy exit after SIGTERM: %v, want code 0\n%s", err, framework.LogTail(lp.Process.LogFile, 20))
	}
	if exitedAt.Before(a.at) {
		t.Errorf("listproxy exited before the in-flight request completed")
	}
	t.Logf("SIGTERM -> /readyz 503 after %v, exit 0 after %v",
		notReady.Sub(sigterm).Round(time.Millisecond), exitedAt.Sub(sigterm).Round(time.Millisecond))
}

// Manifests applied by TestKubectlThroughListproxy. The namespace has no
// controllers, so the ServiceAccount admission plugin needs "default".
const (
	widgetCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.listproxy.io
spec:
  group: demo.listproxy.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              size: {type: integer}
`
	objectsManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: default}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - {name: c, image: registry.k8s.io/pause:3.10}
---
apiVersion: demo.listproxy.io/v1
kind: Widget
metadata: {name: gizmo}
spec: {color: red, size: 3}
`
)

// kubectlRunner runs the pinned kubectl against one kubeconfig, with a private
// discovery cache.
type kubectlRunner struct {
	path string
	base []string
}

// newKubectlRunner returns kubectl for server (listproxy's URL, plain HTTP, no
// credentials), or for the apiserver as admin when server is "".
func newKubectlRunner(t *testing.T, cp *framework.ControlPlane, server string) kubectlRunner {
	t.Helper()
	path, err := framework.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if server == "" {
		err = cp.WriteKubeconfig(kubeconfig, "", framework.UserAdmin, false)
	} else {
		err = cp.WriteKubeconfig(kubeconfig, server, "", true)
	}
	if err != nil {
		t.Fatal(err)
	}
	return kubectlRunner{path: path, base: []string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(dir, "cache")}}
}

// run runs kubectl to completion and returns its stdout; it fails the test
// if kubectl fails.
func (k kubectlRunner) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, k.path, append(append([]string(nil), k.base...), args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}

// timedLine is a line of output and when it was read.
type timedLine struct {
	text string
	at   time.Time
}

// stream starts kubectl and returns its stdout lines as they are written;
// kubectl is killed when the test ends.
func (k kubectlRunner) stream(ctx context.Context, t *testing.T, args ...string) <-chan timedLine {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, k.path, append(append([]string(nil), k.base...), args...)...)
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	lines := make(chan timedLine, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- timedLine{text: sc.Text(), at: time.Now()}
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kubectl %s stderr:\n%s", strings.Join(args, " "), stderr.Bytes())
		}
	})
	return lines
}

// awaitLine reads lines until want and returns when it was read.
func awaitLine(ctx context.Context, lines <-chan timedLine, want string) (time.Time, error) {
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return time.Time{}, fmt.Errorf("output ended before %q", want)
			}
			if l.text == want {
				return l.at, nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no line %q: %w", want, ctx.Err())
		}
	}
}

// kubectlItemIDs returns namespace/name@resourceVersion of the items of a
// `kubectl get -o json` list, in order.
func kubectlItemIDs(t *testing.T, out string) []string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decode kubectl output: %v", err)
	}
	var ids []string
	for _, it := range list.Items {
		ids = append(ids, it.Metadata.Namespace+"/"+it.Metadata.Name+"@"+it.Metadata.ResourceVersion)
	}
	return ids
}

func writeManifest(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitServedFromSnapshot polls a LIST through listproxy until listproxy
// answers it from a snapshot: stores start on first demand and answer once
// synced (and, for consistent reads, once freshness can be proven).
func waitServedFromSnapshot(ctx context.Context, t *testing.T, lpc rawClient, path string, q url.Values) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, hdr, _, err := lpc.get(ctx, path, q, acceptJSON)
		return err == nil && code == http.StatusOK && hdr.Get("X-Listproxy-Served-From") == "snapshot", nil
	})
	if err != nil {
		t.Fatalf("LIST %s?%s never answered from a snapshot: %v", path, q.Encode(), err)
	}
}

// informerEvents collects an informer's notifications as "verb name[ label=value]"
// and lets a test wait for one.
type informerEvents struct {
	ch chan string
}

func newInformerEvents() *informerEvents { return &informerEvents{ch: make(chan string, 1000)} }

func (l *informerEvents) handler() cache.ResourceEventHandler {
	describe := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, err := apimeta.Accessor(obj)
		if err != nil {
			return fmt.Sprintf("?%T", obj)
		}
		return m.GetName()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { l.ch <- "add " + describe(obj) },
		UpdateFunc: func(_, obj any) {
			s := "update " + describe(obj)
			if m, err := apimeta.Accessor(obj); err == nil && m.GetLabels()["updated"] != "" {
				s += " updated=" + m.GetLabels()["updated"]
			}
			l.ch <- s
		},
		DeleteFunc: func(obj any) { l.ch <- "delete " + describe(obj) },
	}
}

// await waits up to 10s for the notification verb+" "+what.
func (l *informerEvents) await(t *testing.T, verb, what string) {
	t.Helper()
	want := verb + " " + what
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-l.ch:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("informer through listproxy: no %q notification within 10s", want)
		}
	}
}

// informerRequests records the LIST requests a client makes and who answered.
type informerRequests struct {
	mu      sync.Mutex
	records []informerList // guarded by mu
	watches atomic.Int32
}

type informerList struct {
	query, accept, contentType, servedFrom string
	status                                 int
}

func (r *informerRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return &recordingTransport{rt: rt, rec: r}
}

// recordingTransport records into rec what passes through rt.
type recordingTransport struct {
	rt  http.RoundTripper
	rec *informerRequests
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	r := t.rec
	if req.Method != http.MethodGet || err != nil {
		return resp, err
	}
	if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
		r.watches.Add(1)
		return resp, err
	}
	r.mu.Lock()
	r.records = append(r.records, informerList{
		query: req.URL.RawQuery, accept: req.Header.Get("Accept"),
		contentType: resp.Header.Get("Content-Type"), servedFrom: resp.Header.Get("X-Listproxy-Served-From"),
		status: resp.StatusCode,
	})
	r.mu.Unlock()
	return resp, err
}

func (r *informerRequests) lists() []informerList {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]informerList(nil), r.records...)
}

// seedLargeConfigMaps creates n ConfigMaps of largeListPayload bytes in ns,
// concurrently, in protobuf and without client-side rate limiting.
func seedLargeConfigMaps(t *testing.T, cp *framework.ControlPlane, ns string, n int) {
	t.Helper()
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS = -1
	client := kubernetes.NewForConfigOrDie(cfg)
	payload := strings.Repeat("x", largeListPayload)
	ctx := context.Background()
	cms := make([]*corev1.ConfigMap, n)
	for i := range cms {
		cms[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"payload": payload}}
	}
	if err := seed.ConfigMaps(ctx, client, cms, seed.Options{Workers: 32}); err != nil {
		t.Fatalf("seeding: %v", err)
	}
}

// listproxyChild is the listproxy binary running as a child process.
type listproxyChild struct {
	Process *framework.Process
	URL     string
}

// buildAndStartListproxy builds cmd/listproxy, runs it in front of cp with
// admin credentials and args, and waits until /readyz answers 200. It is
// stopped when the test ends.
func buildAndStartListproxy(t *testing.T, cp *framework.ControlPlane, args ...string) *listproxyChild {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found on PATH to build listproxy: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "listproxy")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/listproxy")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/listproxy: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "upstream.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, "", framework.UserAdmin, false); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	logFile := filepath.Join(dir, "listproxy.log")
	p, err := framework.StartProcess("listproxy", bin, append([]string{"--kubeconfig=" + kubeconfig, "--listen-address=" + addr}, args...), logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop listproxy: %v", err)
		}
		if t.Failed() {
			t.Logf("==== last lines of %s:\n%s", logFile, framework.LogTail(logFile, 40))
		}
	})
	lp := &listproxyChild{Process: p, URL: "http://" + addr}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			if err == nil { // exit status 0: there is no error to wrap
				return false, errors.New("listproxy exited: <nil>")
			}
			return false, fmt.Errorf("listproxy exited: %w", err)
		}
		resp, err := http.Get(lp.URL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("listproxy binary not ready: %v\n%s", err, framework.LogTail(logFile, 40))
	}
	return lp
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func httpGetCode(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// awaitHTTPStatus polls u until it answers code.
func awaitHTTPStatus(ctx context.Context, t *testing.T, u string, code int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == code, nil
	})
	if err != nil {
		t.Fatalf("GET %s never answered %d (last: %s): %v", u, code, last, err)
	}
}

// streamMeasurement is one LIST read to the end, with listproxy's memory.
type streamMeasurement struct {
	status         int
	servedFrom     string
	bytes          int64
	head, tail     []byte
	duration       time.Duration
	rssBefore      int64
	rssPeakSampled int64 // highest VmRSS seen by polling every 10ms
	rssPeakHWM     int64 // VmHWM after resetting it before the request; 0 if unsupported
}

// growth is the peak RSS during the request over the RSS before it.
func (m streamMeasurement) growth() int64 {
	return max(m.rssPeakSampled, m.rssPeakHWM) - m.rssBefore
}

// measureStreamingList GETs u as JSON without compression, reads the body to the end
// counting bytes, and samples the resident memory of process pid meanwhile.
func measureStreamingList(t *testing.T, pid int, u string, q url.Values) streamMeasurement {
	t.Helper()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var m streamMeasurement
	// Writing 5 to clear_refs resets VmHWM to the current RSS, so that VmHWM
	// afterwards is the exact peak during the request.
	hwm := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	var err error
	if m.rssBefore, err = procStatusField(pid, "VmRSS"); err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	peak.Store(m.rssBefore)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss, err := procStatusField(pid, "VmRSS"); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()

	begin := time.Now()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", acceptJSON)
	// An explicit Accept-Encoding keeps net/http from asking for gzip.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		close(done)
		t.Fatalf("LIST %s: %v", u, err)
	}
	m.status = resp.StatusCode
	m.servedFrom = resp.Header.Get("X-Listproxy-Served-From")
	cw := &byteCounter{}
	_, err = io.Copy(cw, resp.Body)
	resp.Body.Close()
	m.duration = time.Since(begin)
	close(done)
	<-sampled
	if err != nil {
		t.Fatalf("read LIST %s: %v", u, err)
	}
	m.bytes, m.head, m.tail = cw.n, cw.head, cw.tail
	if rss, err := procStatusField(pid, "VmRSS"); err == nil && rss > peak.Load() {
		peak.Store(rss)
	}
	m.rssPeakSampled = peak.Load()
	if hwm {
		if m.rssPeakHWM, err = procStatusField(pid, "VmHWM"); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// byteCounter counts bytes and keeps the first and last 64.
type byteCounter struct {
	n          int64
	head, tail []byte
}

func (w *byteCounter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if len(w.head) < 64 {
		w.head = append(w.head, p[:min(len(p), 64-len(w.head))]...)
	}
	w.tail = append(w.tail, p[max(0, len(p)-64):]...)
	w.tail = w.tail[max(0, len(w.tail)-64):]
	return len(p), nil
}

// procStatusField reads a "kB" field of /proc/PID/status, in bytes.
func procStatusField(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: unexpected %q", pid, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb << 10, err
	}
	return 0, errors.New("/proc/" + strconv.Itoa(pid) + "/status has no " + field)
}
