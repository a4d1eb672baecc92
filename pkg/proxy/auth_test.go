package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"

	"github.com/listproxy/listproxy/pkg/auth"
)

// fakeAuthenticator accepts bearer token "alice-token" as alice, removing
// the header as the apiserver's bearer-token authenticator does, and header
// X-Test-Cert as a certificate user of that name (certificates cannot be
// faked over plain HTTP).
type fakeAuthenticator struct{}

func (fakeAuthenticator) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if name := r.Header.Get("X-Test-Cert"); name != "" {
		return &authenticator.Response{User: &user.DefaultInfo{
			Name: name, Groups: []string{"team-c", user.AllAuthenticated},
			Extra: map[string][]string{"example.com/key with space": {"v"}},
		}}, true, nil
	}
	switch r.Header.Get("Authorization") {
	case "":
		return nil, false, nil
	case "Bearer alice-token":
		r.Header.Del("Authorization")
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", UID: "alice-uid", Groups: []string{user.AllAuthenticated}}}, true, nil
	default:
		return nil, false, errors.New("invalid bearer token")
	}
}

// fakeAuthorizer allows LISTs of pods in namespace "a" and GET /metrics for
// carol, fails for namespace "broken", and denies everything else. It
// records what it was asked.
type fakeAuthorizer struct {
	mu    sync.Mutex
	asked []authorizer.AttributesRecord
}

