package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// tableWatchNS is the namespace of TestTableWatchDifferential.
const tableWatchNS = "tablewatch"

// tableEvent is one event of a Table watch, decoded for comparison: the
// row's object and non-clock cells as raw bytes.
type tableEvent struct {
	Type   string `json:"type"`
	Object struct {
		Kind       string          `json:"kind"`
		APIVersion string          `json:"apiVersion"`
		Metadata   json.RawMessage `json:"metadata"`
		Columns    json.RawMessage `json:"columnDefinitions"`
		Rows       []struct {
			Cells      []json.RawMessage `json:"cells"`
			Conditions json.RawMessage   `json:"conditions"`
			Object     json.RawMessage   `json:"object"`
		} `json:"rows"`
	} `json:"object"`
}

// openTableWatch starts a Table watch as kubectl get -w does, with accept
// and the query q, and returns its lines and response header.
func openTableWatch(ctx context.Context, t *testing.T, c rawClient, path, accept string, q url.Values) (*bufio.Reader, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "kubectl/v1.37.2 (listproxy-e2e)")
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("Table watch %s?%s: %s", path, q.Encode(), resp.Status)
	}
	context.AfterFunc(ctx, func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body), resp.Header
}

// readTableEvents reads n events.
func readTableEvents(t *testing.T, r *bufio.Reader, n int) ([]tableEvent, [][]byte) {
	t.Helper()
	var events []tableEvent
	var raws [][]byte
	for range n {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(events), n, err)
		}
		var ev tableEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		events = append(events, ev)
		raws = append(raws, line)
	}
	return events, raws
}

// ageCell matches what the apiserver renders for a time under two
// minutes ago, the age of every object this test creates.
var ageCell = regexp.MustCompile(`^"([0-9]+)s"$`)

