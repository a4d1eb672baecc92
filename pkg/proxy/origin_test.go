package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
)

// TestOriginFilter: with accepted Host patterns and cross-origin rejection
// (the sidecar defaults), requests for other Host names and browser
// requests from other origins get a 403 Status and never reach the
// apiserver; clients that are not browsers (no Origin, no Sec-Fetch-Site)
// on a loopback name pass.
func TestOriginFilter(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, `{"kind":"Upstream"}`)
	}))
	defer up.Close()
	hosts, err := CompileAcceptHosts(DefaultSidecarAcceptHosts)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{AcceptHosts: hosts, RejectCrossOrigin: true})
	port := p.url[strings.LastIndexByte(p.url, ':')+1:]

	tests := []struct {
		name, path, host string
		header           http.Header
		wantRefused      string // message fragment; "" to pass
	}{
		{name: "ip_with_port", path: "/api/v1/namespaces", host: "127.0.0.1:" + port},
		{name: "localhost", path: "/api/v1/namespaces", host: "localhost:" + port},
		{name: "ipv6_loopback", path: "/api/v1/namespaces", host: "[::1]:" + port},
		{name: "ip_without_port", path: "/api/v1/namespaces", host: "127.0.0.1"},
		{name: "same_origin_browser", path: "/api/v1/namespaces", host: "127.0.0.1:" + port,
			header: http.Header{"Origin": {"http://127.0.0.1:" + port}, "Sec-Fetch-Site": {"same-origin"}}},
		{name: "rebound_dns_name", path: "/api/v1/namespaces", host: "attacker.example:" + port, wantRefused: `host "attacker.example"`},
		{name: "rebound_name_health", path: "/healthz", host: "attacker.example", wantRefused: "--accept-hosts"},
		{name: "rebound_name_metrics", path: "/metrics", host: "attacker.example", wantRefused: "--accept-hosts"},
		{name: "loopback_prefix_not_enough", path: "/api/v1/namespaces", host: "localhost.attacker.example", wantRefused: "--accept-hosts"},
		{name: "other_origin", path: "/api/v1/namespaces", host: "127.0.0.1:" + port,
			header: http.Header{"Origin": {"http://attacker.example"}}, wantRefused: "cross-origin"},
		{name: "other_port_same_host", path: "/api/v1/namespaces", host: "127.0.0.1:" + port,
			header: http.Header{"Origin": {"http://127.0.0.1:3000"}}, wantRefused: "cross-origin"},
		{name: "null_origin", path: "/api/v1/namespaces", host: "127.0.0.1:" + port,
			header: http.Header{"Origin": {"null"}}, wantRefused: "cross-origin"},
		{name: "cross_site_fetch", path: "/api/v1/namespaces", host: "127.0.0.1:" + port,
			header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, wantRefused: "cross-site"},
		{name: "websocket_from_other_origin", path: "/api/v1/namespaces/a/pods/p/exec?command=sh", host: "localhost:" + port,
			header: http.Header{"Origin": {"http://attacker.example"}, "Connection": {"Upgrade"}, "Upgrade": {"websocket"},
				"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}, wantRefused: "cross-origin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, p.url+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			req.Host = tc.host
			before := upstreamHits.Load()
			resp, err := p.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			hits := upstreamHits.Load() - before
			if tc.wantRefused != "" {
				checkRefused(t, resp, string(body), tc.wantRefused)
				if hits != 0 {
					t.Errorf("the apiserver saw %d requests, want none", hits)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || string(body) != `{"kind":"Upstream"}` || hits != 1 {
				t.Errorf("got %d %s (%d upstream requests), want the apiserver's answer", resp.StatusCode, body, hits)
			}
		})
	}
}

// TestOriginFilterOff: with no patterns and no cross-origin rejection (the
// delegated-mode defaults) every Host and Origin passes.
func TestOriginFilterOff(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"Upstream"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})
	req, err := http.NewRequest(http.MethodGet, p.url+"/api/v1/namespaces", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "listproxy.example"
	req.Header.Set("Origin", "https://dashboard.example")
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status = %d, want 200", resp.StatusCode)
	}
}
