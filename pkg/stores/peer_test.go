package stores

import (
	"context"
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
	"k8s.io/client-go/rest"

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
