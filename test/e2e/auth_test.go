package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/test/framework"
)

// authTTL is the allow and deny TTL of the listproxy under test: grants and
// revocations must show within it (plus the apiserver's own RBAC delay,
// which the test waits out by asking the apiserver first).
const authTTL = 2 * time.Second

// authSlack covers polling and request latency on top of authTTL.
const authSlack = 1500 * time.Millisecond

// authAnswer is an HTTP response as the tests compare it.
type authAnswer struct {
	code       int
	servedFrom string
	body       []byte
}

func (a authAnswer) String() string {
	return fmt.Sprintf("%d (%s=%q) %s", a.code, httpapi.HeaderServedFrom, a.servedFrom, bytes.TrimSpace(a.body))
}

// do sends one request with cfg's credentials.
func authDo(t *testing.T, cfg *rest.Config, method, path string, hdr http.Header, body string) authAnswer {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("http client: %v", err)
	}
	req, err := http.NewRequest(method, cfg.Host+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", acceptJSON)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return authAnswer{code: resp.StatusCode, servedFrom: resp.Header.Get(httpapi.HeaderServedFrom), body: b}
}

// sameRefusal checks that listproxy and the apiserver refuse path alike:
// same status code and byte-identical Status.
func authSameRefusal(t *testing.T, via, direct *rest.Config, path string, wantCode int) {
	t.Helper()
	got := authDo(t, via, http.MethodGet, path, nil, "")
	want := authDo(t, direct, http.MethodGet, path, nil, "")
	if want.code != wantCode {
		t.Fatalf("apiserver: GET %s = %v, want %d", path, want, wantCode)
	}
	if got.code != want.code || !bytes.Equal(got.body, want.body) {
		t.Errorf("GET %s:\nlistproxy: %v\napiserver: %v", path, got, want)
	}
}

// waitFor polls cond every 100ms until it holds or timeout passes, and
// returns how long that took.
func authWaitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %v", what, timeout)
	}
	return time.Since(start)
}

// podReader may list pods and create configmaps in its namespace.
func authPodReader(ns string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create"}},
		},
	}
}

func authBinding(ns string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-readers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   subjects,
	}
}

var (
	authSubjectAlice = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: framework.UserAlice}
	authSubjectTeamC = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-c"}
)

