package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// TestWatchBookmarksDifferential specifies, against the apiserver's answer
// to the same watch, what a watch listproxy serves promises:
//
//   - deadline bookmark: a watch from N with bookmarks and a short
//     timeoutSeconds sends the apiserver's events in its order and ends,
//     as the apiserver's does, with the bookmark sent 2 s before its
//     deadline, at or past every event sent;
//   - bookmarks on every stream: a bookmark at B follows every event up to
//     B (no event at or below B comes after it) and promises no
//     resourceVersion the cluster has not reached. When periodic bookmarks
//     come is each server's own, so bookmarks are checked by these
//     invariants, not compared one by one;
//   - watch-list end bookmark: a watch-list from N ends its initial events
//     with the apiserver's initial-events-end bookmark;
//   - hand-off: a watch-list opened while pods change goes from its initial
//     events to the live stream losing, repeating and reordering nothing:
//     its state at its last resourceVersion is the apiserver's LIST at that
//     resourceVersion, and its events where both streams overlap are the
//     apiserver's;
//   - headers: a served watch carries the apiserver's Audit-Id (the
//     caller's when sent) and its Warning headers (deprecated resources).
//
// An apiserver whose WatchList feature is off (before 1.34) refuses
// watch-lists; listproxy's are then checked against its LISTs alone.
func TestWatchBookmarksDifferential(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "watchbm"
	createNamespaceWithPods(ctx, t, cp, ns, 12)
	cs := cp.Clientset(framework.UserAdmin)
	// The control plane runs no endpoint reconciler; an empty resource's
	// etcd prefix cannot be proven, and its watches from a resourceVersion
	// pass through.
	// Endpoints, deprecated since 1.33: the apiserver's deprecation
	// Warning header is compared too.
	eps := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"}} //nolint:staticcheck // deprecated on purpose
	if _, err := cs.CoreV1().Endpoints(ns).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint)
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	const podsPath, endpointsPath = "/api/v1/namespaces/" + ns + "/pods", "/api/v1/endpoints"
	warmUp(ctx, t, lpc, []target{{path: podsPath}, {path: endpointsPath}})
	watchList := watchListServedBy(t, cp)
	// All pods, and a selection that pods enter and leave (churnStep).
	selectors := []string{"", "app=a"}

	t.Run("deadline bookmark", func(t *testing.T) {
		from := reachedRV(ctx, t, apic, podsPath)
		var lpr, apir []*frameReader
		for _, sel := range selectors {
			q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatUint(from, 10)}, "allowWatchBookmarks": {"true"},
				"labelSelector": {sel}, "timeoutSeconds": {"5"}}
			r, hdr := openWatch(ctx, t, lpc, podsPath, q, wire.JSON)
			if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
				t.Fatalf("selector %q: served from %q, want %q", sel, got, httpapi.SourceSnapshot)
			}
			lpr = append(lpr, r)
			r, _ = openWatch(ctx, t, apic, podsPath, q, wire.JSON)
			apir = append(apir, r)
		}
		// The writes end well before the deadline bookmarks (3 s in).
		for i := range 4 {
			if err := churnStep(ctx, cs, ns, "bm", i); err != nil {
				t.Fatal(err)
			}
		}
		lpFrames := readStreams(t, lpr)
		apiFrames := readStreams(t, apir)
		reached := reachedRV(ctx, t, apic, podsPath)
		for i, sel := range selectors {
			name := fmt.Sprintf("selector %q", sel)
			lpEv, apiEv := nonBookmarks(lpFrames[i]), nonBookmarks(apiFrames[i])
			if len(apiEv) == 0 {
				t.Fatalf("%s: the apiserver sent no event", name)
			}
			if d := diffFrames(apiEv, lpEv); d != "" {
				t.Errorf("%s: events differ from the apiserver's: %s", name, d)
			}
			for server, frames := range map[string][]frame{"listproxy": lpFrames[i], "apiserver": apiFrames[i]} {
				for _, v := range bookmarkViolations(frames, reached) {
					t.Errorf("%s, %s: %s", name, server, v)
				}
				if last := frames[len(frames)-1]; last.typ != wire.Bookmark {
					t.Errorf("%s, %s: the watch ended with %s at %s, want the deadline bookmark", name, server, last.typ, last.rv)
				}
			}
		}
	})

	t.Run("watch-list end bookmark", func(t *testing.T) {
		from := strconv.FormatUint(reachedRV(ctx, t, apic, podsPath), 10)
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		for _, sel := range selectors {
			name := fmt.Sprintf("selector %q", sel)
			q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
				"resourceVersion": {from}, "allowWatchBookmarks": {"true"}, "labelSelector": {sel}, "timeoutSeconds": {"5"}}
			r, _ := openWatch(wctx, t, lpc, podsPath, q, wire.JSON)
			lpInit, lpEnd := framesToInitialEnd(t, r)
			if !watchList {
				// The apiserver refuses the watch-list: the initial objects
				// are its LIST at the end bookmark's resourceVersion.
				want := listAsWatchFrames(ctx, t, apic, podsPath, sel, lpEnd.rv, wire.JSON, podType)
				if d := diffFrames(want, lpInit); d != "" {
					t.Errorf("%s: initial events differ from the apiserver's LIST at %s: %s", name, lpEnd.rv, d)
				}
				if rvNum(t, lpEnd.rv) < rvNum(t, from) {
					t.Errorf("%s: initial-events-end bookmark at %s, before the requested %s", name, lpEnd.rv, from)
				}
				continue
			}
			r, _ = openWatch(wctx, t, apic, podsPath, q, wire.JSON)
			apiInit, apiEnd := framesToInitialEnd(t, r)
			if lpEnd.rv != apiEnd.rv {
				t.Errorf("%s: initial-events-end bookmark at %s, apiserver's at %s", name, lpEnd.rv, apiEnd.rv)
			}
			if d := diffFrames(apiInit, lpInit); d != "" {
				t.Errorf("%s: initial events differ from the apiserver's: %s", name, d)
			}
		}
	})

	t.Run("hand-off", func(t *testing.T) {
		// Pods change before, while and after the watch-lists send their
		// initial events.
		wctx, stopWrites := context.WithCancel(ctx)
		defer stopWrites()
		var writes sync.WaitGroup
		writes.Add(1)
		go func() {
			defer writes.Done()
			for i := 0; wctx.Err() == nil; i++ {
				if err := churnStep(wctx, cs, ns, "ho", i); err != nil && wctx.Err() == nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		}()
		if err := churnStep(ctx, cs, ns, "first", 0); err != nil {
			t.Fatal(err)
		}
		from := strconv.FormatUint(reachedRV(ctx, t, apic, podsPath), 10)
		type stream struct {
			name, sel string
			r         *frameReader
		}
		var streams []stream
		for _, sel := range selectors {
			q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
				"resourceVersion": {from}, "allowWatchBookmarks": {"true"}, "labelSelector": {sel}, "timeoutSeconds": {"4"}}
			r, _ := openWatch(ctx, t, lpc, podsPath, q, wire.JSON)
			streams = append(streams, stream{fmt.Sprintf("listproxy, selector %q", sel), sel, r})
			if watchList {
				r, _ := openWatch(ctx, t, apic, podsPath, q, wire.JSON)
				streams = append(streams, stream{fmt.Sprintf("apiserver, selector %q", sel), sel, r})
			}
		}
		var readers []*frameReader
		for _, s := range streams {
			readers = append(readers, s.r)
		}
		frames := readStreams(t, readers)
		stopWrites()
		writes.Wait()
		reached := reachedRV(ctx, t, apic, podsPath)
		live := map[string][]frame{} // per selector and server: the events after the initial ones
		endRV := map[string]uint64{} // per selector: the latest initial-events-end bookmark
		lastRV := map[string]uint64{}
		for i, s := range streams {
			for _, v := range bookmarkViolations(frames[i], reached) {
				t.Errorf("%s: %s", s.name, v)
			}
			state, end, events, problems := replay(t, frames[i])
			for _, p := range problems {
				t.Errorf("%s: %s", s.name, p)
			}
			if len(events) == 0 {
				t.Errorf("%s: no event after the initial ones", s.name)
			}
			last := rvNum(t, frames[i][len(frames[i])-1].rv)
			if d := diffKeys(listKeysAt(ctx, t, apic, podsPath, s.sel, last), state); d != "" {
				t.Errorf("%s: its state at %d differs from the apiserver's LIST at %d: %s", s.name, last, last, d)
			}
			live[s.name] = events
			endRV[s.sel] = max(endRV[s.sel], end)
			if l, ok := lastRV[s.sel]; !ok || last < l {
				lastRV[s.sel] = last
			}
		}
		if !watchList {
			return
		}
		// Where both streams carry events (past both initial-events-end
		// bookmarks, up to the end of the shorter one), they carry the
		// same events in the same order.
		for _, sel := range selectors {
			within := func(events []frame) []frame {
				var out []frame
				for _, ev := range events {
					if rv := rvNum(t, ev.rv); rv > endRV[sel] && rv <= lastRV[sel] {
						out = append(out, ev)
					}
				}
				return out
			}
			lpEv := within(live[fmt.Sprintf("listproxy, selector %q", sel)])
			apiEv := within(live[fmt.Sprintf("apiserver, selector %q", sel)])
			if d := diffFrames(apiEv, lpEv); d != "" {
				t.Errorf("selector %q: live events in (%d, %d] differ from the apiserver's: %s", sel, endRV[sel], lastRV[sel], d)
			}
		}
	})

	t.Run("headers", func(t *testing.T) {
		from := strconv.FormatUint(reachedRV(ctx, t, apic, endpointsPath), 10)
		watchFrom := url.Values{"watch": {"1"}, "resourceVersion": {from}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"5"}}
		type headerCase struct {
			name, path string
			query      url.Values
			auditID    string // "": none sent
		}
		cases := []headerCase{
			{"endpoints (deprecated in 1.33+), the caller's Audit-Id", endpointsPath, watchFrom, "e2e-watch-endpoints"},
			{"endpoints, no Audit-Id", endpointsPath, watchFrom, ""},
			{"pods, the caller's Audit-Id", podsPath, watchFrom, "e2e-watch-pods"},
		}
		if watchList {
			cases = append(cases, headerCase{"endpoints watch-list", endpointsPath, url.Values{"watch": {"1"}, "sendInitialEvents": {"true"},
				"resourceVersionMatch": {"NotOlderThan"}, "resourceVersion": {from}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"5"}}, "e2e-watch-list"})
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				lpHdr := watchHead(ctx, t, lpc, tc.path, tc.query, tc.auditID)
				apiHdr := watchHead(ctx, t, apic, tc.path, tc.query, tc.auditID)
				if got := lpHdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
					t.Fatalf("served from %q, want %q", got, httpapi.SourceSnapshot)
				}
				got, apiGot := lpHdr.Get(httpapi.HeaderAuditID), apiHdr.Get(httpapi.HeaderAuditID)
				if got == "" || (tc.auditID != "" && (got != tc.auditID || apiGot != tc.auditID)) {
					t.Errorf("Audit-Id %q, apiserver %q; sent %q", got, apiGot, tc.auditID)
				}
				t.Logf("apiserver's Warning headers: %q", apiHdr.Values("Warning"))
				if d := cmp.Diff(apiHdr.Values("Warning"), lpHdr.Values("Warning")); d != "" {
					t.Errorf("Warning headers differ (-apiserver +listproxy):\n%s", d)
				}
			})
		}
	})
}

