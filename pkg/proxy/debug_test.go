package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// fakeDebug is a debug handler that names the request it served.
var fakeDebug = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "debug "+r.Method+" "+r.URL.Path)
})

// pathConsistency is where the tests mount fakeDebug.
const pathConsistency = DebugPathPrefix + "consistency"

func TestDebugHandlers(t *testing.T) {
	var upstreamPaths atomic.Value
	upstreamPaths.Store("")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamPaths.Store(upstreamPaths.Load().(string) + r.URL.Path + " ")
		_, _ = io.WriteString(w, "upstream")
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Debug: map[string]http.Handler{"consistency": fakeDebug}})

	do := func(method, path string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, p.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body), resp.Header
	}
	steps := []struct {
		name, method, path string
		wantCode           int
		wantBody           string // substring
	}{
		{name: "get", method: http.MethodGet, path: pathConsistency, wantCode: http.StatusOK, wantBody: "debug GET " + pathConsistency},
		{name: "post", method: http.MethodPost, path: pathConsistency, wantCode: http.StatusOK, wantBody: "debug POST " + pathConsistency},
		{name: "unknown_debug_path", method: http.MethodGet, path: DebugPathPrefix + "nothing", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "debug_listproxy_itself", method: http.MethodGet, path: "/debug/listproxy", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "apiserver_debug_passes_through", method: http.MethodGet, path: "/debug/pprof/", wantCode: http.StatusOK, wantBody: "upstream"},
		{name: "prefix_sibling_passes_through", method: http.MethodGet, path: "/debug/listproxyx", wantCode: http.StatusOK, wantBody: "upstream"},
	}
	for _, s := range steps {
		code, body, _ := do(s.method, s.path)
		if code != s.wantCode || !strings.Contains(body, s.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", s.name, s.method, s.path, code, body, s.wantCode, s.wantBody)
		}
	}
	if diff := cmp.Diff("/debug/pprof/ /debug/listproxyx ", upstreamPaths.Load().(string)); diff != "" {
		t.Errorf("paths passed through (-want +got):\n%s", diff)
	}
}

// TestDebugWithoutHandler: a debug path without a handler answers 404.
func TestDebugWithoutHandler(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})
	resp, body := p.get(t, pathConsistency, nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"kind":"Status"`) {
		t.Errorf("GET %s = %d %q, want a 404 Status", pathConsistency, resp.StatusCode, body)
	}
}

// Profiles are served under pathPprof only when Config.Profiling is set;
// /debug/pprof/ stays the apiserver's.
func TestDebugPprof(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	for _, tc := range []struct {
		name      string
		profiling bool
		path      string
		wantCode  int
		wantBody  string // substring
	}{
		{name: "off", path: pathPprof + "heap?debug=1", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "index", profiling: true, path: pathPprof, wantCode: http.StatusOK, wantBody: pathPprof + "goroutine ("},
		{name: "heap", profiling: true, path: pathPprof + "heap?debug=1", wantCode: http.StatusOK, wantBody: "heap profile:"},
		{name: "goroutine", profiling: true, path: pathPprof + "goroutine?debug=1", wantCode: http.StatusOK, wantBody: "goroutine profile:"},
		{name: "cmdline", profiling: true, path: pathPprof + "cmdline", wantCode: http.StatusOK},
		{name: "unknown_profile", profiling: true, path: pathPprof + "nothing", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "apiserver_pprof_passes_through", profiling: true, path: "/debug/pprof/heap", wantCode: http.StatusOK, wantBody: "upstream /debug/pprof/heap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, &rest.Config{Host: up.URL}, Config{Profiling: tc.profiling})
			resp, body := p.get(t, tc.path, nil)
			if resp.StatusCode != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s = %d %.200q, want %d containing %q", tc.path, resp.StatusCode, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}
