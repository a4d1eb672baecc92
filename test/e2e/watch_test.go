package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/consistencydetector"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// Accept headers of watches per format: metadata watches ask for
// PartialObjectMetadata (singular), as client-go's metadata client does.
var watchAccept = map[wire.Format]string{
	wire.JSON:         "application/json",
	wire.Protobuf:     "application/vnd.kubernetes.protobuf",
	wire.MetaJSON:     "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
	wire.MetaProtobuf: "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
}

// frame is one raw watch event as sent, its decoded type and
// resourceVersion (the object's, or the bookmark's), and whether it is the
// initial-events-end bookmark.
type frame struct {
	typ wire.EventType
	rv  string
	raw []byte
	end bool
}

// frameReader splits a watch body into raw frames: lines for JSON,
// length-prefixed frames for protobuf.
type frameReader struct {
	format wire.Format
	br     *bufio.Reader
}

func (r *frameReader) next() (frame, error) {
	var raw []byte
	if r.format.IsProtobuf() {
		var hdr [4]byte
		if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
			return frame{}, err
		}
		raw = make([]byte, 4+binary.BigEndian.Uint32(hdr[:]))
		copy(raw, hdr[:])
		if _, err := io.ReadFull(r.br, raw[4:]); err != nil {
			return frame{}, err
		}
	} else {
		line, err := r.br.ReadBytes('\n')
		if err != nil {
			return frame{}, err
		}
		raw = line
	}
	d := wire.NewWatchDecoder(r.format, io.NopCloser(strings.NewReader(string(raw))), wire.WatchOptions{})
	ev, err := d.Next()
	if err != nil {
		return frame{}, fmt.Errorf("decode frame %q: %w", raw, err)
	}
	return frame{typ: ev.Type, rv: ev.ResourceVersion, raw: raw, end: ev.InitialEventsEnd}, nil
}

// openWatch starts a watch and returns its frames; the body closes with ctx.
func openWatch(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values, f wire.Format) (*frameReader, http.Header) {
	t.Helper()
	r, hdr, refusal := openWatchOrRefusal(ctx, t, c, path, q, f)
	if r == nil {
		t.Fatalf("watch %s %v: %s", path, f, refusal)
	}
	return r, hdr
}

// openWatchOrRefusal starts a watch; a response other than 200 is returned
// as its status line and body instead of frames.
func openWatchOrRefusal(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values, f wire.Format) (*frameReader, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", watchAccept[f])
	req.Header.Set("User-Agent", "listproxy-e2e")
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, nil, fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	context.AfterFunc(ctx, func() { resp.Body.Close() })
	hdr := resp.Header.Clone()
	if resp.Uncompressed {
		// The transport asked for gzip and removed Content-Encoding.
		hdr.Set("Content-Encoding", "gzip")
	}
	return &frameReader{format: f, br: bufio.NewReaderSize(resp.Body, 64<<10)}, hdr, ""
}

// initialFrames reads frames up to and including the initial-events-end
// bookmark and returns the ADDED ones.
func initialFrames(t *testing.T, r *frameReader) []frame {
	t.Helper()
	added, _ := initialFramesRV(t, r)
	return added
}

// initialFramesRV is initialFrames that also returns the initial-events-end
// bookmark's resourceVersion.
func initialFramesRV(t *testing.T, r *frameReader) ([]frame, string) {
	t.Helper()
	added, end := framesToInitialEnd(t, r)
	return added, end.rv
}

// nextEvents reads n frames that are not bookmarks.
func nextEvents(r *frameReader, n int) ([]frame, error) {
	var out []frame
	for len(out) < n {
		fr, err := r.next()
		if err != nil {
			return out, err
		}
		if fr.typ != wire.Bookmark {
			out = append(out, fr)
		}
	}
	return out, nil
}

