package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
)

// Defaults of AuthConfig, those of kube-apiserver's delegated authentication
// and authorization options (k8s.io/apiserver/pkg/server/options), except the
// allow TTL, which DESIGN.md sets to about 5 minutes (upstream: 10s). Not
// measured for listproxy.
const (
	DefaultTokenCacheTTL = 10 * time.Second
	DefaultAllowTTL      = 5 * time.Minute
	DefaultDenyTTL       = 30 * time.Second
	reviewTimeout        = 10 * time.Second
)

// reviewRetryBackoff is kube-apiserver's DefaultAuthWebhookRetryBackoff.
var reviewRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// AuthConfig configures service mode: callers are authenticated, every LIST
// that could be answered from a snapshot is first authorized with a
// SubjectAccessReview for the caller, and pass-through requests carry the
// caller's identity instead of listproxy's.
type AuthConfig struct {
	// ClientCA verifies client certificates; a verified certificate's common
	// name is the user and its organizations the groups, as in the
	// apiserver. Nil: client certificates are ignored.
	ClientCA dynamiccertificates.CAContentProvider
	// TokenCacheTTL is how long a TokenReview's answer is cached. Zero:
	// DefaultTokenCacheTTL.
	TokenCacheTTL time.Duration
	// AllowTTL and DenyTTL are how long an allowing and a denying
	// SubjectAccessReview's answer is cached. Zero: DefaultAllowTTL and
	// DefaultDenyTTL.
	AllowTTL, DenyTTL time.Duration

	// Authenticator, if set, replaces the delegating authenticator (tests).
	// It must remove the Authorization header from the request it is given
	// when it accepts a bearer token, as the apiserver's bearer-token
	// authenticator does: listproxy tells token callers from certificate
	// callers that way.
	Authenticator authenticator.Request
	// Authorizer, if set, replaces the delegating authorizer (tests).
	Authorizer authorizer.Authorizer
}

// auth authenticates callers and authorizes their cached reads.
type auth struct {
	authn   authenticator.Request
	authz   authorizer.Authorizer
	metrics *authMetrics
}

// newAuth builds the delegating authenticator (TokenReview with caching,
// client certificates) and authorizer (SubjectAccessReview with caching) of
// k8s.io/apiserver, sending reviews with upstream's credentials.
func newAuth(cfg *AuthConfig, upstream *rest.Config, m *authMetrics) (*auth, error) {
	a := &auth{authn: cfg.Authenticator, authz: cfg.Authorizer, metrics: m}
	if a.authn != nil && a.authz != nil {
		return a, nil
	}
	reviewCfg := rest.CopyConfig(upstream)
	reviewCfg.Timeout = reviewTimeout
	// The delegating authorizer's cache is not observable; a review that
	// reaches the apiserver marks its request's context instead.
	reviewCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reviewRecorder{rt} })
	backoff := reviewRetryBackoff
	if a.authn == nil {
		client, err := authenticationv1.NewForConfig(reviewCfg)
		if err != nil {
			return nil, fmt.Errorf("tokenreview client: %w", err)
		}
		ttl := cfg.TokenCacheTTL
		if ttl == 0 {
			ttl = DefaultTokenCacheTTL
		}
		// No Anonymous config: requests without a valid credential fail.
		authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
			TokenAccessReviewClient:            client,
			TokenAccessReviewTimeout:           reviewTimeout,
			WebhookRetryBackoff:                &backoff,
			CacheTTL:                           ttl,
			ClientCertificateCAContentProvider: cfg.ClientCA,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("delegating authenticator: %w", err)
		}
		a.authn = authn
	}
	if a.authz == nil {
		client, err := authorizationv1.NewForConfig(reviewCfg)
		if err != nil {
			return nil, fmt.Errorf("subjectaccessreview client: %w", err)
		}
		allow, deny := cfg.AllowTTL, cfg.DenyTTL
		if allow == 0 {
			allow = DefaultAllowTTL
		}
		if deny == 0 {
			deny = DefaultDenyTTL
		}
		authz, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client,
			AllowCacheTTL:             allow,
			DenyCacheTTL:              deny,
			WebhookRetryBackoff:       &backoff,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("delegating authorizer: %w", err)
		}
		a.authz = authz
	}
	return a, nil
}

// caller is an authenticated caller, stored in its request's context.
type caller struct {
	user user.Info
	// ownToken: the caller authenticated with a bearer token, which
	// pass-through requests carry instead of listproxy's credentials.
	// Otherwise (client certificate) listproxy impersonates the caller.
	ownToken bool
}

type callerKey struct{}

func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerFrom returns the authenticated caller of a request, if any.
func callerFrom(ctx context.Context) (*caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*caller)
	return c, ok
}

// impersonation is how listproxy asserts a certificate caller's identity.
func (c *caller) impersonation() transport.ImpersonationConfig {
	return transport.ImpersonationConfig{
		UserName: c.user.GetName(),
		UID:      c.user.GetUID(),
		Groups:   c.user.GetGroups(),
		Extra:    c.user.GetExtra(),
	}
}

// authenticate returns r with its caller in the context, or writes a 401
// and returns false. r itself is not modified.
func (a *auth) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	// The authenticators strip the credential they accept from the request;
	// the original must survive for pass-through.
	probe := r.Clone(r.Context())
	resp, ok, err := a.authn.AuthenticateRequest(probe)
	if err != nil || !ok || resp == nil || resp.User == nil {
		klog.V(4).InfoS("Unauthenticated request", "path", r.URL.Path, "err", err)
		refuse(w, unauthorizedError())
		return nil, false
	}
	ownToken := r.Header.Get("Authorization") != probe.Header.Get("Authorization") ||
		r.Header.Get("Sec-Websocket-Protocol") != probe.Header.Get("Sec-Websocket-Protocol")
	c := &caller{user: resp.User, ownToken: ownToken}
	if !ownToken && hasImpersonation(r.Header) {
		// The caller's identity travels as impersonation headers, which
		// cannot be nested.
		refuse(w, apierrors.NewForbidden(schema.GroupResource{Resource: "users"}, c.user.GetName(),
			errors.New("listproxy cannot forward impersonation requested by a client-certificate caller; authenticate with a bearer token to impersonate")))
		return nil, false
	}
	return r.WithContext(withCaller(r.Context(), c)), true
}

