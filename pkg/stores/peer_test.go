package stores

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// The peer's client follows no redirect: client-go adds the bearer token to
// every request its transport sends, so a followed redirect would hand it to
// whatever host (and scheme) the peer names. A redirect fails the list, and
// the store lists from the apiserver.
func TestPeerClientFollowsNoRedirect(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var mu sync.Mutex
			var reached []string // Authorization headers the redirect's target received
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				reached = append(reached, r.Header.Get("Authorization"))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}`)
			}))
			defer target.Close()
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+r.URL.RequestURI(), code)
			}))
			defer peer.Close()
			l, err := New(Config{
				Upstream:          &rest.Config{Host: "http://127.0.0.1:1"},
				Peer:              &rest.Config{Host: peer.URL, BearerToken: "peer-token"},
				DiscoveryInterval: time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			src := &apiSource{client: l.peerClient, host: l.peerHost, path: "/api/v1/pods", format: wire.JSON, peer: true}
			_, err = src.List(context.Background(), 500, "", func([]byte) error { return nil })
			if err == nil {
				t.Errorf("List through a %d succeeded, want an error", code)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reached) != 0 {
				t.Errorf("the redirect's target received %d requests (Authorization %q), want none", len(reached), reached)
			}
		})
	}
}

// peerPod is a pod of a test's lists: namespace, name, uid, resourceVersion.
type peerPod [4]string

func (p peerPod) json() string {
	return fmt.Sprintf(`{"metadata":{"namespace":%q,"name":%q,"uid":%q,"resourceVersion":%q}}`, p[0], p[1], p[2], p[3])
}

// podListJSON is a JSON pod list at rv holding pods, with a continue token
// and remainingItemCount when cont is set.
func podListJSON(rv, cont string, remaining int, pods ...peerPod) string {
	items := make([]string, 0, len(pods))
	for _, p := range pods {
		items = append(items, p.json())
	}
	meta := fmt.Sprintf(`"resourceVersion":%q`, rv)
	if cont != "" {
		meta += fmt.Sprintf(`,"continue":%q,"remainingItemCount":%d`, cont, remaining)
	}
	return fmt.Sprintf(`{"kind":"PodList","apiVersion":"v1","metadata":{%s},"items":[%s]}`, meta, strings.Join(items, ","))
}

// pagedList answers a LIST of pods at rv as the apiserver pages it: limit
// objects from the offset its continue token names.
func pagedList(w http.ResponseWriter, r *http.Request, rv string, pods []peerPod) {
	from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
	to := len(pods)
	if limit, _ := strconv.Atoi(r.URL.Query().Get("limit")); limit > 0 {
		to = min(from+limit, len(pods))
	}
	cont := ""
	if to < len(pods) {
		cont = strconv.Itoa(to)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, podListJSON(rv, cont, len(pods)-to, pods[from:to]...))
}

// fakeAPIServer answers what a peer's list is checked with, for the pods it
// has held since resourceVersion rv: a LIST at rv (exactly, or not older
// than rv), paged (the count asks for one object), and a LIST of one name
// in a namespace at rv. A list without a resourceVersion (a store's own
// list) is answered with the pods at rv, and a watch stays open, quiet. It
// records every request but watches.
type fakeAPIServer struct {
	rv   string
	pods []peerPod // in key order
	// fail, when set, answers every request.
	fail func(w http.ResponseWriter)

	mu    sync.Mutex
	asked []string
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("watch") == "true" {
		<-r.Context().Done()
		return
	}
	f.mu.Lock()
	f.asked = append(f.asked, r.URL.RequestURI())
	f.mu.Unlock()
	if f.fail != nil {
		f.fail(w)
		return
	}
	// Nothing changed since rv: a LIST not older than rv gets the same.
	if rv := q.Get("resourceVersion"); rv != "" && (rv != f.rv || q.Get("resourceVersionMatch") == "") {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	name, ok := strings.CutPrefix(q.Get("fieldSelector"), "metadata.name=")
	if !ok {
		pagedList(w, r, f.rv, f.pods)
		return
	}
	namespace := ""
	if rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/"); ok {
		namespace, _, _ = strings.Cut(rest, "/")
	}
	var found []peerPod
	for _, p := range f.pods {
		if p[0] == namespace && p[1] == name {
			found = append(found, p)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, podListJSON(f.rv, "", 0, found...))
}

func (f *fakeAPIServer) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// countRequest and nameRequest are the requests a check of a list at rv
// sends the apiserver.
func countRequest(rv string) string {
	return "/api/v1/pods?" + url.Values{"limit": {"1"}, "resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}.Encode()
}

func nameRequest(rv string, p peerPod) string {
	path := "/api/v1/pods"
	if p[0] != "" {
		path = "/api/v1/namespaces/" + p[0] + "/pods"
	}
	return path + "?" + url.Values{"fieldSelector": {"metadata.name=" + p[1]}, "resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}.Encode()
}

// listAll reads a whole list from src in pages of limit, as the feeder's
// first list does.
func listAll(src snapshot.Lister, limit int64) (snapshot.ListResult, error) {
	var first snapshot.ListResult
	token := ""
	for {
		res, err := src.List(context.Background(), limit, token, func([]byte) error { return nil })
		if err != nil {
			return res, err
		}
		if token == "" {
			first = res
		}
		if res.Continue == "" {
			return first, nil
		}
		token = res.Continue
	}
}

// A peer's list is trusted only once the apiserver shows it to be its own
// at the list's resourceVersion exactly: it held as many objects then, and
// each object of a sample drawn from the whole list (every object of a list
// this short) with the same uid and resourceVersion. The keys must come in
// the apiserver's order, once each, none newer than the list. A peer in
// front of another cluster (same names, other uids; a resourceVersion the
// apiserver has not reached), one whose list lacks, adds or holds another
// version of any object, or a list with nothing to check is rejected, and
// the store lists from the apiserver.
func TestPeerListVerifiedWithApiserver(t *testing.T) {
	const rv = "40"
	p1, p2, p3 := peerPod{"a", "p1", "uid-1", "10"}, peerPod{"a", "p2", "uid-2", "20"}, peerPod{"b", "p3", "uid-3", "30"}
	held := []peerPod{p1, p2, p3}
	checked := []string{countRequest(rv), nameRequest(rv, p1), nameRequest(rv, p2), nameRequest(rv, p3)}
	tests := []struct {
		name         string
		apiserver    []peerPod                   // nil: held
		fail         func(w http.ResponseWriter) // the apiserver's answer to everything
		peer         []peerPod
		wantRejected bool
		wantAsked    []string // of the apiserver
	}{
		{name: "same_list", peer: held, wantAsked: checked},
		{name: "same_list_in_pages_of_one", peer: held, wantAsked: checked},
		{
			name: "cluster_scoped", apiserver: []peerPod{{"", "n1", "uid-1", "10"}}, peer: []peerPod{{"", "n1", "uid-1", "10"}},
			wantAsked: []string{countRequest(rv), nameRequest(rv, peerPod{"", "n1"})},
		},
		{name: "second_missing", peer: []peerPod{p1, p3}, wantRejected: true, wantAsked: []string{countRequest(rv)}},
		{name: "third_added", peer: []peerPod{p1, p2, p3, {"c", "p4", "uid-4", "35"}}, wantRejected: true, wantAsked: []string{countRequest(rv)}},
		{name: "third_older", peer: []peerPod{p1, p2, {"b", "p3", "uid-3", "25"}}, wantRejected: true, wantAsked: checked},
		{name: "second_other_uid", peer: []peerPod{p1, {"a", "p2", "uid-x", "20"}, p3}, wantRejected: true, wantAsked: checked[:3]},
		{
			name: "other_cluster", peer: []peerPod{{"a", "p1", "x-1", "10"}, {"a", "p2", "x-2", "20"}, {"b", "p3", "x-3", "30"}},
			wantRejected: true, wantAsked: checked[:2],
		},
		{name: "out_of_order", peer: []peerPod{p2, p1, p3}, wantRejected: true},
		{name: "listed_twice", peer: []peerPod{p1, p2, p2}, wantRejected: true},
		{name: "newer_than_the_list", peer: []peerPod{p1, {"a", "p2", "uid-2", "41"}, p3}, wantRejected: true},
		{
			name: "resource_version_too_large", peer: held, wantRejected: true, wantAsked: []string{countRequest(rv)},
			fail: func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusGatewayTimeout)
				fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too large resource version","reason":"Timeout","code":504}`)
			},
		},
		{name: "empty", wantRejected: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pagedList(w, r, rv, tc.peer) }))
			defer peer.Close()
			api := &fakeAPIServer{rv: rv, pods: held, fail: tc.fail}
			if tc.apiserver != nil {
				api.pods = tc.apiserver
			}
			upstream := httptest.NewServer(api)
			defer upstream.Close()
			src := &peerSource{
				main: &apiSource{client: upstream.Client(), host: upstream.URL, path: "/api/v1/pods", format: wire.JSON},
				peer: &apiSource{client: peer.Client(), host: peer.URL, path: "/api/v1/pods", format: wire.JSON, peer: true},
			}
			limit := int64(500)
			if strings.HasSuffix(tc.name, "in_pages_of_one") {
				limit = 1
			}
			res, err := listAll(src, limit)
			if tc.wantRejected {
				if !errors.Is(err, snapshot.ErrWarmRejected) {
					t.Errorf("List() = %v, want ErrWarmRejected", err)
				}
			} else if err != nil || res.ResourceVersion != rv {
				t.Errorf("List() = %+v, %v; want the peer's list at %s", res, err, rv)
			}
			if diff := cmp.Diff(tc.wantAsked, api.requests()); diff != "" {
				t.Errorf("requests to the apiserver (-want +got):\n%s", diff)
			}
		})
	}
}