// TestWatchDifferential sends the same watch-list to the apiserver and to
// listproxy, per format and with a label selector: the initial objects and
// then the events of the same writes must be byte-identical (bookmarks
// excepted: their timing is each server's own). An apiserver whose WatchList
// feature is off (before 1.34) refuses the watch-list, which listproxy
// serves; then its initial objects must equal the apiserver's LIST at the
// end bookmark's resourceVersion, framed as the apiserver frames watch
// events, and its events the apiserver's watch from that resourceVersion.
func TestWatchDifferential(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	createWidgetCRD(t, cp.AdminConfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "watchdiff"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	for i := range 6 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("pod-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, newWidget(ns, fmt.Sprintf("widget-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())
	apic := newRawClient(t, cp.AdminConfig)
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	widgetsPath := "/apis/demo.listproxy.io/v1/namespaces/" + ns + "/widgets"
	warmUp(ctx, t, lpc, []target{{path: podsPath}, {path: widgetsPath, custom: true}})

	type watchPair struct {
		name     string
		lp, api  *frameReader
		isWidget bool
	}
	var pairs []watchPair
	q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "labelSelector": {"app=a"}, "timeoutSeconds": {"120"}}
	for _, f := range wire.Formats {
		for _, widget := range []bool{false, true} {
			if widget && f == wire.Protobuf {
				continue // custom resources have no protobuf
			}
			path := podsPath
			if widget {
				path = widgetsPath
			}
			name := fmt.Sprintf("%s/%v", path, f)
			lpr, hdr := openWatch(ctx, t, lpc, path, q, f)
			if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
				t.Fatalf("%s: served from %q, want %q", name, got, httpapi.SourceSnapshot)
			}
			lpInit, lpRV := initialFramesRV(t, lpr)
			var apiInit []frame
			apir, apiHdr, refusal := openWatchOrRefusal(ctx, t, apic, path, q, f)
			if apir != nil {
				apiInit = initialFrames(t, apir)
			} else {
				if watchListServedBy(t, cp) {
					t.Fatalf("%s: apiserver refused the watch-list: %s", name, refusal)
				}
				if !strings.Contains(refusal, "422 ") || !strings.Contains(refusal, "sendInitialEvents") {
					t.Fatalf("%s: apiserver without WatchList answered %s, want its 422 on sendInitialEvents", name, refusal)
				}
				t.Logf("%s: the apiserver refuses watch-lists (%.60s); comparing with its LIST and watch at resourceVersion %s", name, refusal, lpRV)
				typ := wire.ObjectType{GVK: corev1.SchemeGroupVersion.WithKind("Pod")}
				if widget {
					typ = wire.ObjectType{GVK: widgetGVR.GroupVersion().WithKind("Widget"), Custom: true}
				}
				apiInit = listAsWatchFrames(ctx, t, apic, path, q.Get("labelSelector"), lpRV, f, typ)
				apir, apiHdr = openWatch(ctx, t, apic, path, url.Values{"watch": {"1"}, "resourceVersion": {lpRV},
					"allowWatchBookmarks": {"true"}, "labelSelector": {q.Get("labelSelector")}, "timeoutSeconds": {"120"}}, f)
			}
			for _, h := range []string{"Content-Type", "Content-Encoding", "Cache-Control"} {
				if hdr.Get(h) != apiHdr.Get(h) {
					t.Errorf("%s: %s %q, apiserver %q", name, h, hdr.Get(h), apiHdr.Get(h))
				}
			}
			if len(lpInit) != len(apiInit) || len(apiInit) == 0 {
				t.Fatalf("%s: %d initial objects, apiserver %d", name, len(lpInit), len(apiInit))
			}
			for i := range apiInit {
				if string(lpInit[i].raw) != string(apiInit[i].raw) {
					t.Errorf("%s: initial event %d differs\nlistproxy: %q\napiserver: %q", name, i, lpInit[i].raw, apiInit[i].raw)
				}
			}
			pairs = append(pairs, watchPair{name: name, lp: lpr, api: apir, isWidget: widget})
		}
	}

	// Writes: a new matching object, one that stops matching (DELETED),
	// one that starts matching (ADDED), one that keeps matching (MODIFIED),
	// and a deletion. pod-0 and widget-0 are app=a, pod-1 and widget-1 app=b.
	patch := func(res string, name, body string) {
		t.Helper()
		var err error
		if res == "pods" {
			_, err = cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		} else {
			_, err = dyn.Resource(widgetGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "pod-new", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, newWidget(ns, "widget-new", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"pods", "widgets"} {
		prefix := strings.TrimSuffix(res, "s")
		patch(res, prefix+"-0", `{"metadata":{"labels":{"app":"b"}}}`)
		patch(res, prefix+"-1", `{"metadata":{"labels":{"app":"a"}}}`)
		patch(res, prefix+"-3", `{"metadata":{"annotations":{"touched":"yes"}}}`)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "pod-3", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(widgetGVR).Namespace(ns).Delete(ctx, "widget-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Per watch: ADDED new, DELETED -0, ADDED -1, MODIFIED -3, and the
	// deletion (pods: a MODIFIED setting deletionTimestamp, then DELETED).
	for _, p := range pairs {
		n := 5
		if !p.isWidget {
			n = 6
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		stop := context.AfterFunc(rctx, cancel)
		lpEv, lpErr := nextEvents(p.lp, n)
		apiEv, apiErr := nextEvents(p.api, n)
		stop()
		rcancel()
		if lpErr != nil || apiErr != nil {
			t.Fatalf("%s: reading events: listproxy %v (%d), apiserver %v (%d)", p.name, lpErr, len(lpEv), apiErr, len(apiEv))
		}
		for i := range apiEv {
			if string(lpEv[i].raw) != string(apiEv[i].raw) {
				t.Errorf("%s: event %d differs\nlistproxy: %s %q\napiserver: %s %q", p.name, i, lpEv[i].typ, lpEv[i].raw, apiEv[i].typ, apiEv[i].raw)
			}
		}
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_served_total"); got != float64(len(pairs)) {
		t.Errorf("listproxy_watch_served_total = %v, want %d", got, len(pairs))
	}
}

// watchListServedBy reports whether cp's apiserver serves watch-lists
// itself: its WatchList feature is on by default from 1.34 (and in 1.32).
func watchListServedBy(t *testing.T, cp *framework.ControlPlane) bool {
	t.Helper()
	v, err := cp.Clientset(framework.UserAdmin).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		t.Fatalf("apiserver minor version %q: %v", v.Minor, err)
	}
	watchList, _, _ := releaseGates(minor)
	return watchList
}

// listAsWatchFrames lists path with labelSelector at exactly rv from c in
// format f and returns each item as the ADDED watch frame the apiserver
// would send for it.
func listAsWatchFrames(ctx context.Context, t *testing.T, c rawClient, path, labelSelector, rv string, f wire.Format, typ wire.ObjectType) []frame {
	t.Helper()
	q := url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}, "labelSelector": {labelSelector}}
	code, _, body, err := c.get(ctx, path, q, formatAccept[f])
	if err != nil || code != http.StatusOK {
		t.Fatalf("list %s at %s: %d %v %s", path, rv, code, err, body)
	}
	var out []frame
	if _, err := wire.DecodeList(f, bytes.NewReader(body), func(item []byte) error {
		out = append(out, frame{typ: wire.Added, raw: wire.AppendWatchEvent(nil, f, wire.Added, typ, item)})
		return nil
	}); err != nil {
		t.Fatalf("decode list %s at %s: %v", path, rv, err)
	}
	return out
}

// TestWatchListInformers runs client-go informers with their defaults
// (watch-list on) and the watch-list consistency detector through
// listproxy while objects change; once the writes stop, every informer's
// store must equal a LIST from the apiserver, and listproxy's metrics must
// show that it served the watch-lists and the streams.
func TestWatchListInformers(t *testing.T) {
	checkWatchListInformers(t, true)
}

// TestWatchListInformersWithoutEtcd is TestWatchListInformers with
// listproxy given no etcd address: the informers' consistent watch-lists
// are proven fresh through the apiserver and served from snapshots.
func TestWatchListInformersWithoutEtcd(t *testing.T) {
	checkWatchListInformers(t, false)
}

// checkWatchListInformers is TestWatchListInformers, with listproxy given
// the etcd address or not.
func checkWatchListInformers(t *testing.T, withEtcd bool) {
	// What KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true does at process
	// start: after each watch-list the reflector lists at the bookmark's
	// resourceVersion (Exact) and panics on any difference.
	defer consistencydetector.SetDataConsistencyDetectionForWatchListEnabledForTest(true)()

	cp := framework.Start(t, framework.ControlPlaneConfig{})
	createWidgetCRD(t, cp.AdminConfig)
	w := seedWorld(t, cp, 3, 30, 20, 4)
	args := []string{"--serve-watches"}
	if withEtcd {
		args = append(args, "--etcd-servers="+cp.EtcdEndpoint)
	}
	lp := framework.StartListproxy(t, cp, args...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lpc := newRawClient(t, lp.Config())
	warmPods(ctx, t, lpc, wire.Protobuf, wire.MetaProtobuf)
	warmUp(ctx, t, lpc, []target{{path: "/apis/demo.listproxy.io/v1/widgets", custom: true}})

	protoCfg := rest.CopyConfig(lp.Config())
	protoCfg.ContentType = runtime.ContentTypeProtobuf
	protoCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	typed := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(protoCfg), 0)
	selected := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(protoCfg), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=a" }))
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(lp.Config()), 0)
	metaFactory := metadatainformer.NewSharedInformerFactory(metadata.NewForConfigOrDie(lp.Config()), 0)
	podInformer := typed.Core().V1().Pods().Informer()
	selectedInformer := selected.Core().V1().Pods().Informer()
	widgetInformer := dyn.ForResource(widgetGVR).Informer()
	metaInformer := metaFactory.ForResource(corev1Pods).Informer()

	// Writes start before the informers and go on while they sync.
	writeCtx, stopWrites := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for i := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			w.churn(writeCtx, 20, rand.New(rand.NewPCG(uint64(i), 11)))
		}()
	}
	writers.Add(1)
	go func() {
		defer writers.Done()
		widgetChurn(writeCtx, t, w)
	}()

	for _, f := range []interface{ Start(<-chan struct{}) }{typed, selected, dyn, metaFactory} {
		f.Start(ctx.Done())
	}
	for name, inf := range map[string]cache.SharedIndexInformer{"pods": podInformer, "pods app=a": selectedInformer, "widgets": widgetInformer, "pods metadata": metaInformer} {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("%s informer never synced", name)
		}
	}
	// Writes go on for a while after sync, so that the streams carry them.
	timer := time.NewTimer(5 * time.Second)
	<-timer.C
	stopWrites()
	writers.Wait()

	apiDyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	checks := []struct {
		name     string
		inf      cache.SharedIndexInformer
		resource string
		selector string
	}{
		{"pods", podInformer, "pods", ""},
		{"pods app=a", selectedInformer, "pods", "app=a"},
		{"widgets", widgetInformer, "widgets", ""},
		{"pods metadata", metaInformer, "pods", ""},
	}
	for _, c := range checks {
		gvr := corev1Pods
		if c.resource == "widgets" {
			gvr = widgetGVR
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := apiDyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: c.selector})
			if err != nil {
				return false, nil
			}
			want := keysAndRVs(list.Items)
			got := storeKeysAndRVs(c.inf.GetStore())
			last = diffKeys(want, got)
			return last == "", nil
		})
		if err != nil {
			t.Errorf("%s informer store never equalled the apiserver's list: %s", c.name, last)
		}
	}

	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	for _, name := range []string{"listproxy_watch_served_total", "listproxy_watch_events_total", "listproxy_watch_open"} {
		t.Logf("%s: %v", name, m[name])
	}
	for _, want := range []struct{ resource, format string }{
		{"pods", "protobuf"}, {"widgets.demo.listproxy.io", "json"}, {"pods", "meta-protobuf"},
	} {
		pairs := []string{`resource="` + want.resource + `"`, `format="` + want.format + `"`}
		if got := m.Sum("listproxy_watch_served_total", append(pairs, `start="initial_consistent"`)...); got < 1 {
			t.Errorf("listproxy served %v consistent watch-lists of %s in %s; want the informers' watch-lists", got, want.resource, want.format)
		}
		if got := m.Sum("listproxy_watch_events_total", append(pairs, `type="MODIFIED"`)...); got < 1 {
			t.Errorf("listproxy sent %v MODIFIED events of %s in %s; want the live stream", got, want.resource, want.format)
		}
	}
	if got := m.Sum("listproxy_watch_events_total", `type="DELETED"`); got < 1 {
		t.Errorf("listproxy sent no DELETED event")
	}
}