// listDecision is what authorizeList decided about a cacheable LIST.
type listDecision int

const (
	listServe       listDecision = iota // allowed: may be answered from a snapshot
	listPassThrough                     // the apiserver must decide: pass through
	listAnswered                        // denied: a 403 was written
)

// authorizeList authorizes a LIST by r's caller with a SubjectAccessReview
// (cached), the way the apiserver's authorization filter would, except that
// label and field selectors are not part of the review.
//
// A denied request without selectors is answered with the apiserver's own
// 403. A denied request with selectors passes through: an authorizer may
// allow a LIST only with a given selector (the Node authorizer for pods with
// spec.nodeName, KEP-4601), and the apiserver's check includes it. A failed
// review also passes through; the apiserver then decides with the caller's
// own identity.
func (a *auth) authorizeList(w http.ResponseWriter, r *http.Request) listDecision {
	c, ok := callerFrom(r.Context())
	if !ok {
		// Not reachable: serveAPI authenticates first. Fail closed.
		refuse(w, unauthorizedError())
		return listAnswered
	}
	info, err := requestInfoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return listPassThrough
	}
	attrs := authorizer.AttributesRecord{
		User:            c.user,
		Verb:            info.Verb,
		Namespace:       info.Namespace,
		APIGroup:        info.APIGroup,
		APIVersion:      info.APIVersion,
		Resource:        info.Resource,
		Subresource:     info.Subresource,
		Name:            info.Name,
		ResourceRequest: true,
		Path:            info.Path,
	}
	decision, reason, missed, err := a.authorize(r.Context(), attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		// As in the apiserver, an allow wins over evaluation errors.
		a.metrics.observe(decisionAllowed, missed)
		return listServe
	case err != nil:
		a.metrics.observe(decisionError, missed)
		klog.ErrorS(err, "SubjectAccessReview failed; passing the LIST through", "user", c.user.GetName(), "path", r.URL.Path)
		return listPassThrough
	}
	a.metrics.observe(decisionDenied, missed)
	q := r.URL.Query()
	if q.Get("labelSelector") != "" || q.Get("fieldSelector") != "" {
		return listPassThrough
	}
	writeForbidden(w, attrs, reason)
	return listAnswered
}

// authorizeNonResource authorizes a request for one of listproxy's own paths
// (/metrics) like the apiserver authorizes its non-resource URLs, and writes
// a 403 when it is not allowed.
func (a *auth) authorizeNonResource(w http.ResponseWriter, r *http.Request) bool {
	c, ok := callerFrom(r.Context())
	if !ok {
		refuse(w, unauthorizedError())
		return false
	}
	attrs := authorizer.AttributesRecord{User: c.user, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	if r.Method == http.MethodHead {
		attrs.Verb = "get"
	}
	decision, reason, missed, err := a.authorize(r.Context(), attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		a.metrics.observe(decisionAllowed, missed)
		return true
	case err != nil:
		a.metrics.observe(decisionError, missed)
		klog.ErrorS(err, "SubjectAccessReview failed", "user", c.user.GetName(), "path", r.URL.Path)
		refuse(w, apierrors.NewInternalError(fmt.Errorf("authorize %s: %w", r.URL.Path, err)))
		return false
	}
	a.metrics.observe(decisionDenied, missed)
	writeForbidden(w, attrs, reason)
	return false
}

// authorize asks the authorizer and reports whether the answer came from the
// apiserver (a cache miss) rather than the authorizer's cache.
func (a *auth) authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, bool, error) {
	missed := new(atomic.Bool)
	decision, reason, err := a.authz.Authorize(context.WithValue(ctx, reviewKey{}, missed), attrs)
	return decision, reason, missed.Load(), err
}

// writeForbidden writes the 403 the apiserver's authorization filter writes,
// for example: pods is forbidden: User "alice" cannot list resource "pods"
// in API group "" at the cluster scope.
func writeForbidden(w http.ResponseWriter, attrs authorizer.Attributes, reason string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	refuse(w, responsewriters.ForbiddenStatusError(attrs, reason))
}

// refuse writes err as listproxy's own answer.
func refuse(w http.ResponseWriter, err *apierrors.StatusError) {
	w.Header().Set(HeaderServedFrom, SourceListproxy)
	WriteStatus(w, err)
}

// unauthorizedError is the apiserver's 401 for a request without a valid
// credential.
func unauthorizedError() *apierrors.StatusError {
	return apierrors.NewUnauthorized("Unauthorized")
}

// hasImpersonation reports whether h asks for impersonation.
func hasImpersonation(h http.Header) bool {
	for name := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "Impersonate-") {
			return true
		}
	}
	return false
}

// reviewKey marks a context whose reviews are observed: its value is an
// *atomic.Bool set when a review request is sent.
type reviewKey struct{}

// reviewRecorder marks requests whose context carries a reviewKey.
type reviewRecorder struct{ rt http.RoundTripper }

func (t reviewRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if sent, ok := req.Context().Value(reviewKey{}).(*atomic.Bool); ok {
		sent.Store(true)
	}
	return t.rt.RoundTrip(req)
}

func (t reviewRecorder) WrappedRoundTripper() http.RoundTripper { return t.rt }