// The sample is drawn from the whole list, not from its first page: a
// difference in an object of a later page is found when the sample holds
// it. randN chooses object 30 of 40 (listed in pages of 10) for the sample,
// and none after it.
func TestPeerListSampleSpansPages(t *testing.T) {
	const rv = "100"
	var held []peerPod
	for i := range 40 {
		held = append(held, peerPod{"a", fmt.Sprintf("p%02d", i), fmt.Sprintf("uid-%d", i), strconv.Itoa(i + 1)})
	}
	differing := slices.Clone(held)
	differing[30][3] = "5" // an older version of p30
	for _, tc := range []struct {
		name         string
		peer         []peerPod
		wantRejected bool
	}{
		{name: "same", peer: held},
		{name: "object_30_older", peer: differing, wantRejected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pagedList(w, r, rv, tc.peer) }))
			defer peer.Close()
			api := &fakeAPIServer{rv: rv, pods: held}
			upstream := httptest.NewServer(api)
			defer upstream.Close()
			src := &peerSource{
				main: &apiSource{client: upstream.Client(), host: upstream.URL, path: "/api/v1/pods", format: wire.JSON},
				peer: &apiSource{client: peer.Client(), host: peer.URL, path: "/api/v1/pods", format: wire.JSON, peer: true},
				// Object i (0-based) is drawn with randN(i+1): object 30 takes
				// slot 0, no other object after the first 16 enters.
				randN: func(n int) int {
					if n == 31 {
						return 0
					}
					return n - 1
				},
			}
			_, err := listAll(src, 10)
			if got := errors.Is(err, snapshot.ErrWarmRejected); got != tc.wantRejected {
				t.Errorf("List() = %v; rejected %v, want %v", err, got, tc.wantRejected)
			}
			asked := api.requests()
			if len(asked) == 0 || asked[0] != countRequest(rv) {
				t.Fatalf("requests to the apiserver %v, want the count first", asked)
			}
			if !slices.Contains(asked, nameRequest(rv, held[30])) {
				t.Errorf("requests to the apiserver %v: object 30, drawn for the sample, was not checked", asked)
			}
			if !tc.wantRejected && len(asked) != 1+peerSampleSize {
				t.Errorf("%d requests to the apiserver, want the count and %d objects", len(asked), peerSampleSize)
			}
		})
	}
}