var corev1Pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// widgetChurn creates and deletes widgets until ctx is done.
func widgetChurn(ctx context.Context, t *testing.T, w *world) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ns := w.namespaces[i%len(w.namespaces)]
		name := fmt.Sprintf("churn-%d", i)
		if _, err := w.dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, newWidget(ns, name, i), metav1.CreateOptions{}); err != nil {
			continue
		}
		if i%2 == 0 {
			_ = w.dyn.Resource(widgetGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
}

func keysAndRVs(items []unstructured.Unstructured) map[string]string {
	out := make(map[string]string, len(items))
	for _, it := range items {
		out[it.GetNamespace()+"/"+it.GetName()] = it.GetResourceVersion()
	}
	return out
}

func storeKeysAndRVs(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range s.List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		out[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
	}
	return out
}

// diffKeys describes how got differs from want ("" when equal).
func diffKeys(want, got map[string]string) string {
	var diffs []string
	for k, rv := range want {
		if got[k] != rv {
			diffs = append(diffs, fmt.Sprintf("%s: want rv %s, got %q", k, rv, got[k]))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+": not in the apiserver's list")
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("… %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "; ")
}

// TestKubectlWaitThroughListproxy: `kubectl wait --for=condition=…` (a
// watch with a metadata.name field selector) and `kubectl get -w` through
// listproxy, with watches served from snapshots.
func TestKubectlWaitThroughListproxy(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "kubectl-wait"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "p1", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lpc := newRawClient(t, lp.Config())
	warmUp(ctx, t, lpc, []target{{path: "/api/v1/namespaces/" + ns + "/pods"}})

	kubectl := newKubectlRunner(t, cp, lp.URL)
	watchLines := kubectl.stream(ctx, t, "get", "pods", "-n", ns, "-w", "-o", "name")
	if _, err := awaitLine(ctx, watchLines, "pod/p1"); err != nil {
		t.Fatalf("kubectl get -w: %v", err)
	}
	waitLines := kubectl.stream(ctx, t, "wait", "-n", ns, "pod/p1", "--for=condition=Demo=True", "--timeout=60s")
	// kubectl wait is waiting once its watch-list was served.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		return m.Sum("listproxy_watch_open", `resource="pods"`, `format="json"`) >= 2, nil
	})
	if err != nil {
		t.Fatalf("kubectl's watches never open on listproxy: %v", err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: "Demo", Status: corev1.ConditionTrue})
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := awaitLine(ctx, waitLines, "pod/p1 condition met"); err != nil {
		t.Fatalf("kubectl wait: %v", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "p2", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := awaitLine(ctx, watchLines, "pod/p2"); err != nil {
		t.Fatalf("kubectl get -w never printed pod/p2: %v", err)
	}
	// kubectl ≥ 1.35 waits with a watch-list, older ones with LIST then
	// WATCH from its resourceVersion: either way both watches are served.
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	t.Logf("listproxy_watch_served_total: %v", m["listproxy_watch_served_total"])
	if got := m.Sum("listproxy_watch_served_total", `resource="pods"`, `format="json"`); got < 2 {
		t.Errorf("listproxy served %v pod watches, want kubectl get -w's and kubectl wait's", got)
	}
}

// TestWatchServiceMode: in service mode (TLS, HTTP/2, the apiserver's own
// authentication and RBAC) a watch is authorized for verb watch: a caller
// who may only list gets the apiserver's own 403, one who may watch gets
// the watch-list from the snapshot.
func TestWatchServiceMode(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := cp.Clientset(framework.UserAdmin)
	const ns = "a"
	createNamespaceWithPods(ctx, t, cp, ns, 3)
	// alice may get, list and watch pods in a; bob may only list them.
	lister := authPodReader(ns)
	lister.Name, lister.Rules = "pod-lister", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}
	listers := authBinding(ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: framework.UserBob})
	listers.Name, listers.RoleRef.Name = "pod-listers", "pod-lister"
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, authPodReader(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, lister, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, authBinding(ns, authSubjectAlice), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, listers, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile,
		"--resources=pods", "--etcd-servers="+cp.EtcdEndpoint)
	alice := lp.UserConfig(framework.UserAlice)
	podsInA := "/api/v1/namespaces/" + ns + "/pods"
	// alice may not start stores (she reads one namespace); the admin's
	// reads start them, and they serve alice.
	warmUp(ctx, t, newRawClient(t, lp.UserConfig(framework.UserAdmin)), []target{{path: podsInA}})
	warmUp(ctx, t, newRawClient(t, alice), []target{{path: podsInA}})

	authSameRefusal(t, lp.UserConfig(framework.UserBob), cp.UserConfig(framework.UserBob), podsInA+"?watch=1&timeoutSeconds=1", http.StatusForbidden)
	// A watch listproxy does not cache passes through before any review,
	// and is counted with why.
	authSameRefusal(t, alice, cp.UserConfig(framework.UserAlice), "/api/v1/namespaces/"+ns+"/configmaps?watch=1&timeoutSeconds=1", http.StatusForbidden)
	adminClient, err := rest.HTTPClientFor(lp.UserConfig(framework.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	m := framework.Scrape(t, adminClient, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_passed_through_total", `reason="resource"`); got != 1 {
		t.Errorf("listproxy_watch_passed_through_total{reason=resource} = %v, want 1 (the configmaps watch): %v", got, m["listproxy_watch_passed_through_total"])
	}

	r, hdr := openWatch(ctx, t, newRawClient(t, alice), podsInA, url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"2"}}, wire.Protobuf)
	if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
		t.Fatalf("alice's watch served from %q, want %q", got, httpapi.SourceSnapshot)
	}
	if added := initialFrames(t, r); len(added) != 3 {
		t.Errorf("alice's watch-list sent %d objects, want 3", len(added))
	}
	// The watch ends at its timeoutSeconds, with no final event.
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after the initial events: %v", err)
		}
		if fr.typ != wire.Bookmark {
			t.Errorf("unexpected %s event", fr.typ)
		}
	}
}

