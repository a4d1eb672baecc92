package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testProxy is a Handler served by an httptest server.
type testProxy struct {
	*Handler
	url    string
	reg    *prometheus.Registry
	client *http.Client
}

// startProxy serves a Handler for upstream. cfg.Upstream and cfg.Registry are
// filled in.
func startProxy(t *testing.T, upstream *rest.Config, cfg Config) *testProxy {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Upstream = upstream
	cfg.Registry = reg
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	// DisableCompression: tests set Accept-Encoding themselves.
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &testProxy{Handler: h, url: srv.URL, reg: reg, client: &http.Client{Transport: tr}}
}

// get sends a GET for path and returns the response with its body read.
func (p *testProxy) get(t *testing.T, path string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", path, err)
	}
	return resp, string(body)
}

func TestHealthz(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	up.Close() // /healthz must not depend on the apiserver
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})

	resp, body := p.get(t, "/healthz", nil)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz = %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	p.Drain()
	resp, body = p.get(t, "/healthz", nil)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz while draining = %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
}

func TestReadyz(t *testing.T) {
	var upstreamReady atomic.Bool
	var probes atomic.Int32
	upstreamReady.Store(true)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("upstream got %s, want only /readyz", r.URL.Path)
		}
		probes.Add(1)
		if !upstreamReady.Load() {
			http.Error(w, "[-]etcd failed", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	clk := clocktesting.NewFakeClock(time.Now())
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Clock: clk})

	steps := []struct {
		name       string
		ready      bool          // upstream answers 200
		step       time.Duration // clock step before the request
		drain      bool
		wantCode   int
		wantProbes int32
	}{
		{name: "ready", ready: true, wantCode: http.StatusOK, wantProbes: 1},
		{name: "cached_while_upstream_fails", ready: false, step: readyCacheTTL / 2, wantCode: http.StatusOK, wantProbes: 1},
		{name: "expired_upstream_fails", ready: false, step: readyCacheTTL, wantCode: http.StatusServiceUnavailable, wantProbes: 2},
		{name: "failure_cached", ready: true, wantCode: http.StatusServiceUnavailable, wantProbes: 2},
		{name: "recovered", ready: true, step: readyCacheTTL, wantCode: http.StatusOK, wantProbes: 3},
		{name: "draining", ready: true, step: readyCacheTTL, drain: true, wantCode: http.StatusServiceUnavailable, wantProbes: 3},
	}
	for _, s := range steps {
		upstreamReady.Store(s.ready)
		clk.Step(s.step)
		if s.drain {
			p.Drain()
		}
		resp, body := p.get(t, "/readyz", nil)
		if resp.StatusCode != s.wantCode {
			t.Errorf("%s: GET /readyz = %d %q, want %d", s.name, resp.StatusCode, body, s.wantCode)
		}
		if s.wantCode == http.StatusOK && body != "ok" {
			t.Errorf("%s: GET /readyz body = %q, want \"ok\"", s.name, body)
		}
		if got := probes.Load(); got != s.wantProbes {
			t.Errorf("%s: upstream probed %d times, want %d", s.name, got, s.wantProbes)
		}
	}
}

// Config.Ready (discovery read, preloaded stores synced) is part of
// /readyz.
func TestReadyzOwnCheck(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	var cold atomic.Bool
	cold.Store(true)
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Ready: func() error {
		if cold.Load() {
			return errors.New("store pods has not synced yet")
		}
		return nil
	}})
	resp, body := p.get(t, "/readyz", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "store pods has not synced yet") {
		t.Errorf("GET /readyz with a cold store = %d %q, want 503 naming it", resp.StatusCode, body)
	}
	cold.Store(false)
	if resp, body := p.get(t, "/readyz", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz once synced = %d %q, want 200", resp.StatusCode, body)
	}
}

func TestReadyzUpstreamDown(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})
	resp, body := p.get(t, "/readyz", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "readyz check failed") {
		t.Errorf("GET /readyz = %d %q, want 503 naming the failed check", resp.StatusCode, body)
	}
}

func TestMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/default/pods/missing" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})

	for _, path := range []string{
		"/api/v1/pods",
		"/api/v1/pods?shardSelector=" + url.QueryEscape("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"),
		"/api/v1/namespaces/default/pods/missing",
		"/apis/apps/v1/namespaces/default/deployments?watch=true",
		"/version",
		"/healthz", // served by listproxy, not counted
	} {
		p.get(t, path, nil)
	}

	want := `
# HELP listproxy_http_requests_total API requests by Kubernetes verb, HTTP status code and source (apiserver: passed through; snapshot: served by listproxy). Code 499: the client left before an answer.
# TYPE listproxy_http_requests_total counter
listproxy_http_requests_total{code="200",source="apiserver",verb="list"} 2
listproxy_http_requests_total{code="200",source="apiserver",verb="other"} 1
listproxy_http_requests_total{code="200",source="apiserver",verb="watch"} 1
listproxy_http_requests_total{code="404",source="apiserver",verb="get"} 1
`
	awaitRequestsMetric(t, p.reg, want)
	if got, want := testutil.CollectAndCount(p.reg, "listproxy_http_request_duration_seconds"), 4; got != want {
		t.Errorf("listproxy_http_request_duration_seconds has %d series, want %d", got, want)
	}

	resp, body := p.get(t, "/metrics", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	for _, s := range []string{
		`listproxy_http_requests_total{code="200",source="apiserver",verb="list"} 2`,
		`listproxy_http_request_duration_seconds_bucket{source="apiserver",verb="list",le="+Inf"} 2`,
		`listproxy_http_sharded_requests_total{source="apiserver",verb="list"} 1`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("GET /metrics lacks %q", s)
		}
	}
	if s := `listproxy_http_sharded_requests_total{source="apiserver",verb="watch"}`; strings.Contains(body, s) {
		t.Errorf("GET /metrics counts a watch without a shardSelector as sharded: %q", s)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		header http.Header
		want   requestKind
	}{
		{name: "list", method: "GET", path: "/api/v1/namespaces/ns/pods", want: requestKind{verb: "list"}},
		{name: "list_cluster_scoped_group", method: "GET", path: "/apis/apps/v1/deployments", want: requestKind{verb: "list"}},
		{name: "watch_param", method: "GET", path: "/api/v1/pods?watch=true", want: requestKind{verb: "watch", longRunning: true}},
		{name: "watch_legacy_path", method: "GET", path: "/api/v1/watch/pods", want: requestKind{verb: "watch", longRunning: true}},
		{name: "get", method: "GET", path: "/api/v1/namespaces/ns/pods/p", want: requestKind{verb: "get"}},
		{name: "create", method: "POST", path: "/api/v1/namespaces/ns/pods", want: requestKind{verb: "create"}},
		{name: "update", method: "PUT", path: "/api/v1/namespaces/ns/pods/p", want: requestKind{verb: "update"}},
		{name: "patch", method: "PATCH", path: "/api/v1/namespaces/ns/pods/p", want: requestKind{verb: "patch"}},
		{name: "delete", method: "DELETE", path: "/api/v1/namespaces/ns/pods/p", want: requestKind{verb: "delete"}},
		{name: "deletecollection", method: "DELETE", path: "/api/v1/namespaces/ns/pods", want: requestKind{verb: "deletecollection"}},
		{name: "status_subresource", method: "PUT", path: "/api/v1/namespaces/ns/pods/p/status", want: requestKind{verb: "update"}},
		{name: "log_follow", method: "GET", path: "/api/v1/namespaces/ns/pods/p/log?follow=true", want: requestKind{verb: "get", longRunning: true}},
		{name: "exec_spdy", method: "POST", path: "/api/v1/namespaces/ns/pods/p/exec",
			header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, want: requestKind{verb: "connect", longRunning: true}},
		{name: "exec_websocket", method: "GET", path: "/api/v1/namespaces/ns/pods/p/exec",
			header: http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}}, want: requestKind{verb: "connect", longRunning: true}},
		{name: "portforward_without_upgrade", method: "POST", path: "/api/v1/namespaces/ns/pods/p/portforward", want: requestKind{verb: "connect", longRunning: true}},
		{name: "node_proxy", method: "GET", path: "/api/v1/nodes/n/proxy/metrics", want: requestKind{verb: "connect", longRunning: true}},
		{name: "discovery", method: "GET", path: "/apis", want: requestKind{verb: "other"}},
		{name: "version", method: "GET", path: "/version", want: requestKind{verb: "other"}},
		{name: "openapi", method: "GET", path: "/openapi/v3", want: requestKind{verb: "other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			for k, v := range tc.header {
				r.Header[k] = v
			}
			if diff := cmp.Diff(tc.want, classify(r), cmp.AllowUnexported(requestKind{})); diff != "" {
				t.Errorf("classify(%s %s) (-want +got):\n%s", tc.method, tc.path, diff)
			}
		})
	}
}

// fakeLists serves LISTs of pods and passes everything else through.
type fakeLists struct{}

func (fakeLists) Cacheable(*http.Request) bool { return true }

func (fakeLists) TranslateContinue(*http.Request) {}

