package auth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reviewServer answers TokenReviews (token "alice-token" is alice,
// "carol-token" carol) and SubjectAccessReviews (alice may list pods in
// namespace a, carol in every namespace) as the apiserver does, counting
// each.
type reviewServer struct {
	tokenReviews, accessReviews atomic.Int64
}

func (s *reviewServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		s.tokenReviews.Add(1)
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if user, ok := strings.CutSuffix(review.Spec.Token, "-token"); ok && (user == "alice" || user == "carol") {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
		}
		_ = json.NewEncoder(w).Encode(review)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		s.accessReviews.Add(1)
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ra := review.Spec.ResourceAttributes
		listsPods := ra != nil && ra.Verb == "list" && ra.Resource == "pods"
		review.Status.Allowed = listsPods && (review.Spec.User == "alice" && ra.Namespace == "a" || review.Spec.User == "carol")
		_ = json.NewEncoder(w).Encode(review)
	default:
		http.NotFound(w, r)
	}
}

// TestDelegatedReviewsCached runs the delegating authenticator and
// authorizer built by New with DefaultConfig against an apiserver's review
// endpoints: answers are cached for the default TTLs, and nothing is left
// running (TestMain).
func TestDelegatedReviewsCached(t *testing.T) {
	reviews := &reviewServer{}
	srv := httptest.NewServer(reviews)
	defer srv.Close()
	cfg := DefaultConfig()
	a, err := New(&cfg, &rest.Config{Host: srv.URL}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	read := func(token, path string) (Decision, int) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		r, ok := a.Authenticate(w, r)
		if !ok {
			return Answered, w.Code
		}
		return a.AuthorizeRead(w, r), w.Code
	}
	tests := []struct {
		name             string
		token, path      string
		want             Decision
		wantCode         int
		wantTokenReviews int64
		wantSARs         int64
	}{
		{name: "allowed", token: "alice-token", path: "/api/v1/namespaces/a/pods", want: Serve, wantCode: http.StatusOK, wantTokenReviews: 1, wantSARs: 1},
		{name: "allowed_again_cached", token: "alice-token", path: "/api/v1/namespaces/a/pods", want: Serve, wantCode: http.StatusOK, wantTokenReviews: 1, wantSARs: 1},
		{name: "denied", token: "alice-token", path: "/api/v1/namespaces/b/pods", want: Answered, wantCode: http.StatusForbidden, wantTokenReviews: 1, wantSARs: 2},
		{name: "denied_again_cached", token: "alice-token", path: "/api/v1/namespaces/b/pods", want: Answered, wantCode: http.StatusForbidden, wantTokenReviews: 1, wantSARs: 2},
		{name: "unknown_token", token: "bogus", path: "/api/v1/namespaces/a/pods", want: Answered, wantCode: http.StatusUnauthorized, wantTokenReviews: 2, wantSARs: 2},
	}
	for _, tc := range tests {
		got, code := read(tc.token, tc.path)
		if got != tc.want || code != tc.wantCode {
			t.Errorf("%s: decision %v with HTTP %d, want %v with %d", tc.name, got, code, tc.want, tc.wantCode)
		}
		if n, m := reviews.tokenReviews.Load(), reviews.accessReviews.Load(); n != tc.wantTokenReviews || m != tc.wantSARs {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", tc.name, n, m, tc.wantTokenReviews, tc.wantSARs)
		}
	}
}

// TestMayListAll: a store may be started only for a caller who may list the
// resource in every namespace; the review is at the cluster scope whatever
// namespace the request named, its answer is cached, and anything but an
// allow (no caller, a denial, a failed review) is false.
func TestMayListAll(t *testing.T) {
	reviews := &reviewServer{}
	srv := httptest.NewServer(reviews)
	defer srv.Close()
	cfg := DefaultConfig()
	upstream := &rest.Config{Host: srv.URL}
	authz, err := NewAuthorizer(&cfg, upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Authorizer = authz
	a, err := New(&cfg, upstream, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	failing := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", errors.New("review failed")
	})
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	tests := []struct {
		name     string
		token    string // "": no caller
		authz    authorizer.Authorizer
		gvr      schema.GroupVersionResource
		want     bool
		wantSARs int64 // so far
	}{
		{name: "namespace_only", token: "alice-token", authz: authz, gvr: pods, want: false, wantSARs: 1},
		{name: "cluster_wide", token: "carol-token", authz: authz, gvr: pods, want: true, wantSARs: 2},
		{name: "cluster_wide_cached", token: "carol-token", authz: authz, gvr: pods, want: true, wantSARs: 2},
		{name: "other_resource", token: "carol-token", authz: authz, gvr: secrets, want: false, wantSARs: 3},
		{name: "namespace_only_cached", token: "alice-token", authz: authz, gvr: pods, want: false, wantSARs: 3},
		{name: "no_caller", authz: authz, gvr: pods, want: false, wantSARs: 3},
		{name: "review_failed", token: "carol-token", authz: failing, gvr: pods, want: false, wantSARs: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A namespaced request: the review is at the cluster scope anyway.
			r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/a/pods", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
				var ok bool
				if r, ok = a.Authenticate(httptest.NewRecorder(), r); !ok {
					t.Fatalf("%s not authenticated", tc.token)
				}
			}
			if got := MayListAll(r.Context(), tc.authz, tc.gvr); got != tc.want {
				t.Errorf("MayListAll = %v, want %v", got, tc.want)
			}
			if got := reviews.accessReviews.Load(); got != tc.wantSARs {
				t.Errorf("%d SubjectAccessReviews so far, want %d", got, tc.wantSARs)
			}
		})
	}
}
