package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/listproxy/listproxy/test/framework"
)

// TestSidecarRefusals: listproxy with its defaults (no authentication,
// loopback) refuses, with a 403 Status and without asking the apiserver,
// what would let a caller act with listproxy's identity unintended: a Host
// that is not a loopback name (a web page that rebound its DNS name to
// 127.0.0.1), a browser request from another origin, and a request asking
// to impersonate someone (which would otherwise run as listproxy). A caller
// cannot plant a source address in the apiserver's audit log with
// X-Real-Ip.
func TestSidecarRefusals(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp)
	ctx := context.Background()
	lpHost := strings.TrimPrefix(lp.URL, "http://")
	_, port, _ := strings.Cut(lpHost, ":")
	client := &http.Client{Timeout: time.Minute}

	send := func(t *testing.T, method, path, host string, hdr http.Header, body string) (int, string, metav1.Status) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, lp.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if host != "" {
			req.Host = host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var st metav1.Status
		_ = json.Unmarshal(data, &st)
		return resp.StatusCode, resp.Header.Get("X-Listproxy-Served-From"), st
	}

	refused := []struct {
		name, method, path, host string
		header                   http.Header
		body                     string
		wantMessage              string
	}{
		{name: "rebound_host", method: http.MethodGet, path: "/api/v1/pods", host: "attacker.example:" + port, wantMessage: "attacker.example"},
		{name: "rebound_host_write", method: http.MethodPost, path: "/api/v1/namespaces/default/configmaps", host: "attacker.example",
			body: `{"metadata":{"name":"rebound"}}`, wantMessage: "attacker.example"},
		{name: "cross_origin", method: http.MethodGet, path: "/api/v1/namespaces/default/secrets", header: http.Header{"Origin": {"http://attacker.example"}}, wantMessage: "cross-origin"},
		{name: "cross_site", method: http.MethodGet, path: "/api/v1/namespaces/default/secrets", header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, wantMessage: "cross-site"},
		{name: "impersonating_list", method: http.MethodGet, path: "/api/v1/pods", header: http.Header{"Impersonate-User": {framework.UserBob}}, wantMessage: "Impersonate-"},
		{name: "impersonating_write", method: http.MethodPost, path: "/api/v1/namespaces/default/configmaps", header: http.Header{"Impersonate-User": {framework.UserBob}},
			body: `{"metadata":{"name":"as-bob"}}`, wantMessage: "Impersonate-"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, from, st := send(t, tc.method, tc.path, tc.host, tc.header, tc.body)
			if code != http.StatusForbidden || from != "listproxy" || st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, tc.wantMessage) {
				t.Errorf("%s %s: HTTP %d from %q, Status %q %q; want listproxy's 403 Status mentioning %q", tc.method, tc.path, code, from, st.Reason, st.Message, tc.wantMessage)
			}
		})
	}
	for _, name := range []string{"rebound", "as-bob"} {
		if _, err := cp.Clientset(framework.UserAdmin).CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("configmap %q exists: a refused write reached the apiserver", name)
		}
	}

	t.Run("forwarded_addresses", func(t *testing.T) {
		hdr := http.Header{"X-Forwarded-For": {"203.0.113.7"}, "X-Real-Ip": {"198.51.100.9"}}
		if code, _, st := send(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", "", hdr, `{"metadata":{"name":"forwarded"}}`); code != http.StatusCreated {
			t.Fatalf("create through listproxy: HTTP %d %s", code, st.Message)
		}
		var ev *auditv1.Event
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			events, err := cp.AuditEvents()
			if err != nil {
				return false, err
			}
			for i := range events {
				e := &events[i]
				if e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Name == "forwarded" {
					ev = e
				}
			}
			return ev != nil, nil
		})
		if err != nil {
			t.Fatalf("no audit event for the create: %v", err)
		}
		// The caller's claim, then the address listproxy saw it connect
		// from (loopback here); nothing else.
		want := []string{"203.0.113.7", "127.0.0.1"}
		if !slices.Equal(ev.SourceIPs, want) {
			t.Errorf("audited sourceIPs = %v, want %v", ev.SourceIPs, want)
		}
	})
}