func (fakeLists) ServeList(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != "/api/v1/pods" {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"PodList"}`)
	return true
}

// awaitRequestsMetric waits until listproxy_http_requests_total in reg is
// want. A request is counted as its handler returns, which may be after the
// client has read a response with a Content-Length.
func awaitRequestsMetric(t *testing.T, reg prometheus.Gatherer, want string) {
	t.Helper()
	var err error
	_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		err = testutil.GatherAndCompare(reg, strings.NewReader(want), "listproxy_http_requests_total")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestListServerHook(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, `{"kind":"ConfigMapList"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Lists: fakeLists{}})

	tests := []struct {
		name, path, wantBody, wantFrom string
		wantUpstreamHits               int32
	}{
		{name: "served_from_snapshot", path: "/api/v1/pods", wantBody: `{"kind":"PodList"}`, wantFrom: httpapi.SourceSnapshot, wantUpstreamHits: 0},
		{name: "declined_passes_through", path: "/api/v1/configmaps", wantBody: `{"kind":"ConfigMapList"}`, wantFrom: httpapi.SourceAPIServer, wantUpstreamHits: 1},
		{name: "watch_not_offered", path: "/api/v1/pods?watch=1", wantBody: `{"kind":"ConfigMapList"}`, wantFrom: httpapi.SourceAPIServer, wantUpstreamHits: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := p.get(t, tc.path, nil)
			if body != tc.wantBody {
				t.Errorf("body = %q, want %q", body, tc.wantBody)
			}
			if got := resp.Header.Values(httpapi.HeaderServedFrom); !cmp.Equal(got, []string{tc.wantFrom}) {
				t.Errorf("%s = %q, want [%q]", httpapi.HeaderServedFrom, got, tc.wantFrom)
			}
			if got := upstreamHits.Load(); got != tc.wantUpstreamHits {
				t.Errorf("upstream hits = %d, want %d", got, tc.wantUpstreamHits)
			}
		})
	}
	want := `
# HELP listproxy_http_requests_total API requests by Kubernetes verb, HTTP status code and source (apiserver: passed through; snapshot: served by listproxy). Code 499: the client left before an answer.
# TYPE listproxy_http_requests_total counter
listproxy_http_requests_total{code="200",source="apiserver",verb="list"} 1
listproxy_http_requests_total{code="200",source="apiserver",verb="watch"} 1
listproxy_http_requests_total{code="200",source="snapshot",verb="list"} 1
`
	awaitRequestsMetric(t, p.reg, want)
}

func TestNewHandlerErrors(t *testing.T) {
	if _, err := NewHandler(Config{}); err == nil {
		t.Error("NewHandler without Upstream succeeded, want error")
	}
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Registry: reg})
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	defer func() { _ = h.Shutdown(context.Background()) }()
	if _, err := NewHandler(Config{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Registry: reg}); err == nil {
		t.Error("second NewHandler on one registry succeeded, want duplicate registration error")
	}
}

// fakeWatches serves watches of pods and passes everything else through.
type fakeWatches struct{}

func (fakeWatches) ServeWatch(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != "/api/v1/pods" {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"type":"BOOKMARK"}`+"\n")
	return true
}

func (fakeWatches) Cacheable(r *http.Request) bool { return r.URL.Path == "/api/v1/pods" }

func (fakeWatches) PassedThrough(*http.Request, string) {}

func TestWatchServerHook(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Watches: fakeWatches{}})

	tests := []struct {
		name, path, wantBody, wantFrom string
		wantUpstreamHits               int32
	}{
		{name: "served_from_snapshot", path: "/api/v1/pods?watch=1", wantBody: `{"type":"BOOKMARK"}` + "\n", wantFrom: httpapi.SourceSnapshot, wantUpstreamHits: 0},
		{name: "declined_passes_through", path: "/api/v1/configmaps?watch=1", wantBody: `{"type":"ADDED"}` + "\n", wantFrom: httpapi.SourceAPIServer, wantUpstreamHits: 1},
		{name: "list_not_offered", path: "/api/v1/pods", wantBody: `{"type":"ADDED"}` + "\n", wantFrom: httpapi.SourceAPIServer, wantUpstreamHits: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := p.get(t, tc.path, nil)
			if body != tc.wantBody {
				t.Errorf("body = %q, want %q", body, tc.wantBody)
			}
			if got := resp.Header.Values(httpapi.HeaderServedFrom); !cmp.Equal(got, []string{tc.wantFrom}) {
				t.Errorf("%s = %q, want [%q]", httpapi.HeaderServedFrom, got, tc.wantFrom)
			}
			if got := upstreamHits.Load(); got != tc.wantUpstreamHits {
				t.Errorf("upstream hits = %d, want %d", got, tc.wantUpstreamHits)
			}
		})
	}
	want := `
# HELP listproxy_http_requests_total API requests by Kubernetes verb, HTTP status code and source (apiserver: passed through; snapshot: served by listproxy). Code 499: the client left before an answer.
# TYPE listproxy_http_requests_total counter
listproxy_http_requests_total{code="200",source="apiserver",verb="list"} 1
listproxy_http_requests_total{code="200",source="apiserver",verb="watch"} 1
listproxy_http_requests_total{code="200",source="snapshot",verb="watch"} 1
`
	awaitRequestsMetric(t, p.reg, want)
}