// TestAuthDelegated runs listproxy in service mode against the apiserver's
// real authentication and RBAC: cached LISTs are authorized per caller,
// refusals match the apiserver's byte for byte, grants and revocations take
// effect within the cache TTLs, and pass-through writes carry the caller's
// identity.
func TestAuthDelegated(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	admin := cp.Clientset(framework.UserAdmin)
	for _, ns := range []string{"a", "b"} {
		createNamespaceWithPods(ctx, t, cp, ns, 3)
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, authPodReader(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().RoleBindings("a").Create(ctx, authBinding("a", authSubjectAlice, authSubjectTeamC), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lp := framework.StartListproxy(t, cp,
		"--authentication=delegated",
		"--client-ca-file="+cp.CAFile,
		"--resources=pods",
		// alice may not start a store (she reads one namespace): the
		// store she is served from is preloaded.
		"--preload=pods/json",
		"--authorization-allow-ttl="+authTTL.String(),
		"--authorization-deny-ttl="+authTTL.String(),
	)
	alice, aliceDirect := lp.UserConfig(framework.UserAlice), cp.UserConfig(framework.UserAlice)
	const (
		clusterPods = "/api/v1/pods?resourceVersion=0"
		podsInA     = "/api/v1/namespaces/a/pods?resourceVersion=0"
		podsInB     = "/api/v1/namespaces/b/pods?resourceVersion=0"
	)
	servedFromSnapshot := func(cfg *rest.Config, path string) func() bool {
		return func() bool {
			a := authDo(t, cfg, http.MethodGet, path, nil, "")
			return a.code == http.StatusOK && a.servedFrom == httpapi.SourceSnapshot
		}
	}

	t.Run("cluster_wide_list_forbidden", func(t *testing.T) {
		authSameRefusal(t, alice, aliceDirect, clusterPods, http.StatusForbidden)
		got := authDo(t, alice, http.MethodGet, clusterPods, nil, "")
		if want := `pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" at the cluster scope`; !strings.Contains(string(got.body), want) {
			t.Errorf("body %s lacks %s", got.body, want)
		}
		if got.servedFrom != httpapi.SourceListproxy {
			t.Errorf("%s = %q, want %q", httpapi.HeaderServedFrom, got.servedFrom, httpapi.SourceListproxy)
		}
	})
	t.Run("namespace_a_served_from_snapshot", func(t *testing.T) {
		authWaitFor(t, "alice's LIST in a served from the snapshot", 30*time.Second, servedFromSnapshot(alice, podsInA))
		got := authDo(t, alice, http.MethodGet, podsInA, nil, "")
		var list corev1.PodList
		if err := json.Unmarshal(got.body, &list); err != nil || len(list.Items) != 3 {
			t.Errorf("LIST pods in a = %v (%d items, err %v), want 3 pods", got.code, len(list.Items), err)
		}
	})
	t.Run("uncached_list_passes_through", func(t *testing.T) {
		const path = "/api/v1/namespaces/b/configmaps"
		authSameRefusal(t, alice, aliceDirect, path, http.StatusForbidden)
		if got := authDo(t, alice, http.MethodGet, path, nil, ""); got.servedFrom != httpapi.SourceAPIServer {
			t.Errorf("%s = %q, want %q: configmaps are not cached, so the apiserver decides", httpapi.HeaderServedFrom, got.servedFrom, httpapi.SourceAPIServer)
		}
	})
	t.Run("namespace_b_forbidden", func(t *testing.T) {
		authSameRefusal(t, alice, aliceDirect, podsInB, http.StatusForbidden)
	})
	t.Run("grant_follows_within_deny_ttl", func(t *testing.T) {
		if _, err := admin.RbacV1().RoleBindings("b").Create(ctx, authBinding("b", authSubjectAlice), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		authWaitFor(t, "apiserver allows alice in b", 30*time.Second, func() bool {
			return authDo(t, aliceDirect, http.MethodGet, podsInB, nil, "").code == http.StatusOK
		})
		took := authWaitFor(t, "listproxy allows alice in b", authTTL+10*time.Second, servedFromSnapshot(alice, podsInB))
		if took > authTTL+authSlack {
			t.Errorf("grant took %v to reach listproxy, want at most the deny TTL %v (+%v)", took, authTTL, authSlack)
		}
	})
	t.Run("revocation_stops_within_allow_ttl", func(t *testing.T) {
		if err := admin.RbacV1().RoleBindings("b").Delete(ctx, "pod-readers", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		authWaitFor(t, "apiserver forbids alice in b", 30*time.Second, func() bool {
			return authDo(t, aliceDirect, http.MethodGet, podsInB, nil, "").code == http.StatusForbidden
		})
		took := authWaitFor(t, "listproxy forbids alice in b", authTTL+10*time.Second, func() bool {
			return authDo(t, alice, http.MethodGet, podsInB, nil, "").code == http.StatusForbidden
		})
		if took > authTTL+authSlack {
			t.Errorf("revocation took %v to reach listproxy, want at most the allow TTL %v (+%v)", took, authTTL, authSlack)
		}
		authSameRefusal(t, alice, aliceDirect, podsInB, http.StatusForbidden)
	})
	t.Run("invalid_token_unauthorized", func(t *testing.T) {
		bad, badDirect := lp.Config(), cp.UserConfig(framework.UserAlice)
		bad.BearerToken, badDirect.BearerToken = "not-a-token", "not-a-token"
		authSameRefusal(t, bad, badDirect, podsInA, http.StatusUnauthorized)
		authSameRefusal(t, bad, badDirect, "/api/v1/namespaces/a/configmaps", http.StatusUnauthorized)
	})
	t.Run("no_credentials_unauthorized", func(t *testing.T) {
		for _, path := range []string{podsInA, "/api", "/api/v1/namespaces/a/configmaps", "/metrics"} {
			got := authDo(t, lp.Config(), http.MethodGet, path, nil, "")
			var status metav1.Status
			if err := json.Unmarshal(got.body, &status); err != nil || got.code != http.StatusUnauthorized || status.Reason != metav1.StatusReasonUnauthorized {
				t.Errorf("GET %s without credentials = %v, want a 401 Status", path, got)
			}
		}
	})
	t.Run("health_unauthenticated", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if got := authDo(t, lp.Config(), http.MethodGet, path, nil, ""); got.code != http.StatusOK {
				t.Errorf("GET %s without credentials = %v, want 200", path, got)
			}
		}
	})
	t.Run("metrics_authorized", func(t *testing.T) {
		if got := authDo(t, alice, http.MethodGet, "/metrics", nil, ""); got.code != http.StatusForbidden ||
			!strings.Contains(string(got.body), `User \"alice\" cannot get path \"/metrics\"`) {
			t.Errorf("GET /metrics as alice = %v, want 403", got)
		}
		got := authDo(t, lp.UserConfig(framework.UserAdmin), http.MethodGet, "/metrics", nil, "")
		for _, s := range []string{
			`listproxy_proxy_authz_decisions_total{cache="miss",decision="allowed"}`,
			`listproxy_proxy_authz_decisions_total{cache="miss",decision="denied"}`,
			`listproxy_http_requests_total{code="403",source="listproxy",verb="list"}`,
		} {
			if got.code != http.StatusOK || !bytes.Contains(got.body, []byte(s)) {
				t.Errorf("GET /metrics as admin = %d, want 200 with %s", got.code, s)
			}
		}
	})
	t.Run("client_certificate_user", func(t *testing.T) {
		carol, err := lp.ClientCertConfig("carol", "team-c")
		if err != nil {
			t.Fatal(err)
		}
		carolDirect, err := cp.ClientCertConfig("carol", "team-c")
		if err != nil {
			t.Fatal(err)
		}
		authWaitFor(t, "carol's LIST in a served from the snapshot", 10*time.Second, servedFromSnapshot(carol, podsInA))
		authSameRefusal(t, carol, carolDirect, clusterPods, http.StatusForbidden)
		authSameRefusal(t, carol, carolDirect, podsInB, http.StatusForbidden)
	})
	t.Run("foreign_certificate_unauthorized", func(t *testing.T) {
		cfg := lp.Config()
		cfg.CertData, cfg.KeyData = authForeignClientCert(t, framework.UserAlice)
		if got := authDo(t, cfg, http.MethodGet, podsInA, nil, ""); got.code != http.StatusUnauthorized {
			t.Errorf("LIST with a certificate from another CA = %v, want 401", got)
		}
	})
	t.Run("impersonation_passes_through", func(t *testing.T) {
		hdr := http.Header{"Impersonate-User": {framework.UserBob}}
		got := authDo(t, alice, http.MethodGet, podsInA, hdr, "")
		want := authDo(t, aliceDirect, http.MethodGet, podsInA, hdr, "")
		if got.code != http.StatusForbidden || got.servedFrom != httpapi.SourceAPIServer || !bytes.Equal(got.body, want.body) {
			t.Errorf("LIST as alice impersonating bob:\nlistproxy: %v\napiserver: %v\nwant the apiserver's 403, passed through", got, want)
		}
		carol, err := lp.ClientCertConfig("carol", "team-c")
		if err != nil {
			t.Fatal(err)
		}
		if got := authDo(t, carol, http.MethodGet, podsInA, hdr, ""); got.code != http.StatusForbidden {
			t.Errorf("LIST as certificate user carol impersonating bob = %v, want 403", got)
		}
	})
	t.Run("pass_through_writes_carry_identity", func(t *testing.T) {
		aliceClient := kubernetes.NewForConfigOrDie(alice)
		cm := func(name string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
		}
		_, err := aliceClient.CoreV1().ConfigMaps("b").Create(ctx, cm("by-alice"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "alice" cannot create resource "configmaps" in API group "" in the namespace "b"`) {
			t.Errorf("alice creating a configmap in b via listproxy: err = %v, want the apiserver's 403 for alice", err)
		}
		if _, err := aliceClient.CoreV1().ConfigMaps("a").Create(ctx, cm("by-alice"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice creating a configmap in a via listproxy: %v", err)
		}
		carol, err := lp.ClientCertConfig("carol", "team-c")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubernetes.NewForConfigOrDie(carol).CoreV1().ConfigMaps("a").Create(ctx, cm("by-carol"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("carol creating a configmap in a via listproxy: %v", err)
		}
		if _, err := kubernetes.NewForConfigOrDie(carol).CoreV1().ConfigMaps("b").Create(ctx, cm("by-carol"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("carol creating a configmap in b via listproxy: err = %v, want 403", err)
		}

		// Audit: alice's own token reached the apiserver; carol was
		// impersonated by listproxy's identity (admin).
		var byAlice, byCarol *auditv1.Event
		authWaitFor(t, "audit events of both creates", 10*time.Second, func() bool {
			events, err := cp.AuditEvents()
			if err != nil {
				t.Fatal(err)
			}
			for i := range events {
				ev := &events[i]
				if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "configmaps" || ev.ObjectRef.Namespace != "a" {
					continue
				}
				switch ev.ObjectRef.Name {
				case "by-alice":
					byAlice = ev
				case "by-carol":
					byCarol = ev
				}
			}
			return byAlice != nil && byCarol != nil
		})
		if byAlice.User.Username != framework.UserAlice || byAlice.ImpersonatedUser != nil {
			t.Errorf("alice's create audited as user %q impersonating %v, want user alice without impersonation", byAlice.User.Username, byAlice.ImpersonatedUser)
		}
		if byCarol.User.Username != framework.UserAdmin || byCarol.ImpersonatedUser == nil || byCarol.ImpersonatedUser.Username != "carol" ||
			!slices.Contains(byCarol.ImpersonatedUser.Groups, "team-c") {
			t.Errorf("carol's create audited as user %q impersonating %+v, want listproxy's identity (admin) impersonating carol in team-c", byCarol.User.Username, byCarol.ImpersonatedUser)
		}
	})
}

// TestAuthzCache: 1,000 LISTs by one caller cause at most a couple of
// SubjectAccessReviews.
func TestAuthzCache(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	admin := cp.Clientset(framework.UserAdmin)
	if err := cp.CreateNamespace(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles("a").Create(ctx, authPodReader("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("a").Create(ctx, authBinding("a", authSubjectAlice), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--resources=pods", "--preload=pods/json")
	alice := lp.UserConfig(framework.UserAlice)
	const path = "/api/v1/namespaces/a/pods?resourceVersion=0"
	authWaitFor(t, "LIST served from the snapshot", 30*time.Second, func() bool {
		a := authDo(t, alice, http.MethodGet, path, nil, "")
		return a.code == http.StatusOK && a.servedFrom == httpapi.SourceSnapshot
	})

	reviews := func() int {
		events, err := cp.AuditEvents()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ev := range events {
			if ev.ObjectRef != nil && ev.ObjectRef.Resource == "subjectaccessreviews" && ev.Verb == "create" {
				n++
			}
		}
		return n
	}
	before := reviews()
	client, err := rest.HTTPClientFor(alice)
	if err != nil {
		t.Fatal(err)
	}
	const lists = 1000
	for i := range lists {
		resp, err := client.Get(alice.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
			t.Fatalf("LIST %d = %d from %q, want 200 from the snapshot", i, resp.StatusCode, resp.Header.Get(httpapi.HeaderServedFrom))
		}
	}
	time.Sleep(500 * time.Millisecond) // audit events trail responses slightly
	if n := reviews() - before; n > 2 {
		t.Errorf("%d LISTs caused %d SubjectAccessReviews, want at most 2", lists, n)
	}
	adminClient, err := rest.HTTPClientFor(lp.UserConfig(framework.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	const decisions = "listproxy_proxy_authz_decisions_total"
	if hits := framework.Scrape(t, adminClient, lp.URL+"/metrics").Sum(decisions, `cache="hit"`, `decision="allowed"`); hits < lists {
		t.Errorf("/metrics: %s{cache=hit,decision=allowed} = %v, want at least %d", decisions, hits, lists)
	}
}

// TestAuthNoneRefusesNonLoopback: without authentication listproxy refuses
// to listen beyond loopback unless told to.
func TestAuthNoneRefusesNonLoopback(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "none_all_interfaces", args: []string{"--listen-address=0.0.0.0:8001"}, wantErr: true},
		{name: "none_explicit_all_interfaces", args: []string{"--authentication=none", "--listen-address=0.0.0.0:8001"}, wantErr: true},
		{name: "none_allowed_explicitly", args: []string{"--listen-address=0.0.0.0:8001", "--allow-unauthenticated-non-loopback"}},
		{name: "none_loopback", args: []string{"--listen-address=127.0.0.1:8001"}},
		{name: "delegated_all_interfaces", args: []string{"--authentication=delegated", "--listen-address=0.0.0.0:8443"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := app.NewOptions()
			fs := pflag.NewFlagSet("listproxy", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := opts.Validate()
			if tc.wantErr && (err == nil || !strings.Contains(err.Error(), "--listen-address") || !strings.Contains(err.Error(), "not a loopback")) {
				t.Errorf("Validate(%q) = %v, want an error naming --listen-address", tc.args, err)
			}
			if !tc.wantErr && err != nil {
				t.Errorf("Validate(%q) = %v, want nil", tc.args, err)
			}
		})
	}
}

// foreignClientCert returns a client certificate and key for user, signed by
// a CA that neither listproxy nor the apiserver trusts.
func authForeignClientCert(t *testing.T, user string) (certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "foreign-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: user},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
