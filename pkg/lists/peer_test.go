package lists

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

var peerHeader = http.Header{httpapi.HeaderPeerList: {"true"}}

// A peer's list is served from a synced store, page by page, exactly as any
// other client's.
func TestPeerListServedFromSyncedStore(t *testing.T) {
	entries := []*snapshot.Entry{testPod("a", "p1", 3), testPod("a", "p2", 4), testPod("b", "p1", 5)}
	l, _ := newServeTestLists(t, Config{}, entries, 9)
	q := url.Values{"limit": {"2"}, "resourceVersion": {"9"}, "resourceVersionMatch": {"NotOlderThan"}}
	served, rec, _ := serveTest(l, "/api/v1/pods", q, peerHeader)
	if !served || rec.Code != http.StatusOK {
		t.Fatalf("served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
	}
	var list testList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Metadata.Continue == "" || list.Metadata.ResourceVersion != "9" {
		t.Fatalf("first page: %d items, continue %q, resourceVersion %q; want 2, a token, 9", len(list.Items), list.Metadata.Continue, list.Metadata.ResourceVersion)
	}
	served, rec, _ = serveTest(l, "/api/v1/pods", url.Values{"limit": {"2"}, "continue": {list.Metadata.Continue}}, peerHeader)
	if !served || rec.Code != http.StatusOK {
		t.Fatalf("second page: served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
	}
}

// What listproxy would wait for or start a store for, a peer's list gets
// declined at once with a 503: a store still syncing (even with a long
// --cold-store-wait) and a store not running (none is started). What
// ServeList does not serve it leaves to the edge, which declines a peer's
// list instead of passing it through (pkg/proxy).
func TestPeerListDeclined(t *testing.T) {
	l, _ := coldTestLists(t, time.Hour)
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	l.registry.resources[nodes] = &resourceInfo{GVR: nodes, Kind: "Node", fingerprint: "test"}
	tests := []struct {
		name   string
		path   string
		q      url.Values
		served bool // false: left to the edge
	}{
		{name: "store_syncing", path: "/api/v1/pods", q: url.Values{"limit": {"500"}}, served: true},
		{name: "store_not_running", path: "/api/v1/nodes", q: url.Values{"limit": {"500"}}, served: true},
		{name: "not_cacheable", path: "/api/v1/pods", q: url.Values{"limit": {"500"}, "unknownOption": {"x"}}},
		{name: "unknown_resource", path: "/api/v1/widgets", q: url.Values{"limit": {"500"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served, rec, _ := serveTest(l, tc.path, tc.q, peerHeader)
			if !tc.served {
				if served {
					t.Fatalf("answered HTTP %d %s; want it left to the edge", rec.Code, rec.Body.String())
				}
				return
			}
			if !served || rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("served %v, HTTP %d %s; want a 503 from listproxy", served, rec.Code, rec.Body.String())
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || status.Message != httpapi.PeerDeclinedMessage {
				t.Fatalf("status %+v (%v), want the peer-declined Status", status, err)
			}
		})
	}
	if _, ok := l.stores[storeKey{gvr: nodes, format: wire.JSON}]; ok {
		t.Error("a peer's list started a store")
	}
}

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

// podListJSON is a JSON pod list at rv holding pods given as
// namespace/name/uid.
func podListJSON(rv string, pods ...[3]string) string {
	var items []string
	for _, p := range pods {
		items = append(items, fmt.Sprintf(`{"metadata":{"namespace":%q,"name":%q,"uid":%q,"resourceVersion":"3"}}`, p[0], p[1], p[2]))
	}
	return fmt.Sprintf(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(items, ","))
}

// A peer's list is trusted only once the apiserver shows that the first
// object it lists is one of its own: a name-scoped LIST of it, not older
// than the peer's resourceVersion, finds it with the same uid. A peer in
// front of another cluster (same names, other uids; a resourceVersion the
// apiserver has not reached) or a list with nothing to check is rejected,
// and the store lists from the apiserver.
func TestPeerListVerifiedWithApiserver(t *testing.T) {
	const peerRV = "40"
	tests := []struct {
		name         string
		peerList     string
		upstream     func(w http.ResponseWriter) // nil: never asked
		wantPath     string                      // of the apiserver's request; "" for /api/v1/namespaces/a/pods
		wantRejected bool
	}{
		{
			name:     "same_object",
			peerList: podListJSON(peerRV, [3]string{"a", "p1", "uid-1"}, [3]string{"b", "p2", "uid-2"}),
			upstream: func(w http.ResponseWriter) { fmt.Fprint(w, podListJSON("41", [3]string{"a", "p1", "uid-1"})) },
		},
		{
			name:     "cluster_scoped",
			peerList: podListJSON(peerRV, [3]string{"", "p1", "uid-1"}),
			upstream: func(w http.ResponseWriter) { fmt.Fprint(w, podListJSON("41", [3]string{"", "p1", "uid-1"})) },
			wantPath: "/api/v1/pods",
		},
		{
			name:         "other_uid",
			peerList:     podListJSON(peerRV, [3]string{"a", "p1", "uid-of-another-cluster"}),
			upstream:     func(w http.ResponseWriter) { fmt.Fprint(w, podListJSON("41", [3]string{"a", "p1", "uid-1"})) },
			wantRejected: true,
		},
		{
			name:         "not_found",
			peerList:     podListJSON(peerRV, [3]string{"a", "p1", "uid-1"}),
			upstream:     func(w http.ResponseWriter) { fmt.Fprint(w, podListJSON("41")) },
			wantRejected: true,
		},
		{
			name:     "resource_version_too_large",
			peerList: podListJSON(peerRV, [3]string{"a", "p1", "uid-1"}),
			upstream: func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusGatewayTimeout)
				fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too large resource version","reason":"Timeout","code":504}`)
			},
			wantRejected: true,
		},
		{
			name:         "empty",
			peerList:     podListJSON(peerRV),
			wantRejected: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, tc.peerList)
			}))
			defer peer.Close()
			var mu sync.Mutex
			var asked []string // the apiserver's requests
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				asked = append(asked, r.URL.RequestURI())
				mu.Unlock()
				if tc.upstream == nil {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				tc.upstream(w)
			}))
			defer upstream.Close()
			src := peerSource{
				main: &apiSource{client: upstream.Client(), host: upstream.URL, path: "/api/v1/pods", format: wire.JSON},
				peer: &apiSource{client: peer.Client(), host: peer.URL, path: "/api/v1/pods", format: wire.JSON, peer: true},
			}
			res, err := src.List(context.Background(), 500, "", func([]byte) error { return nil })
			if tc.wantRejected {
				if !errors.Is(err, snapshot.ErrWarmRejected) {
					t.Errorf("List() = %v, want ErrWarmRejected", err)
				}
			} else if err != nil || res.ResourceVersion != peerRV {
				t.Errorf("List() = %+v, %v; want the peer's list at %s", res, err, peerRV)
			}
			mu.Lock()
			defer mu.Unlock()
			var want []string
			if tc.upstream != nil {
				q := url.Values{"fieldSelector": {"metadata.name=p1"}, "resourceVersion": {peerRV}, "resourceVersionMatch": {"NotOlderThan"}}
				path := "/api/v1/namespaces/a/pods"
				if tc.wantPath != "" {
					path = tc.wantPath
				}
				want = []string{path + "?" + q.Encode()}
			}
			if diff := cmp.Diff(want, asked); diff != "" {
				t.Errorf("requests to the apiserver (-want +got):\n%s", diff)
			}
		})
	}
}