// TestTableWatchDifferential: kubectl get -w's Table watches from a
// resourceVersion, served from the Table store, equal the apiserver's
// event for event: type, resourceVersion, the columns on the first event
// only (null after), each row's cells and object, a DELETED for an object
// leaving a label selector (its previous row at the change's
// resourceVersion), both meta.k8s.io versions and includeObject=None.
// Age cells, rendered when each side wrote its event, may differ by the
// second that passed between them, and by no more. Table watch-lists and
// watches with bookmarks are compared for a metadata feed (configmaps),
// an object feed (pods) and a custom resource with printer columns
// (gadgets), each with its own bookmark row. Between the two, where the
// watches may wait for the bookmark rows, Table LIST pages above the gzip
// threshold are compared (checkTableGzip).
func TestTableWatchDifferential(t *testing.T) {
	const ns = tableWatchNS
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"app": []string{"a", "a", "b"}[i]}}, Data: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("pod-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	installTableCRDs(ctx, t, cp, []schema.GroupVersionResource{gadgetGVR})
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	createGadget := func(ctx context.Context, name string) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gadgetGVR.GroupVersion().String(), "kind": tableCRDKinds[gadgetGVR.Resource],
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"color": "red", "size": int64(len(name)), "note": "n"},
		}}
		_, err := dyn.Resource(gadgetGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	for i := range 2 {
		if err := createGadget(ctx, fmt.Sprintf("gadget-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())
	apic := newRawClient(t, cp.AdminConfig)
	cmPath, podPath := "/api/v1/namespaces/"+ns+"/configmaps", "/api/v1/namespaces/"+ns+"/pods"
	gadgetPath := "/apis/" + gadgetGVR.GroupVersion().String() + "/namespaces/" + ns + "/gadgets"
	// Every store starts now: where the apiserver refuses watch-lists,
	// each learns its bookmark row from its feed's first periodic
	// bookmark, about a minute from now, all at about the same time.
	for _, p := range []string{cmPath, podPath, gadgetPath} {
		if err := framework.WarmTable(ctx, lpc.client, lpc.base, p); err != nil {
			t.Fatal(err)
		}
	}
	// The resourceVersion kubectl watches from: its Table LIST's.
	code, hdr, body, err := lpc.get(ctx, cmPath, url.Values{"limit": {"500"}}, kubectlTableAccept)
	if err != nil || code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
		t.Fatalf("Table LIST: %d from %q, %v", code, hdr.Get(httpapi.HeaderServedFrom), err)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	rv := list.Metadata.ResourceVersion

	type pair struct {
		name    string
		lp, api *bufio.Reader
		events  int
	}
	// The apiserver renders a live event once for every watcher of the
	// same Table options, and a watcher that is sent an event another
	// rendered first sends its own columns again later. So at most one
	// watcher per options watches live; the one with a selector (the
	// same options as kubectl's) starts after the writes, from the same
	// resourceVersion, and is sent events rendered for it alone.
	cases := []struct {
		name, path, accept string
		q                  url.Values
		events             int
		afterWrites        bool
	}{
		{"configmaps", cmPath, kubectlTableAccept, url.Values{}, 4, false},
		{"configmaps_app_a", cmPath, kubectlTableAccept, url.Values{"labelSelector": {"app=a"}}, 3, true},
		{"configmaps_v1beta1_none", cmPath, "application/json;as=Table;v=v1beta1;g=meta.k8s.io", url.Values{"includeObject": {"None"}}, 4, false},
		{"pods", podPath, kubectlTableAccept, url.Values{}, 3, false},
	}
	var pairs []pair
	open := func(afterWrites bool) {
		for _, tc := range cases {
			if tc.afterWrites != afterWrites {
				continue
			}
			tc.q.Set("watch", "true")
			tc.q.Set("resourceVersion", rv)
			lpr, hdr := openTableWatch(ctx, t, lpc, tc.path, tc.accept, tc.q)
			if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
				t.Fatalf("%s: Table watch served from %q, want %q", tc.name, got, httpapi.SourceSnapshot)
			}
			apir, _ := openTableWatch(ctx, t, apic, tc.path, tc.accept, tc.q)
			pairs = append(pairs, pair{name: tc.name, lp: lpr, api: apir, events: tc.events})
		}
	}
	open(false)

	// configmaps: cm-3 added (app=a); cm-0 leaves app=a; cm-1 changes;
	// cm-2 deleted. pods: pod-2 added, pod-0 changed, pod-1 deleted.
	cm3 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-3", Labels: map[string]string{"app": "a"}}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm3, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-1", types.MergePatchType, []byte(`{"data":{"k2":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "pod-2", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "pod-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "pod-1", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	open(true)

	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			got, gotRaw := readTableEvents(t, p.lp, p.events)
			want, wantRaw := readTableEvents(t, p.api, p.events)
			compareTableEvents(t, got, want, gotRaw, wantRaw)
		})
	}

	// kubectl get -w itself: its Table LIST and its Table watch from the
	// list's resourceVersion are served from snapshots, and it prints a
	// change made while it watches.
	t.Run("kubectl_get_w", func(t *testing.T) {
		k := newKubectlRunner(t, cp, lp.URL)
		kctx, kcancel := context.WithTimeout(ctx, time.Minute)
		defer kcancel()
		var stdout, stderr syncBuffer
		cmd := exec.CommandContext(kctx, k.path, append(append([]string(nil), k.base...), "-v=8", "get", "configmaps", "-n", ns, "-w")...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { kcancel(); _ = cmd.Wait() }()
		// The configmaps requests' served-from (not discovery's).
		served := func() [][2]string {
			var out [][2]string
			for _, s := range kubectlServed(t, stderr.String()) {
				if strings.HasSuffix(s[0], "/configmaps") {
					out = append(out, s)
				}
			}
			return out
		}
		// Wait until both the LIST and the watch were answered.
		if err := wait.PollUntilContextCancel(kctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
			return len(served()) >= 2, nil
		}); err != nil {
			t.Fatalf("kubectl get -w: LIST and watch not answered: %v\n%s", err, stderr.String())
		}
		for _, s := range served() {
			if s[1] != httpapi.SourceSnapshot {
				t.Errorf("kubectl get -w: %s served from %s, want %s", s[0], s[1], httpapi.SourceSnapshot)
			}
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-kubectl"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextCancel(kctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
			return strings.Contains(stdout.String(), "cm-kubectl"), nil
		}); err != nil {
			t.Fatalf("kubectl get -w did not print the new configmap: %v\n%s", err, stdout.String())
		}
	})

	// Last: where the apiserver refuses watch-lists, the watches from N
	// wait for the stores' bookmark rows, after the gzip pages.
	gzipPages := func(t *testing.T) {
		t.Run("gzip", func(t *testing.T) {
			var stats pairStats
			checkTableGzip(ctx, t, cp, lpc, apic, &stats)
		})
	}
	t.Run("bookmarks", func(t *testing.T) {
		checkTableWatchBookmarks(ctx, t, lp, lpc, apic, gzipPages, []tableBookmarkTarget{
			{name: "configmaps", gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), path: cmPath, write: func(ctx context.Context) error {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-bookmark"}}, metav1.CreateOptions{})
				return err
			}},
			{name: "pods", gvr: corev1.SchemeGroupVersion.WithResource("pods"), path: podPath, write: func(ctx context.Context) error {
				_, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "pod-bookmark", 3), metav1.CreateOptions{})
				return err
			}},
			{name: "gadgets", gvr: gadgetGVR, path: gadgetPath, write: func(ctx context.Context) error {
				return createGadget(ctx, "gadget-bookmark")
			}},
		})
	})
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test
// reading at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tableBookmarkTarget is a collection of tableWatchNS whose Table
// watch-lists and watches with bookmarks checkTableWatchBookmarks compares.
type tableBookmarkTarget struct {
	name string
	gvr  schema.GroupVersionResource
	path string
	// write makes one change to the collection.
	write func(ctx context.Context) error
}

// checkTableWatchBookmarks: for each target, Table watch-lists
// (consistent, from resourceVersion 0, with includeObject=None, in
// meta.k8s.io/v1beta1) and a Table watch from N with bookmarks equal the
// apiserver's: the ADDED events in its order, the columns on the first
// event only, the end bookmark with its k8s.io/initial-events-end
// annotation (whose object the apiserver sends also for
// includeObject=None), the bookmark before the deadline with the row of an
// empty object. Where the apiserver serves watch-lists they are served
// from snapshots. Elsewhere (its WatchList feature off) the stores learn
// the bookmark row only from their feeds' periodic bookmarks, about a
// minute after they started: until then the watch-lists pass through for
// the apiserver's 422, so they are checked first, and the watches from N
// wait for the row, side by side, then are served and compared. meanwhile
// runs between the two.
func checkTableWatchBookmarks(ctx context.Context, t *testing.T, lp *framework.Listproxy, lpc, apic rawClient, meanwhile func(*testing.T), targets []tableBookmarkTarget) {
	_, minor := kubeRelease(t)
	watchLists, _, _ := releaseGates(minor)
	passedThrough := func() float64 {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_watch_passed_through_total", `reason="table_watch"`)
	}
	before := passedThrough()
	list := url.Values{"watch": {"true"}, "sendInitialEvents": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersionMatch": {"NotOlderThan"}, "timeoutSeconds": {"5"}}
	with := func(q url.Values, kv ...string) url.Values {
		q2 := url.Values{}
		for k, v := range q {
			q2[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			q2.Set(kv[i], kv[i+1])
		}
		return q2
	}
	v1beta1 := "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
	cases := []struct {
		name   string
		accept string
		q      url.Values
	}{
		{"watch_list_consistent", kubectlTableAccept, list},
		{"watch_list_none", kubectlTableAccept, with(list, "includeObject", "None")},
		{"watch_list_v1beta1", v1beta1, with(list, "includeObject", "Metadata")},
	}
	if watchLists {
		cases = append(cases, struct {
			name   string
			accept string
			q      url.Values
		}{"watch_list_rv_0", kubectlTableAccept, url.Values{"watch": {"true"}, "resourceVersion": {"0"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"5"}}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			n := countItems(ctx, t, apic, tg.path)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if !watchLists {
						// The apiserver's own answer, passed through: its 422.
						code, hdr, _, err := lpc.get(ctx, tg.path, tc.q, tc.accept)
						if err != nil || code != http.StatusUnprocessableEntity || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer {
							t.Fatalf("Table watch-list: %d from %q, %v; want the apiserver's 422", code, hdr.Get(httpapi.HeaderServedFrom), err)
						}
						return
					}
					wctx, cancel := context.WithCancel(ctx)
					defer cancel()
					lpr, hdr := openTableWatch(wctx, t, lpc, tg.path, tc.accept, tc.q)
					if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
						t.Fatalf("served from %q, want %q", got, httpapi.SourceSnapshot)
					}
					apir, _ := openTableWatch(wctx, t, apic, tg.path, tc.accept, tc.q)
					got, gotRaw := readTableEvents(t, lpr, n+1)
					want, wantRaw := readTableEvents(t, apir, n+1)
					// The end bookmarks' resourceVersions are each server's
					// (consistent: proven by each on its own).
					end := n
					if want[end].Type != "BOOKMARK" || !bytes.Contains(wantRaw[end], []byte(`"annotations":{"k8s.io/initial-events-end":"true"}`)) {
						t.Fatalf("the apiserver's event %d: want the end bookmark: %s", end, wantRaw[end])
					}
					gotRaw[end] = sameBookmarkRV(t, gotRaw[end], wantRaw[end], maxRVEvent(gotRaw[:end]))
					got[end] = decodeTableEvent(t, gotRaw[end])
					compareTableEvents(t, got, want, gotRaw, wantRaw)
				})
			}
		})
	}
	meanwhile(t)
	t.Run("watch_from_rv", func(t *testing.T) {
		for _, tg := range targets {
			t.Run(tg.name, func(t *testing.T) {
				t.Parallel()
				checkTableWatchFromRV(ctx, t, lp, lpc, apic, tg, watchLists)
			})
		}
	})
	if after := passedThrough(); watchLists && after != before {
		t.Errorf("Table watches with bookmarks passed through (table_watch): %v, want none", after-before)
	}
}

// checkTableWatchFromRV: a Table watch of tg from the apiserver's latest
// resourceVersion with bookmarks, served from its store, equals the
// apiserver's: one change, then the bookmark before the deadline. Where
// the apiserver refuses watch-lists it first waits until the store has
// learned the bookmark row.
func checkTableWatchFromRV(ctx context.Context, t *testing.T, lp *framework.Listproxy, lpc, apic rawClient, tg tableBookmarkTarget, watchLists bool) {
	if !watchLists {
		// Until the row is learned the watch passes through, and a
		// second watcher of the same options on the apiserver would
		// change the compared watchers' events: the store is asked, not
		// the apiserver.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			return tableBookmarkLearned(lp, tg.gvr), nil
		}); err != nil {
			t.Fatalf("the Table store of %s did not learn the bookmark row from its feed: %v", tg.gvr.Resource, err)
		}
	}
	_, _, body, err := apic.get(ctx, tg.path, url.Values{"limit": {"1"}}, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	q := url.Values{"watch": {"true"}, "resourceVersion": {l.Metadata.ResourceVersion}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"4"}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lpr, hdr := openTableWatch(wctx, t, lpc, tg.path, kubectlTableAccept, q)
	if from := hdr.Get(httpapi.HeaderServedFrom); from != httpapi.SourceSnapshot {
		t.Fatalf("served from %q, want %q", from, httpapi.SourceSnapshot)
	}
	apir, _ := openTableWatch(wctx, t, apic, tg.path, kubectlTableAccept, q)
	// One change, then the bookmark before the deadline (2 s in).
	if err := tg.write(ctx); err != nil {
		t.Fatal(err)
	}
	got, gotRaw := readTableEvents(t, lpr, 2)
	want, wantRaw := readTableEvents(t, apir, 2)
	if want[1].Type != "BOOKMARK" {
		t.Fatalf("the apiserver's second event: want a bookmark: %s", wantRaw[1])
	}
	gotRaw[1] = sameBookmarkRV(t, gotRaw[1], wantRaw[1], gotRaw[0])
	got[1] = decodeTableEvent(t, gotRaw[1])
	compareTableEvents(t, got, want, gotRaw, wantRaw)
}

// tableBookmarkLearned reports whether listproxy's Table store of gvr
// knows the row of the apiserver's Table bookmark.
func tableBookmarkLearned(lp *framework.Listproxy, gvr schema.GroupVersionResource) bool {
	res, ok := lp.Stores().Lookup(gvr)
	if !ok {
		return false
	}
	h, _, ok := lp.Stores().Acquire(context.Background(), res, wire.Table, true)
	if !ok {
		return false
	}
	defer h.Release()
	head := h.TableHead()
	return head != nil && head.Bookmark != nil
}

// countItems returns how many objects the apiserver lists at path.
func countItems(ctx context.Context, t *testing.T, c rawClient, path string) int {
	t.Helper()
	code, _, body, err := c.get(ctx, path, nil, "application/json")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list %s: %d %v %s", path, code, err, body)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// bookmarkRV matches a Table bookmark's resourceVersions.
var bookmarkRV = regexp.MustCompile(`"resourceVersion":"[0-9]+"`)

// sameBookmarkRV returns got, a Table BOOKMARK following the event
// before, with the resourceVersion of want, checking that it carries one
// resourceVersion throughout, not older than before's.
func sameBookmarkRV(t *testing.T, got, want, before []byte) []byte {
	t.Helper()
	rvs := bookmarkRV.FindAll(got, -1)
	wantRV := bookmarkRV.Find(want)
	if len(rvs) == 0 || wantRV == nil {
		t.Fatalf("bookmarks without a resourceVersion:\nlistproxy: %s\napiserver: %s", got, want)
	}
	for _, rv := range rvs {
		if !bytes.Equal(rv, rvs[0]) {
			t.Fatalf("bookmark with resourceVersions %s and %s: %s", rvs[0], rv, got)
		}
	}
	if before != nil {
		if rv, prev := rvNumber(t, rvs[0]), rvNumber(t, bookmarkRV.Find(before)); rv < prev {
			t.Fatalf("bookmark at resourceVersion %d, before the event before it (%d): %s", rv, prev, got)
		}
	}
	return bookmarkRV.ReplaceAll(got, wantRV)
}

// rvNumber reads a bookmarkRV match.
func rvNumber(t *testing.T, m []byte) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(string(m), `"resourceVersion":`), `"`), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %s: %v", m, err)
	}
	return n
}

// maxRVEvent returns the event of events with the largest
// resourceVersion; nil when there are none.
func maxRVEvent(events [][]byte) []byte {
	var best []byte
	var bestRV uint64
	for _, ev := range events {
		m := bookmarkRV.Find(ev)
		if m == nil {
			continue
		}
		n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(string(m), `"resourceVersion":`), `"`), 10, 64)
		if err == nil && (best == nil || n > bestRV) {
			best, bestRV = ev, n
		}
	}
	return best
}

