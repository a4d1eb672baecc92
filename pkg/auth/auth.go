// Package auth is listproxy's service mode: it authenticates callers
// (TokenReview, client certificates), authorizes resource reads (list,
// watch) and listproxy's own paths with cached SubjectAccessReviews, and
// carries the authenticated caller in the request context so that a
// forwarded request can assert the caller's identity. It is used by the
// HTTP edge (pkg/proxy) and may be used by any server behind it; it must
// not import pkg/proxy, pkg/lists or any other server package.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// reviewTimeout bounds one TokenReview or SubjectAccessReview, as
// kube-apiserver's delegated authentication and authorization options do.
const reviewTimeout = 10 * time.Second

// reviewRetryBackoff is kube-apiserver's DefaultAuthWebhookRetryBackoff.
var reviewRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Config configures service mode: callers are authenticated, every LIST
// that could be answered from a snapshot is first authorized with a
// SubjectAccessReview for the caller, and pass-through requests carry the
// caller's identity instead of listproxy's. Start from DefaultConfig: New
// takes every field as given.
type Config struct {
	// ClientCA verifies client certificates; a verified certificate's common
	// name is the user and its organizations the groups, as in the
	// apiserver. Nil: client certificates are ignored.
	ClientCA dynamiccertificates.CAContentProvider
	// TokenCacheTTL is how long a TokenReview's answer is cached.
	TokenCacheTTL time.Duration
	// AllowTTL and DenyTTL are how long an allowing and a denying
	// SubjectAccessReview's answer is cached.
	AllowTTL, DenyTTL time.Duration

	// Authenticator, if set, replaces the delegating authenticator (tests).
	// It must remove the Authorization header from the request it is given
	// when it accepts a bearer token, as the apiserver's bearer-token
	// authenticator does: listproxy tells token callers from certificate
	// callers that way.
	Authenticator authenticator.Request
	// Authorizer, if set, replaces the delegating authorizer: tests, or
	// one built by NewAuthorizer and shared with MayListAll.
	Authorizer authorizer.Authorizer
}

// DefaultConfig returns the defaults: those of kube-apiserver's delegated
// authentication and authorization options
// (k8s.io/apiserver/pkg/server/options), except the allow TTL, which
// docs/design.md ("Service mode") sets to about 5 minutes (upstream: 10s).
// Not measured for listproxy.
func DefaultConfig() Config {
	return Config{TokenCacheTTL: 10 * time.Second, AllowTTL: 5 * time.Minute, DenyTTL: 30 * time.Second}
}

// Auth authenticates callers and authorizes their cached reads. Create it
// with New; it is safe for concurrent use.
type Auth struct {
	authn   authenticator.Request
	authz   authorizer.Authorizer
	metrics *authMetrics
}

// New builds the delegating authenticator (TokenReview with caching,
// client certificates) and authorizer (SubjectAccessReview with caching) of
// k8s.io/apiserver, sending reviews with upstream's credentials.
// Its metrics are registered with reg.
func New(cfg *Config, upstream *rest.Config, reg prometheus.Registerer) (*Auth, error) {
	m, err := newAuthMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Auth{authn: cfg.Authenticator, authz: cfg.Authorizer, metrics: m}
	if a.authz == nil {
		if a.authz, err = NewAuthorizer(cfg, upstream); err != nil {
			return nil, err
		}
	}
	if a.authn == nil {
		backoff := reviewRetryBackoff
		client, err := authenticationv1.NewForConfig(reviewConfig(upstream))
		if err != nil {
			return nil, fmt.Errorf("tokenreview client: %w", err)
		}
		// No Anonymous config: requests without a valid credential fail.
		authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
			TokenAccessReviewClient:            client,
			TokenAccessReviewTimeout:           reviewTimeout,
			WebhookRetryBackoff:                &backoff,
			CacheTTL:                           cfg.TokenCacheTTL,
			ClientCertificateCAContentProvider: cfg.ClientCA,
		}.New()
		if err != nil {
			return nil, fmt.Errorf("delegating authenticator: %w", err)
		}
		a.authn = authn
	}
	return a, nil
}

// reviewConfig is upstream's configuration for sending reviews.
func reviewConfig(upstream *rest.Config) *rest.Config {
	reviewCfg := rest.CopyConfig(upstream)
	reviewCfg.Timeout = reviewTimeout
	// The delegating authorizer's cache is not observable; a review that
	// reaches the apiserver marks its request's context instead.
	reviewCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reviewRecorder{rt} })
	return reviewCfg
}

// NewAuthorizer builds the authorizer New uses when cfg.Authorizer is nil:
// k8s.io/apiserver's delegating authorizer, sending SubjectAccessReviews
// with upstream's credentials and caching their answers for cfg.AllowTTL
// and cfg.DenyTTL. Set as cfg.Authorizer and given to MayListAll, one cache
// serves the edge's reviews and those of starting a store.
func NewAuthorizer(cfg *Config, upstream *rest.Config) (authorizer.Authorizer, error) {
	client, err := authorizationv1.NewForConfig(reviewConfig(upstream))
	if err != nil {
		return nil, fmt.Errorf("subjectaccessreview client: %w", err)
	}
	backoff := reviewRetryBackoff
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client,
		AllowCacheTTL:             cfg.AllowTTL,
		DenyCacheTTL:              cfg.DenyTTL,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegating authorizer: %w", err)
	}
	return authz, nil
}

