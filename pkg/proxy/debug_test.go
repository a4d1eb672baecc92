package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// fakeChecker is a ListServer that serves no LIST and counts checks.
type fakeChecker struct {
	checks atomic.Int32
}

func (f *fakeChecker) ServeList(http.ResponseWriter, *http.Request) bool { return false }

func (f *fakeChecker) CheckConsistency(context.Context) ConsistencyReport {
	n := f.checks.Add(1)
	return ConsistencyReport{Duration: "1ms", Results: []ConsistencyResult{{Resource: "pods", Format: "json", Result: ConsistencyMatch, Objects: int(n)}}}
}

func (f *fakeChecker) LastConsistencyReport() (ConsistencyReport, bool) {
	n := f.checks.Load()
	if n == 0 {
		return ConsistencyReport{}, false
	}
	return ConsistencyReport{Duration: "1ms", Results: []ConsistencyResult{{Resource: "pods", Format: "json", Result: ConsistencyMatch, Objects: int(n)}}}, true
}

func TestDebugConsistency(t *testing.T) {
	var upstreamPaths atomic.Value
	upstreamPaths.Store("")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamPaths.Store(upstreamPaths.Load().(string) + r.URL.Path + " ")
		_, _ = io.WriteString(w, "upstream")
	}))
	defer up.Close()
	checker := &fakeChecker{}
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{Lists: checker})

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
	objects := func(body string) int {
		t.Helper()
		var r ConsistencyReport
		if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Results) != 1 {
			t.Fatalf("report %q: %v", body, err)
		}
		return r.Results[0].Objects
	}

	steps := []struct {
		name, method, path string
		wantCode           int
		wantBody           string // substring
		wantObjects        int    // of a report, identifying the check
	}{
		{name: "get_before_any_check", method: http.MethodGet, path: pathConsistency, wantCode: http.StatusNotFound, wantBody: `"message":"no consistency check has run yet`},
		{name: "post_runs_a_check", method: http.MethodPost, path: pathConsistency, wantCode: http.StatusOK, wantObjects: 1},
		{name: "post_again", method: http.MethodPost, path: pathConsistency, wantCode: http.StatusOK, wantObjects: 2},
		{name: "get_last", method: http.MethodGet, path: pathConsistency, wantCode: http.StatusOK, wantObjects: 2},
		{name: "put_not_allowed", method: http.MethodPut, path: pathConsistency, wantCode: http.StatusMethodNotAllowed, wantBody: `"reason":"MethodNotAllowed"`},
		{name: "unknown_debug_path", method: http.MethodGet, path: pathDebugPrefix + "nothing", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "debug_listproxy_itself", method: http.MethodGet, path: "/debug/listproxy", wantCode: http.StatusNotFound, wantBody: `"kind":"Status"`},
		{name: "apiserver_debug_passes_through", method: http.MethodGet, path: "/debug/pprof/", wantCode: http.StatusOK, wantBody: "upstream"},
		{name: "prefix_sibling_passes_through", method: http.MethodGet, path: "/debug/listproxyx", wantCode: http.StatusOK, wantBody: "upstream"},
	}
	for _, s := range steps {
		code, body, hdr := do(s.method, s.path)
		if code != s.wantCode || !strings.Contains(body, s.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", s.name, s.method, s.path, code, body, s.wantCode, s.wantBody)
			continue
		}
		if s.wantObjects != 0 {
			if got := objects(body); got != s.wantObjects {
				t.Errorf("%s: report of check %d, want %d", s.name, got, s.wantObjects)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q", s.name, ct)
			}
		}
	}
	if diff := cmp.Diff("/debug/pprof/ /debug/listproxyx ", upstreamPaths.Load().(string)); diff != "" {
		t.Errorf("paths passed through (-want +got):\n%s", diff)
	}
	if n := checker.checks.Load(); n != 2 {
		t.Errorf("%d checks ran, want 2", n)
	}
}

// TestDebugWithoutChecker: a ListServer that cannot check answers 404.
func TestDebugWithoutChecker(t *testing.T) {
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