func (a *fakeAuthorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	a.asked = append(a.asked, attrs.(authorizer.AttributesRecord))
	a.mu.Unlock()
	switch {
	case attrs.GetNamespace() == "broken":
		return authorizer.DecisionNoOpinion, "", errors.New("apiserver unreachable")
	case attrs.IsResourceRequest() && attrs.GetVerb() == "list" && attrs.GetResource() == "pods" && attrs.GetNamespace() == "a":
		return authorizer.DecisionAllow, "", nil
	case !attrs.IsResourceRequest() && attrs.GetPath() == "/metrics" && attrs.GetUser().GetName() == "carol":
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// ConditionsAwareAuthorize is Authorize's decision, as for an authorizer
// that is not conditions-aware.
func (a *fakeAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions fails closed: fakeAuthorizer makes no conditional
// decisions.
func (a *fakeAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func (a *fakeAuthorizer) calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

// podLists serves every LIST of pods, and says so in Cacheable.
type podLists struct{}

func (podLists) Cacheable(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/pods") }

func (podLists) TranslateContinue(*http.Request) {}

func (podLists) ServeList(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasSuffix(r.URL.Path, "/pods") {
		return false
	}
	_, _ = io.WriteString(w, `{"kind":"PodList"}`)
	return true
}

func TestAuth(t *testing.T) {
	seen := make(chan seenRequest, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- record(r)
		_, _ = io.WriteString(w, `{"kind":"Upstream"}`)
	}))
	defer up.Close()
	authz := &fakeAuthorizer{}
	p := startProxy(t, &rest.Config{Host: up.URL, BearerToken: upstreamToken}, Config{
		Lists: podLists{},
		Auth:  &auth.Config{Authenticator: fakeAuthenticator{}, Authorizer: authz},
	})

	alice := http.Header{"Authorization": {"Bearer alice-token"}}
	carol := http.Header{"X-Test-Cert": {"carol"}}
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name       string
		path       string
		header     http.Header
		wantCode   int
		wantFrom   string
		wantBody   string // substring
		wantAuthz  int    // authorizer calls
		wantHeader http.Header
	}{
		{name: "no_credentials", path: "/api/v1/namespaces/a/pods", wantCode: 401, wantFrom: httpapi.SourceListproxy,
			wantBody: `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`},
		{name: "invalid_token", path: "/api/v1/namespaces/default/configmaps", header: http.Header{"Authorization": {"Bearer nope"}}, wantCode: 401, wantFrom: httpapi.SourceListproxy},
		{name: "allowed_list_served", path: "/api/v1/namespaces/a/pods", header: alice, wantCode: 200, wantFrom: httpapi.SourceSnapshot, wantBody: "PodList", wantAuthz: 1},
		{name: "denied_cluster_list", path: "/api/v1/pods", header: alice, wantCode: 403, wantFrom: httpapi.SourceListproxy, wantAuthz: 1,
			wantBody: `"message":"pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"kind":"pods"},"code":403}`},
		{name: "denied_namespaced_list", path: "/api/v1/namespaces/b/pods", header: alice, wantCode: 403, wantFrom: httpapi.SourceListproxy, wantAuthz: 1,
			wantBody: `pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"b\"`},
		{name: "uncached_list_passes_through_unreviewed", path: "/apis/apps/v1/namespaces/b/deployments", header: alice, wantCode: 200, wantFrom: httpapi.SourceAPIServer,
			wantHeader: http.Header{"Authorization": {"Bearer alice-token"}}},
		{name: "denied_with_selector_passes_through", path: "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", header: alice, wantCode: 200, wantFrom: httpapi.SourceAPIServer, wantAuthz: 1,
			wantHeader: http.Header{"Authorization": {"Bearer alice-token"}}},
		{name: "review_error_passes_through", path: "/api/v1/namespaces/broken/pods", header: alice, wantCode: 200, wantFrom: httpapi.SourceAPIServer, wantAuthz: 1,
			wantHeader: http.Header{"Authorization": {"Bearer alice-token"}}},
		{name: "token_caller_forwarded_with_own_token", path: "/api/v1/namespaces/a/configmaps/x", header: with(alice, "X-Remote-User", "root"), wantCode: 200, wantFrom: httpapi.SourceAPIServer,
			wantHeader: http.Header{"Authorization": {"Bearer alice-token"}}},
		{name: "token_caller_impersonating_not_cached", path: "/api/v1/namespaces/a/pods", header: with(alice, "Impersonate-User", "bob"), wantCode: 200, wantFrom: httpapi.SourceAPIServer,
			wantHeader: http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}}},
		{name: "certificate_caller_impersonated", path: "/api/v1/namespaces/a/configmaps/x", header: with(carol, "Authorization", "Basic Zm9vOmJhcg=="), wantCode: 200, wantFrom: httpapi.SourceAPIServer,
			wantHeader: http.Header{
				"Authorization":     {"Bearer " + upstreamToken},
				"Impersonate-User":  {"carol"},
				"Impersonate-Group": {"team-c", user.AllAuthenticated},
				"Impersonate-Extra-Example.com%2fkey%20with%20space": {"v"},
			}},
		{name: "certificate_caller_impersonating_refused", path: "/api/v1/namespaces/a/configmaps/x", header: with(carol, "Impersonate-User", "bob"), wantCode: 403, wantFrom: httpapi.SourceListproxy},
		{name: "metrics_unauthenticated", path: "/metrics", wantCode: 401},
		{name: "metrics_denied", path: "/metrics", header: alice, wantCode: 403, wantAuthz: 1, wantBody: `User \"alice\" cannot get path \"/metrics\"`},
		{name: "metrics_allowed", path: "/metrics", header: carol, wantCode: 200, wantAuthz: 1, wantBody: "listproxy_proxy_authz_decisions_total"},
		{name: "healthz_unauthenticated", path: "/healthz", wantCode: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := authz.calls()
			resp, body := p.get(t, tc.path, tc.header)
			if resp.StatusCode != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s = %d %s, want %d with %s", tc.path, resp.StatusCode, body, tc.wantCode, tc.wantBody)
			}
			if tc.wantFrom != "" {
				if got := resp.Header.Get(httpapi.HeaderServedFrom); got != tc.wantFrom {
					t.Errorf("%s = %q, want %q", httpapi.HeaderServedFrom, got, tc.wantFrom)
				}
			}
			if got := authz.calls() - before; got != tc.wantAuthz {
				t.Errorf("authorizer asked %d times, want %d", got, tc.wantAuthz)
			}
			if tc.wantFrom != httpapi.SourceAPIServer {
				select {
				case r := <-seen:
					t.Errorf("upstream saw %s, want nothing", r.RequestURI)
				default:
				}
				return
			}
			got := recv(t, seen).Header
			for name := range got {
				canon := http.CanonicalHeaderKey(name)
				if canon != "Authorization" && !strings.HasPrefix(canon, "Impersonate-") && !strings.HasPrefix(canon, "X-Remote-") {
					delete(got, name)
				}
			}
			if diff := cmp.Diff(tc.wantHeader, got); diff != "" {
				t.Errorf("upstream credential headers (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("attributes", func(t *testing.T) {
		authz.mu.Lock()
		got := authz.asked[0]
		authz.mu.Unlock()
		want := authorizer.AttributesRecord{
			User: got.User, Verb: "list", Namespace: "a", APIGroup: "", APIVersion: "v1", Resource: "pods",
			ResourceRequest: true, Path: "/api/v1/namespaces/a/pods",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("first SubjectAccessReview attributes (-want +got):\n%s", diff)
		}
		if u := got.User; u.GetName() != "alice" || u.GetUID() != "alice-uid" {
			t.Errorf("reviewed user = %+v, want alice with her uid", u)
		}
	})

	// The fake authorizer sends no reviews: every decision is a cache hit.
	want := `
# HELP listproxy_proxy_authz_decisions_total Authorization decisions for callers (service mode) by decision (allowed, denied, error) and cache (hit: answered by the decision cache; miss: a SubjectAccessReview was sent).
# TYPE listproxy_proxy_authz_decisions_total counter
listproxy_proxy_authz_decisions_total{cache="hit",decision="allowed"} 2
listproxy_proxy_authz_decisions_total{cache="hit",decision="denied"} 4
listproxy_proxy_authz_decisions_total{cache="hit",decision="error"} 1
`
	if err := testutil.GatherAndCompare(p.reg, strings.NewReader(want), "listproxy_proxy_authz_decisions_total"); err != nil {
		t.Error(err)
	}
}

// TestAuthNoCallerFailsClosed: in service mode a pass-through request
// without an authenticated caller is never sent with listproxy's
// credentials.
func TestAuthNoCallerFailsClosed(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	pass, err := newPassthrough(&rest.Config{Host: up.URL, BearerToken: upstreamToken}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer pass.closeIdleConnections()
	w := httptest.NewRecorder()
	pass.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil))
	if w.Code != http.StatusServiceUnavailable || hits.Load() != 0 {
		t.Errorf("pass-through without caller = %d with %d upstream hits, want 503 and none", w.Code, hits.Load())
	}
}