// MayListAll reports whether the caller of ctx (set by Authenticate) may
// list gvr's resource in every namespace, which is what a snapshot store's
// source does on the caller's behalf (docs/rbac.md): a SubjectAccessReview
// for list at the cluster scope, answered by authz (and its cache). It is
// false without a caller, on a denial, and when the review fails.
func MayListAll(ctx context.Context, authz authorizer.Authorizer, gvr schema.GroupVersionResource) bool {
	c, ok := CallerFrom(ctx)
	if !ok {
		return false
	}
	attrs := authorizer.AttributesRecord{
		User:            c.user,
		Verb:            "list",
		APIGroup:        gvr.Group,
		APIVersion:      gvr.Version,
		Resource:        gvr.Resource,
		ResourceRequest: true,
	}
	decision, _, err := authz.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return true
	}
	if err != nil {
		klog.ErrorS(err, "SubjectAccessReview for a cluster-wide list failed; starting no store for the caller", "user", c.user.GetName(), "resource", gvr.String())
	}
	return false
}

// Caller is an authenticated caller, stored in its request's context.
type Caller struct {
	user user.Info
	// ownToken: the caller authenticated with a bearer token, which
	// pass-through requests carry instead of listproxy's credentials.
	// Otherwise (client certificate) listproxy impersonates the caller.
	ownToken bool
}

type callerKey struct{}

func withCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the authenticated caller of a request (set by
// Authenticate), if any.
func CallerFrom(ctx context.Context) (*Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	return c, ok
}

// OwnToken reports whether the caller authenticated with a bearer token,
// which forwarded requests carry instead of listproxy's credentials.
// Otherwise (client certificate) listproxy impersonates the caller.
func (c *Caller) OwnToken() bool { return c.ownToken }

// Impersonation is how listproxy asserts a certificate caller's identity.
func (c *Caller) Impersonation() transport.ImpersonationConfig {
	return transport.ImpersonationConfig{
		UserName: c.user.GetName(),
		UID:      c.user.GetUID(),
		Groups:   c.user.GetGroups(),
		Extra:    c.user.GetExtra(),
	}
}

// Authenticate returns r with its caller in the context, or writes a 401
// and returns false. r itself is not modified.
func (a *Auth) Authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
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
	c := &Caller{user: resp.User, ownToken: ownToken}
	if !ownToken && HasImpersonation(r.Header) {
		// The caller's identity travels as impersonation headers, which
		// cannot be nested.
		refuse(w, apierrors.NewForbidden(schema.GroupResource{Resource: "users"}, c.user.GetName(),
			errors.New("listproxy cannot forward impersonation requested by a client-certificate caller; authenticate with a bearer token to impersonate")))
		return nil, false
	}
	return r.WithContext(withCaller(r.Context(), c)), true
}

// Decision is what AuthorizeRead decided about a cacheable read.
type Decision int

const (
	Serve       Decision = iota // allowed: may be answered by listproxy
	PassThrough                 // the apiserver must decide: pass through
	Answered                    // denied: a 403 (or 401) was written
)

// AuthorizeRead authorizes a resource read (list or watch, the verb the
// apiserver derives from r) by r's caller with a SubjectAccessReview
// (cached), the way the apiserver's authorization filter would, except that
// label and field selectors are not part of the review.
//
// A denied request without selectors is answered with the apiserver's own
// 403. A denied request with selectors passes through: an authorizer may
// allow a LIST only with a given selector (the Node authorizer for pods with
// spec.nodeName, KEP-4601), and the apiserver's check includes it. A failed
// review also passes through; the apiserver then decides with the caller's
// own identity.
func (a *Auth) AuthorizeRead(w http.ResponseWriter, r *http.Request) Decision {
	c, ok := CallerFrom(r.Context())
	if !ok {
		// Not reachable when Authenticate ran first. Fail closed.
		refuse(w, unauthorizedError())
		return Answered
	}
	info, err := requestInfoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return PassThrough
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
		return Serve
	case err != nil:
		a.metrics.observe(decisionError, missed)
		klog.ErrorS(err, "SubjectAccessReview failed; passing the LIST through", "user", c.user.GetName(), "path", r.URL.Path)
		return PassThrough
	}
	a.metrics.observe(decisionDenied, missed)
	q := r.URL.Query()
	if q.Get("labelSelector") != "" || q.Get("fieldSelector") != "" {
		return PassThrough
	}
	writeForbidden(w, attrs, reason)
	return Answered
}

// AuthorizeNonResource authorizes a request for one of listproxy's own paths
// (/metrics) like the apiserver authorizes its non-resource URLs, and writes
// a 403 when it is not allowed.
func (a *Auth) AuthorizeNonResource(w http.ResponseWriter, r *http.Request) bool {
	c, ok := CallerFrom(r.Context())
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
func (a *Auth) authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, bool, error) {
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
	w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceListproxy)
	httpapi.WriteStatus(w, err)
}

// unauthorizedError is the apiserver's 401 for a request without a valid
// credential.
func unauthorizedError() *apierrors.StatusError {
	return apierrors.NewUnauthorized("Unauthorized")
}

// HasImpersonation reports whether h asks for impersonation.
func HasImpersonation(h http.Header) bool {
	for name := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "Impersonate-") {
			return true
		}
	}
	return false
}

// requestInfoFactory derives a request's verb and resource as the apiserver
// does.
var requestInfoFactory = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
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