func decodeTableEvent(t *testing.T, line []byte) tableEvent {
	t.Helper()
	var ev tableEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatalf("event %q: %v", line, err)
	}
	return ev
}

// compareTableEvents compares Table watch events through listproxy (got)
// with the apiserver's (want): type, kind, apiVersion, metadata, the
// columns on the first event only, each row's object, conditions and
// cells, Age cells within the second between the two renders.
func compareTableEvents(t *testing.T, got, want []tableEvent, gotRaw, wantRaw [][]byte) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		where := fmt.Sprintf("event %d\nlistproxy: %s\napiserver: %s", i, gotRaw[i], wantRaw[i])
		if g.Type != w.Type || g.Object.Kind != w.Object.Kind || g.Object.APIVersion != w.Object.APIVersion || !bytes.Equal(g.Object.Metadata, w.Object.Metadata) {
			t.Fatalf("type, kind, apiVersion or metadata differ, %s", where)
		}
		if !bytes.Equal(g.Object.Columns, w.Object.Columns) {
			t.Fatalf("columnDefinitions differ, %s", where)
		}
		if (i == 0) == bytes.Equal(w.Object.Columns, []byte("null")) {
			t.Fatalf("the apiserver's columns: want them on the first event only, %s", where)
		}
		if len(g.Object.Rows) != 1 || len(w.Object.Rows) != 1 {
			t.Fatalf("want one row per event, %s", where)
		}
		gr, wr := g.Object.Rows[0], w.Object.Rows[0]
		if !bytes.Equal(gr.Object, wr.Object) || !bytes.Equal(gr.Conditions, wr.Conditions) || len(gr.Cells) != len(wr.Cells) {
			t.Fatalf("row object, conditions or cell count differ, %s", where)
		}
		for c := range wr.Cells {
			if bytes.Equal(gr.Cells[c], wr.Cells[c]) {
				continue
			}
			gm, wm := ageCell.FindSubmatch(gr.Cells[c]), ageCell.FindSubmatch(wr.Cells[c])
			if gm == nil || wm == nil {
				t.Fatalf("cell %d differs, %s", c, where)
			}
			gs, _ := strconv.Atoi(string(gm[1]))
			ws, _ := strconv.Atoi(string(wm[1]))
			if gs-ws > 1 || ws-gs > 1 {
				t.Fatalf("age cell %d: %ss through listproxy, %ss from the apiserver: more than the second between them, %s", c, gm[1], wm[1], where)
			}
		}
	}
}
