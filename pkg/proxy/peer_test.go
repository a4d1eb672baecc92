package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// Another replica's warm-start list (httpapi.HeaderPeerList) is never passed
// through: what the snapshot server does not answer, and anything else the
// edge would send to the apiserver, gets listproxy's 503, so that the asking
// replica lists from the apiserver itself.
func TestPeerListNeverPassedThrough(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, `{"kind":"ConfigMapList"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Lists: fakeLists{}})
	peer := http.Header{httpapi.HeaderPeerList: {"true"}}

	resp, body := p.get(t, "/api/v1/pods", peer)
	if resp.StatusCode != http.StatusOK || body != `{"kind":"PodList"}` {
		t.Errorf("served list: HTTP %d %q, want the snapshot's answer", resp.StatusCode, body)
	}
	for _, path := range []string{"/api/v1/configmaps", "/api/v1/namespaces/default"} {
		resp, body := p.get(t, path, peer)
		var status metav1.Status
		if err := json.Unmarshal([]byte(body), &status); err != nil || resp.StatusCode != http.StatusServiceUnavailable || status.Message != httpapi.PeerDeclinedMessage {
			t.Errorf("%s: HTTP %d %q, want the peer-declined 503", path, resp.StatusCode, body)
		}
		if got := resp.Header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceListproxy {
			t.Errorf("%s: served from %q, want %q", path, got, httpapi.SourceListproxy)
		}
	}
	if n := upstreamHits.Load(); n != 0 {
		t.Errorf("the apiserver got %d of the peer's requests, want 0", n)
	}
	// Without the header the same requests pass through.
	if resp, _ := p.get(t, "/api/v1/configmaps", nil); resp.Header.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer || upstreamHits.Load() != 1 {
		t.Errorf("an ordinary list was not passed through")
	}
}