// TestWatchersAcrossAPIServerRestart: 50 client-go pod informers stream
// from listproxy while the apiserver restarts; the store's own watch
// resumes, and once writes stop every informer's store equals the
// apiserver's list: no event lost or repeated. The informers' watches
// after the restart are served from the snapshot again, as is a new watch.
func TestWatchersAcrossAPIServerRestart(t *testing.T) {
	defer consistencydetector.SetDataConsistencyDetectionForWatchListEnabledForTest(true)()
	const ns = "watch-restart"
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
	warmPods(ctx, t, newRawClient(t, lp.Config()), wire.Protobuf)

	protoCfg := rest.CopyConfig(lp.Config())
	protoCfg.ContentType = runtime.ContentTypeProtobuf
	protoCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	const watchers = 50
	var infs []cache.SharedIndexInformer
	for range watchers {
		f := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(protoCfg), 0, informers.WithNamespace(ns))
		infs = append(infs, f.Core().V1().Pods().Informer())
		f.Start(ctx.Done())
	}
	for i, inf := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("informer %d never synced", i)
		}
	}
	// served and ended count the pod watches listproxy served and that
	// ended; open those it serves now.
	podWatches := func() (served, ended, open float64) {
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		pairs := []string{`resource="pods"`, `format="protobuf"`}
		return m.Sum("listproxy_watch_served_total", pairs...), m.Sum("listproxy_watch_ended_total", pairs...), m.Sum("listproxy_watch_open", pairs...)
	}
	servedBefore, endedBefore, openBefore := podWatches()
	if servedBefore < watchers || openBefore != watchers {
		t.Fatalf("listproxy served %v pod watches and serves %v, want the %d informers' watch-lists", servedBefore, openBefore, watchers)
	}
	for i := range 5 {
		createPodWhenAble(ctx, t, cs, ns, fmt.Sprintf("during-%d", i))
	}
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		createPodWhenAble(ctx, t, cs, ns, fmt.Sprintf("after-%d", i))
		if err := cs.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("before-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, fmt.Sprintf("during-%d", i), types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"z"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	informersConverge(ctx, t, dynamic.NewForConfigOrDie(cp.AdminConfig), ns, infs)
	// Every informer watches from the snapshot again: a watch of theirs
	// that ended across the restart (the store relisted, or the
	// connection broke) was replaced by one listproxy served, none passed
	// through.
	var served, ended, open float64
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		served, ended, open = podWatches()
		return open == watchers && served-servedBefore >= ended-endedBefore, nil
	})
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	t.Logf("listproxy_watch_served_total: %v; ended: %v; passed through: %v", m["listproxy_watch_served_total"], m["listproxy_watch_ended_total"], m["listproxy_watch_passed_through_total"])
	if err != nil {
		t.Errorf("after the restart listproxy serves %v pod watches (want the %d informers'); %v of them ended and %v were served since", open, watchers, ended-endedBefore, served-servedBefore)
	}
	// A watch opened now, from the apiserver's latest resourceVersion, is
	// served from the snapshot.
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	_, hdr := openWatch(wctx, t, newRawClient(t, lp.Config()), "/api/v1/namespaces/"+ns+"/pods",
		url.Values{"watch": {"1"}, "resourceVersion": {list.ResourceVersion}, "timeoutSeconds": {"10"}}, wire.Protobuf)
	if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
		t.Errorf("a watch after the restart was served from %q, want %q", got, httpapi.SourceSnapshot)
	}
}

