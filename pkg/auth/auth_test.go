package auth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reviewServer answers TokenReviews (token "alice-token" is alice) and
// SubjectAccessReviews (alice may list pods in namespace a) as the
// apiserver does, counting each.
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
		if review.Spec.Token == "alice-token" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
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
		review.Status.Allowed = review.Spec.User == "alice" && ra != nil && ra.Verb == "list" && ra.Resource == "pods" && ra.Namespace == "a"
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
