package consistency

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeChecker counts checks.
type fakeChecker struct {
	checks atomic.Int32
}

func (f *fakeChecker) Check(context.Context) Report {
	n := f.checks.Add(1)
	return Report{Duration: "1ms", Results: []Result{{Resource: "pods", Format: "json", Result: Match, Objects: int(n)}}}
}

func (f *fakeChecker) Last() (Report, bool) {
	n := f.checks.Load()
	if n == 0 {
		return Report{}, false
	}
	return Report{Duration: "1ms", Results: []Result{{Resource: "pods", Format: "json", Result: Match, Objects: int(n)}}}, true
}

func TestConsistencyHandler(t *testing.T) {
	checker := &fakeChecker{}
	srv := httptest.NewServer(Handler(checker))
	defer srv.Close()
	const pathConsistency = "/debug/listproxy/consistency"

	do := func(method, path string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
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
		var r Report
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
	if n := checker.checks.Load(); n != 2 {
		t.Errorf("%d checks ran, want 2", n)
	}
}