// TestManyWatchers: 1,000 concurrent watches of one store all get the
// event of one write; once their clients disconnect, listproxy ends every
// one of them.
func TestManyWatchers(t *testing.T) {
	const ns, watchers = "many-watchers", 1000
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	createPodWhenAble(ctx, t, cs, ns, "p0")
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--resources=pods")
	lpc := newRawClient(t, lp.Config())
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	warmUp(ctx, t, lpc, []target{{path: podsPath}})

	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	q := url.Values{"watch": {"1"}, "resourceVersion": {"0"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"600"}}
	readers := make([]*frameReader, watchers)
	for i := range readers {
		r, hdr := openWatch(watchCtx, t, lpc, podsPath, q, wire.JSON)
		if hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
			t.Fatalf("watch %d passed through", i)
		}
		if n := len(initialFrames(t, r)); n != 1 {
			t.Fatalf("watch %d: %d initial objects, want 1", i, n)
		}
		readers[i] = r
	}
	createPodWhenAble(ctx, t, cs, ns, "p1")
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, err := nextEvents(r, 1)
			if err != nil {
				errs <- fmt.Errorf("watch %d: %w", i, err)
				return
			}
			if evs[0].typ != wire.Added || !strings.Contains(string(evs[0].raw), `"name":"p1"`) {
				errs <- fmt.Errorf("watch %d: got %s %.80s, want ADDED p1", i, evs[0].typ, evs[0].raw)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_open", `resource="pods"`); got != watchers {
		t.Errorf("listproxy_watch_open = %v, want %d", got, watchers)
	}
	stopWatches()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_watch_open", `resource="pods"`) == 0, nil
	})
	if err != nil {
		t.Errorf("watches still open after their clients left: %v", framework.Scrape(t, nil, lp.URL+"/metrics")["listproxy_watch_open"])
	}
}