// translatingLists is podLists that marks the continue tokens it
// translates.
type translatingLists struct{ podLists }

func (translatingLists) TranslateContinue(r *http.Request) {
	q := r.URL.Query()
	if c := q.Get("continue"); c != "" {
		q.Set("continue", "translated:"+c)
		r.URL.RawQuery = q.Encode()
	}
}

// A listproxy continue token never reaches the apiserver raw, also on a
// request that is not offered to the list server (impersonation, a denied
// or failed review): the list server translates it.
func TestContinueTokenNeverReachesAPIServerRaw(t *testing.T) {
	seen := make(chan seenRequest, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- record(r)
		_, _ = io.WriteString(w, `{"kind":"PodList"}`)
	}))
	defer up.Close()
	upstream := &rest.Config{Host: up.URL, BearerToken: upstreamToken}
	withAuth := startProxy(t, upstream, Config{
		Lists: translatingLists{},
		Auth:  &auth.Config{Authenticator: fakeAuthenticator{}, Authorizer: &fakeAuthorizer{}},
	})
	const token = "lp1.sometoken"
	alice := http.Header{"Authorization": {"Bearer alice-token"}}
	tests := []struct {
		name   string
		proxy  *testProxy
		path   string
		header http.Header
		want   string
	}{
		{name: "impersonation", proxy: withAuth, path: "/api/v1/namespaces/a/pods", header: http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}}, want: "translated:" + token},
		{name: "denied_with_selector", proxy: withAuth, path: "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", header: alice, want: "translated:" + token},
		{name: "review_failed", proxy: withAuth, path: "/api/v1/namespaces/broken/pods", header: alice, want: "translated:" + token},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sep := "?"
			if strings.Contains(tc.path, "?") {
				sep = "&"
			}
			resp, _ := tc.proxy.get(t, tc.path+sep+"limit=1&continue="+url.QueryEscape(token), tc.header)
			if got := resp.Header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceAPIServer {
				t.Fatalf("%s = %q, want %q", httpapi.HeaderServedFrom, got, httpapi.SourceAPIServer)
			}
			u, err := url.ParseRequestURI(recv(t, seen).RequestURI)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.Query().Get("continue"); got != tc.want {
				t.Errorf("apiserver got continue %q, want %q", got, tc.want)
			}
		})
	}
}

// recordingWatches declines every watch and records the reasons the edge
// gives for watches it passes through without offering them.
type recordingWatches struct {
	mu      sync.Mutex
	offered int
	reasons []string
}

func (w *recordingWatches) ServeWatch(http.ResponseWriter, *http.Request) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.offered++
	return false
}

func (*recordingWatches) Cacheable(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/pods")
}

func (w *recordingWatches) PassedThrough(_ *http.Request, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reasons = append(w.reasons, reason)
}

// TestAuthWatchPassThroughCounted: in service mode every watch the edge
// passes through before offering it to the watch server is reported to it
// with why, so that listproxy_watch_passed_through_total counts it.
func TestAuthWatchPassThroughCounted(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
	}))
	defer up.Close()
	watches := &recordingWatches{}
	p := startProxy(t, &rest.Config{Host: up.URL, BearerToken: upstreamToken}, Config{
		Watches: watches,
		Auth:    &auth.Config{Authenticator: fakeAuthenticator{}, Authorizer: &fakeAuthorizer{}},
	})
	alice := http.Header{"Authorization": {"Bearer alice-token"}}
	impersonating := http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}}
	tests := []struct {
		name, path string
		header     http.Header
		want       []string
		offered    int
	}{
		{name: "not_cacheable", path: "/api/v1/namespaces/a/configmaps?watch=1", header: alice, want: []string{""}},
		{name: "impersonation", path: "/api/v1/namespaces/a/pods?watch=1", header: impersonating, want: []string{WatchPassImpersonation}},
		{name: "review_failed", path: "/api/v1/namespaces/broken/pods?watch=1", header: alice, want: []string{WatchPassAuthorization}},
		{name: "list_not_counted", path: "/api/v1/namespaces/a/configmaps", header: alice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			watches.mu.Lock()
			watches.reasons, watches.offered = nil, 0
			watches.mu.Unlock()
			if resp, _ := p.get(t, tc.path, tc.header); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want the apiserver's 200", resp.StatusCode)
			}
			watches.mu.Lock()
			defer watches.mu.Unlock()
			if diff := cmp.Diff(tc.want, watches.reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if watches.offered != tc.offered {
				t.Errorf("offered %d watches, want %d", watches.offered, tc.offered)
			}
		})
	}
}
