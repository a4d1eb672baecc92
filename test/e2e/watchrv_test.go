package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// watchResult is a whole watch response: its status, headers and frames.
type watchResult struct {
	code   int
	header http.Header
	frames []frame
}

// readWatch sends a watch and reads its frames until the stream ends.
func readWatch(ctx context.Context, c rawClient, path string, q url.Values, f wire.Format) (watchResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return watchResult{}, err
	}
	req.Header.Set("Accept", watchAccept[f])
	resp, err := c.client.Do(req)
	if err != nil {
		return watchResult{}, err
	}
	defer resp.Body.Close()
	res := watchResult{code: resp.StatusCode, header: resp.Header}
	r := &frameReader{format: f, br: bufio.NewReaderSize(resp.Body, 64<<10)}
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		res.frames = append(res.frames, fr)
	}
}

var currentRV = regexp.MustCompile(`current: \d+`)

// TestWatchTooLargeResourceVersion: a watch-list from a resourceVersion
// etcd has not reached gets, per format, the apiserver's answer from
// listproxy: HTTP 200 and one ERROR event carrying the 504 "Too large
// resource version" Status, encoded as the apiserver encodes it. Only the
// "current" revision in the message is each server's own (the apiserver's
// watch cache's, etcd's for listproxy).
func TestWatchTooLargeResourceVersion(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "watch-too-large"
	createNamespaceWithPods(ctx, t, cp, ns, 3)
	cs := cp.Clientset(framework.UserAdmin)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	warmUp(ctx, t, lpc, []target{{path: podsPath}})
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "resourceVersion": {strconv.FormatUint(rv+1_000_000, 10)}, "timeoutSeconds": {"60"}}

	// Both servers wait about 3 s before answering: all at once.
	results := make([]watchResult, 2*len(wire.Formats))
	err = framework.Parallel(ctx, len(results), len(results), func(ctx context.Context, i int) error {
		c := apic
		if i%2 == 1 {
			c = lpc
		}
		var err error
		results[i], err = readWatch(ctx, c, podsPath, q, wire.Formats[i/2])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range wire.Formats {
		api, lpr := results[2*i], results[2*i+1]
		if api.code != http.StatusOK || lpr.code != http.StatusOK {
			t.Errorf("%v: status %d, apiserver %d; want 200", f, lpr.code, api.code)
			continue
		}
		if got := lpr.header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
			t.Errorf("%v: served from %q, want %q", f, got, httpapi.SourceSnapshot)
		}
		if lpr.header.Get("Content-Type") != api.header.Get("Content-Type") {
			t.Errorf("%v: Content-Type %q, apiserver %q", f, lpr.header.Get("Content-Type"), api.header.Get("Content-Type"))
		}
		if len(api.frames) != 1 || len(lpr.frames) != 1 || api.frames[0].typ != wire.Error || lpr.frames[0].typ != wire.Error {
			t.Errorf("%v: listproxy sent %d frames, apiserver %d; want one ERROR each\nlistproxy: %q\napiserver: %q", f, len(lpr.frames), len(api.frames), rawFrames(lpr.frames), rawFrames(api.frames))
			continue
		}
		apiStatus, lpStatus := decodeErrorFrame(t, f, api.frames[0]), decodeErrorFrame(t, f, lpr.frames[0])
		// The encoder reproduces the apiserver's frame from its Status...
		if b, err := wire.AppendErrorEvent(nil, f, apiStatus); err != nil || string(b) != string(api.frames[0].raw) {
			t.Errorf("%v: apiserver's ERROR frame re-encoded differs (%v)\n got: %q\nwant: %q", f, err, b, api.frames[0].raw)
		}
		// ...and listproxy's Status is the apiserver's but for the
		// current revision.
		apiStatus.Message = currentRV.ReplaceAllString(apiStatus.Message, "current: N")
		lpStatus.Message = currentRV.ReplaceAllString(lpStatus.Message, "current: N")
		if diff := cmp.Diff(apiStatus, lpStatus); diff != "" {
			t.Errorf("%v: ERROR Status (-apiserver +listproxy):\n%s", f, diff)
		}
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_watch_ended_total", `resource="pods"`, `reason="error"`); got != float64(len(wire.Formats)) {
		t.Errorf("listproxy_watch_ended_total{reason=error} = %v, want %d", got, len(wire.Formats))
	}
}

func decodeErrorFrame(t *testing.T, f wire.Format, fr frame) *metav1.Status {
	t.Helper()
	d := wire.NewWatchDecoder(f, io.NopCloser(strings.NewReader(string(fr.raw))), wire.WatchOptions{})
	ev, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	st, err := wire.DecodeStatus(f, ev.Object)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWatchFromConsistentBookmark: an informer re-watches from the
// resourceVersion of its consistent watch-list's bookmark, which etcd
// proved and which may be newer than any change the store saw (writes to
// other resources move it). listproxy serves that watch from the store's
// feed, and it carries the next change.
func TestWatchFromConsistentBookmark(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "watch-bookmark-rv"
	createNamespaceWithPods(ctx, t, cp, ns, 3)
	cs := cp.Clientset(framework.UserAdmin)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
	lpc := newRawClient(t, lp.Config())
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	warmPods(ctx, t, lpc, wire.JSON)
	warmUp(ctx, t, lpc, []target{{path: podsPath}})

	// A write to another resource moves etcd's revision past every pod.
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bump"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmRV, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)

	wctx, stopWatch := context.WithCancel(ctx)
	r, hdr := openWatch(wctx, t, lpc, podsPath, url.Values{"watch": {"1"}, "sendInitialEvents": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}, wire.JSON)
	if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
		t.Fatalf("consistent watch-list served from %q", got)
	}
	var bookmarkRV uint64
	for bookmarkRV == 0 {
		fr, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if fr.typ == wire.Bookmark {
			d := wire.NewWatchDecoder(wire.JSON, io.NopCloser(strings.NewReader(string(fr.raw))), wire.WatchOptions{})
			ev, err := d.Next()
			if err != nil || !ev.InitialEventsEnd {
				t.Fatalf("bookmark %q: %v", fr.raw, err)
			}
			bookmarkRV, _ = strconv.ParseUint(ev.ResourceVersion, 10, 64)
		}
	}
	stopWatch()
	if bookmarkRV < cmRV {
		t.Fatalf("consistent watch-list's bookmark at %d, before the configmap's %d", bookmarkRV, cmRV)
	}

	// The re-watch from the bookmark is served, and sends the next change.
	r2, hdr := openWatch(ctx, t, lpc, podsPath, url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatUint(bookmarkRV, 10)},
		"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}, wire.JSON)
	if got := hdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		t.Fatalf("watch from the bookmark's resourceVersion %d served from %q; passed through: %v", bookmarkRV, got, m["listproxy_watch_passed_through_total"])
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, "after", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, err := nextEvents(r2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].typ != wire.Added || !strings.Contains(string(evs[0].raw), `"name":"after"`) {
		t.Errorf("got %s %.100s, want ADDED after", evs[0].typ, evs[0].raw)
	}
}
