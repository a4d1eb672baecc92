package lists

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
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
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	l, _ := newServeTestListsWith(t, Config{}, stores.Config{ColdStoreWait: time.Hour}, 0, nil, 0, catalog.NewResource(nodes, "Node", false, false))
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
	if l.stores.Store(nodes, wire.JSON) != nil {
		t.Error("a peer's list started a store")
	}
}
