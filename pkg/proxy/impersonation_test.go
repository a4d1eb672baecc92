package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// checkRefused checks that resp is listproxy's own 403 Status whose message
// contains wantMessage.
func checkRefused(t *testing.T, resp *http.Response, body, wantMessage string) {
	t.Helper()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status = %d, want 403; body %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceListproxy {
		t.Errorf("%s = %q, want %q", httpapi.HeaderServedFrom, got, httpapi.SourceListproxy)
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, body)
	}
	if st.Kind != "Status" || st.Reason != metav1.StatusReasonForbidden || st.Code != http.StatusForbidden {
		t.Errorf("Status = %+v, want kind Status, reason Forbidden, code 403", st)
	}
	if !strings.Contains(st.Message, wantMessage) {
		t.Errorf("Status message %q does not mention %q", st.Message, wantMessage)
	}
}

// TestSidecarRefusesImpersonation: without authentication every request runs
// as listproxy, so a request asking to act as someone else (typically with
// less privilege) is refused with a 403 Status saying why, whether it would
// be answered from a snapshot or passed through; it never runs silently as
// listproxy.
func TestSidecarRefusesImpersonation(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, `{"kind":"Upstream"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL, BearerToken: upstreamToken}, Config{Lists: fakeLists{}})

	tests := []struct {
		name, path string
		header     http.Header
	}{
		{name: "cached_list_user", path: "/api/v1/pods", header: http.Header{"Impersonate-User": {"alice"}}},
		{name: "cached_list_user_and_group", path: "/api/v1/pods", header: http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"team-a"}}},
		{name: "get_passed_through", path: "/api/v1/namespaces/a/configmaps/x", header: http.Header{"Impersonate-User": {"alice"}}},
		{name: "uid_only", path: "/api/v1/namespaces", header: http.Header{"Impersonate-Uid": {"1"}}},
		{name: "extra_only", path: "/api/v1/namespaces", header: http.Header{"Impersonate-Extra-Scopes": {"view"}}},
		{name: "lower_case_name", path: "/api/v1/pods", header: http.Header{"impersonate-user": {"alice"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := upstreamHits.Load()
			resp, body := p.get(t, tc.path, tc.header)
			checkRefused(t, resp, body, "Impersonate-")
			if n := upstreamHits.Load() - before; n != 0 {
				t.Errorf("the apiserver saw %d requests, want none", n)
			}
		})
	}

	// Without impersonation the same requests are served as before.
	if resp, body := p.get(t, "/api/v1/pods", nil); resp.StatusCode != http.StatusOK || body != `{"kind":"PodList"}` {
		t.Errorf("plain LIST: %d %s, want the snapshot's answer", resp.StatusCode, body)
	}
}