// A store whose peer lists another version of an object that is not the
// first is filled from the apiserver's own list instead.
func TestPeerListRejectedFallsBack(t *testing.T) {
	const rv = "40"
	held := []peerPod{{"a", "p1", "uid-1", "10"}, {"a", "p2", "uid-2", "20"}, {"b", "p3", "uid-3", "30"}}
	stale := slices.Clone(held)
	stale[1][3] = "15"
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pagedList(w, r, rv, stale) }))
	defer peer.Close()
	api := &fakeAPIServer{rv: rv, pods: held}
	upstream := httptest.NewServer(api)
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := catalog.NewResource(podsGVR, "Pod", true, false)
	reg, err := NewStatic(ctx, Config{Upstream: &rest.Config{Host: upstream.URL}, ColdStoreWait: time.Minute}, []*catalog.Resource{pods})
	if err != nil {
		t.Fatal(err)
	}
	reg.peerClient, reg.peerHost = peer.Client(), peer.URL
	h, reason, ok := reg.Acquire(ctx, pods, wire.JSON, false)
	if !ok {
		t.Fatalf("Acquire = %q, want a store", reason)
	}
	defer h.Release()
	if !h.AwaitSynced(ctx) {
		t.Fatal("the store did not sync")
	}
	snap, _, err := h.Store().Latest()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := snap.Get("a/p2"); !ok || e.RV != 20 {
		var got uint64
		if ok {
			got = e.RV
		}
		t.Errorf("the store holds a/p2 at resourceVersion %d (found: %v), want the apiserver's 20, not the peer's 15", got, ok)
	}
	if asked := api.requests(); !slices.Contains(asked, "/api/v1/pods?limit=500") {
		t.Errorf("requests to the apiserver %v: the store did not list from it", asked)
	}
}