var podType = wire.ObjectType{GVK: corev1Pods.GroupVersion().WithKind("Pod")}

// churnStep is step i of writes to pods named prefix-N in ns: it creates
// prefix-i, moves prefix-(i-1) into or out of app=a and deletes
// prefix-(i-2), so that a watch of app=a gets ADDED, MODIFIED and DELETED
// events, and objects entering and leaving its selection.
func churnStep(ctx context.Context, cs kubernetes.Interface, ns, prefix string, i int) error {
	name := func(j int) string { return fmt.Sprintf("%s-%d", prefix, j) }
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, name(i), i), metav1.CreateOptions{}); err != nil {
		return err
	}
	if i >= 1 {
		app := "a"
		if (i-1)%3 == 0 { // newPod made it app=a
			app = "b"
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{"app":%q}}}`, app)
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, name(i-1), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	if i >= 2 {
		return cs.CoreV1().Pods(ns).Delete(ctx, name(i-2), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
	return nil
}

// reachedRV is the resourceVersion of a consistent LIST of path from the
// apiserver: one the cluster has reached.
func reachedRV(ctx context.Context, t *testing.T, apic rawClient, path string) uint64 {
	t.Helper()
	code, _, body, err := apic.get(ctx, path, url.Values{"limit": {"1"}}, "application/json")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list %s: %d %v %s", path, code, err, body)
	}
	var l metav1.List
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("list %s: %v", path, err)
	}
	return rvNum(t, l.ResourceVersion)
}

// listKeysAt is the apiserver's LIST of path with labelSelector at exactly
// rv, as namespace/name to resourceVersion.
func listKeysAt(ctx context.Context, t *testing.T, apic rawClient, path, labelSelector string, rv uint64) map[string]string {
	t.Helper()
	q := url.Values{"resourceVersion": {strconv.FormatUint(rv, 10)}, "resourceVersionMatch": {"Exact"}, "labelSelector": {labelSelector}}
	code, _, body, err := apic.get(ctx, path, q, "application/json")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list %s at %d: %d %v %s", path, rv, code, err, body)
	}
	var l unstructured.UnstructuredList
	if err := l.UnmarshalJSON(body); err != nil {
		t.Fatalf("list %s at %d: %v", path, rv, err)
	}
	return keysAndRVs(l.Items)
}

func rvNum(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

// readStreams reads every watch to its end (timeoutSeconds), all at once:
// a stream left unread stalls its server.
func readStreams(t *testing.T, rs []*frameReader) [][]frame {
	t.Helper()
	out := make([][]frame, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				fr, err := r.next()
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				out[i] = append(out[i], fr)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("watch %d: after %d frames: %v", i, len(out[i]), err)
		}
		if len(out[i]) == 0 {
			t.Fatalf("watch %d sent nothing", i)
		}
	}
	return out
}

// framesToInitialEnd reads a watch-list's initial ADDED events and the
// initial-events-end bookmark after them.
func framesToInitialEnd(t *testing.T, r *frameReader) ([]frame, frame) {
	t.Helper()
	var added []frame
	for {
		fr, err := r.next()
		if err != nil {
			t.Fatalf("initial events: after %d: %v", len(added), err)
		}
		switch {
		case fr.typ == wire.Added:
			added = append(added, fr)
		case fr.typ == wire.Bookmark && fr.end:
			return added, fr
		default:
			t.Fatalf("initial events: after %d: %s at %s before the initial-events-end bookmark", len(added), fr.typ, fr.rv)
		}
	}
}

func nonBookmarks(frames []frame) []frame {
	var out []frame
	for _, fr := range frames {
		if fr.typ != wire.Bookmark {
			out = append(out, fr)
		}
	}
	return out
}

// diffFrames describes how got differs from want, frame by frame ("" when
// equal). cmp.Diff is far too slow on hundreds of frames.
func diffFrames(want, got []frame) string {
	for i := range min(len(want), len(got)) {
		if string(want[i].raw) != string(got[i].raw) {
			return fmt.Sprintf("frame %d:\nwant %s %q\n got %s %q", i, want[i].typ, want[i].raw, got[i].typ, got[i].raw)
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d frames, want %d", len(got), len(want))
	}
	return ""
}

func rawFrames(frames []frame) []string {
	out := make([]string, len(frames))
	for i, fr := range frames {
		out[i] = string(fr.raw)
	}
	return out
}

// bookmarkViolations checks a watch's frames against what a bookmark at B
// promises: every event up to B came before it (none at or below B comes
// after it, and none sent before it is past B), and B is no
// resourceVersion beyond reached, one the cluster had reached once the
// watch ended.
func bookmarkViolations(frames []frame, reached uint64) []string {
	var out []string
	var maxEvent, maxBookmark uint64
	for i, fr := range frames {
		rv, err := strconv.ParseUint(fr.rv, 10, 64)
		if err != nil {
			out = append(out, fmt.Sprintf("frame %d: %s with resourceVersion %q", i, fr.typ, fr.rv))
			continue
		}
		if fr.typ == wire.Bookmark {
			if rv < maxEvent {
				out = append(out, fmt.Sprintf("frame %d: bookmark at %d after an event at %d", i, rv, maxEvent))
			}
			if rv > reached {
				out = append(out, fmt.Sprintf("frame %d: bookmark at %d, past the cluster's %d", i, rv, reached))
			}
			maxBookmark = max(maxBookmark, rv)
			continue
		}
		if rv <= maxBookmark {
			out = append(out, fmt.Sprintf("frame %d: %s at %d after a bookmark at %d", i, fr.typ, rv, maxBookmark))
		}
		maxEvent = max(maxEvent, rv)
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("… %d more", len(out)-5))
	}
	return out
}

// replay applies a watch-list's frames in order to an empty state
// (namespace/name to resourceVersion) and returns it, the initial-events-end
// bookmark's resourceVersion, the events after it, and what breaks a
// watch's contract: an initial object sent twice, a live event not newer
// than the one before it, an ADDED object already there, a MODIFIED or
// DELETED one not there.
func replay(t *testing.T, frames []frame) (state map[string]string, endRV uint64, live []frame, problems []string) {
	t.Helper()
	state = map[string]string{}
	initial, last := true, uint64(0)
	for i, fr := range frames {
		if fr.typ == wire.Bookmark {
			if fr.end {
				initial = false
				endRV, last = rvNum(t, fr.rv), rvNum(t, fr.rv)
			}
			continue
		}
		var ev struct {
			Object metav1.PartialObjectMetadata `json:"object"`
		}
		if err := json.Unmarshal(fr.raw, &ev); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		key := ev.Object.Namespace + "/" + ev.Object.Name
		_, there := state[key]
		if initial {
			if fr.typ != wire.Added || there {
				problems = append(problems, fmt.Sprintf("initial event %d: %s %s (already sent: %v)", i, fr.typ, key, there))
			}
			state[key] = fr.rv
			continue
		}
		live = append(live, fr)
		rv := rvNum(t, fr.rv)
		if rv <= last {
			problems = append(problems, fmt.Sprintf("event %d: %s %s at %d after %d", i, fr.typ, key, rv, last))
		}
		last = max(last, rv)
		switch {
		case fr.typ == wire.Added && there, fr.typ != wire.Added && !there:
			problems = append(problems, fmt.Sprintf("event %d: %s %s, which the watch had %v", i, fr.typ, key, there))
		}
		if fr.typ == wire.Deleted {
			delete(state, key)
		} else {
			state[key] = fr.rv
		}
	}
	if initial {
		problems = append(problems, "no initial-events-end bookmark")
	}
	return state, endRV, live, problems
}

// watchHead starts a watch with the given Audit-Id ("" sends none) and
// returns the response headers; the body is dropped.
func watchHead(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values, auditID string) http.Header {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if auditID != "" {
		req.Header.Set(httpapi.HeaderAuditID, auditID)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %s", path, resp.Status)
	}
	return resp.Header
}
