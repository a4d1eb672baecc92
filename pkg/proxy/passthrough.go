package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/auth"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// passthrough forwards requests to the apiserver. Request and response
// travel unchanged except for hop-by-hop headers and credentials.
//
// In sidecar mode the caller is trusted: its credentials and identity
// assertions are removed and listproxy's own credentials are used. In service
// mode (delegated) the caller's identity is carried: a caller who
// authenticated with a bearer token is forwarded with that token (and its own
// Impersonate-* headers, which the apiserver checks) over a transport without
// any of listproxy's credentials; a certificate caller is forwarded with
// listproxy's credentials and impersonation headers naming the caller.
type passthrough struct {
	target    *url.URL
	delegated bool
	transport *upgradeAwareTransport // listproxy's own credentials
	caller    *upgradeAwareTransport // no credentials: the caller's token travels in the request
	proxy     *httputil.ReverseProxy
}

// strippedHeaders are identity assertions that never reach the apiserver.
// X-Remote-* are the default request-header (front proxy) names, honoured by
// the apiserver only from a front-proxy client certificate; stripping them is
// defence in depth. X-Real-Ip is a client address the apiserver records in
// audit events (sourceIPs) that nobody vouches for; the caller's real address
// travels in X-Forwarded-For.
var strippedHeaders = []string{"X-Remote-User", "X-Remote-Group", "X-Real-Ip"}

// strippedHeaderPrefixes are stripped like strippedHeaders (canonical form).
var strippedHeaderPrefixes = []string{"X-Remote-Extra-"}

// callerCredentialHeaders and callerCredentialPrefixes are the caller's
// credentials and impersonation requests: stripped unless the request is
// forwarded with the caller's own token.
var (
	callerCredentialHeaders  = []string{"Authorization"}
	callerCredentialPrefixes = []string{"Impersonate-"}
)

// newPassthrough forwards to upstream; delegated is service mode.
func newPassthrough(upstream *rest.Config, delegated bool) (*passthrough, error) {
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("apiserver URL: %w", err)
	}
	own, err := newUpgradeAwareTransport(upstream)
	if err != nil {
		return nil, err
	}
	p := &passthrough{target: target, delegated: delegated, transport: own}
	if delegated {
		// Only the apiserver's address and how to trust it: no token,
		// client certificate, exec plugin or impersonation of listproxy's
		// may travel with a caller's token.
		if p.caller, err = newUpgradeAwareTransport(rest.AnonymousClientConfig(upstream)); err != nil {
			return nil, err
		}
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: identityTransport{p},
		// Flush every write: watch events must reach the client as they
		// arrive. Large responses still stream through a fixed buffer.
		FlushInterval:  -1,
		BufferPool:     copyBuffers{},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.handleError,
		ErrorLog:       klog.NewStandardLogger("WARNING"),
	}
	return p, nil
}

// copyBuffers lends the buffers responses are copied through, so that a
// pass-through request leaves no 32 KiB of garbage behind.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte { return *copyBufferPool.Get().(*[]byte) }

func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// newUpgradeAwareTransport returns the transport of config upstream for
// pass-through.
func newUpgradeAwareTransport(upstream *rest.Config) (*upgradeAwareTransport, error) {
	cfg := rest.CopyConfig(upstream)
	// Never decompress transparently: Accept-Encoding is the client's, and
	// gzip passes through as negotiated between client and apiserver.
	cfg.DisableCompression = true
	if cfg.Proxy == nil {
		// Without TLS, a proxy or a dialer client-go hands out the shared
		// http.DefaultTransport, which ignores DisableCompression. An
		// explicit Proxy (the default one) gets a transport of our own.
		cfg.Proxy = http.ProxyFromEnvironment
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver transport: %w", err)
	}
	// net/http sends an upgrade request over HTTP/2 when the apiserver
	// negotiates it, except for WebSocket; HTTP/2 cannot upgrade, so SPDY
	// (exec, attach, port-forward) would fail. Upgrades get their own
	// HTTP/1.1-only transport, with the same TLS and authentication wrappers.
	upgradeCfg := rest.CopyConfig(cfg)
	upgradeCfg.NextProtos = []string{"http/1.1"}
	upgradeRT, err := rest.TransportFor(upgradeCfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver upgrade transport: %w", err)
	}
	return &upgradeAwareTransport{rt: rt, upgrade: upgradeRT}, nil
}

func (p *passthrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.proxy.ServeHTTP(w, r)
}

func (p *passthrough) closeIdleConnections() {
	p.transport.CloseIdleConnections()
	if p.caller != nil {
		p.caller.CloseIdleConnections()
	}
}

// errNoCaller fails a service-mode request that reached pass-through without
// an authenticated caller; it is never sent with listproxy's credentials.
var errNoCaller = errors.New("listproxy: no authenticated caller for a pass-through request")

// identityTransport sends each request with the identity rewrite prepared
// it for (see passthrough).
type identityTransport struct{ p *passthrough }

func (t identityTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.p.delegated {
		return t.p.transport.RoundTrip(req)
	}
	c, ok := auth.CallerFrom(req.Context())
	switch {
	case !ok:
		return nil, errNoCaller
	case c.OwnToken():
		return t.p.caller.RoundTrip(req)
	default:
		// rewrite removed the caller's own Impersonate-* headers, so these
		// are the only ones.
		return transport.NewImpersonatingRoundTripper(c.Impersonation(), t.p.transport).RoundTrip(req)
	}
}

func (p *passthrough) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.target)
	// X-Forwarded-For keeps what the caller sent and appends the address
	// listproxy saw it connect from, so that the apiserver's audit events
	// (sourceIPs) always hold the caller's real address; X-Forwarded-Host
	// and -Proto describe listproxy's side of the connection.
	if prior, ok := pr.In.Header["X-Forwarded-For"]; ok {
		pr.Out.Header["X-Forwarded-For"] = prior
	}
	pr.SetXForwarded()
	h := pr.Out.Header
	deleteHeaders(h, strippedHeaders, strippedHeaderPrefixes)
	if c, ok := auth.CallerFrom(pr.In.Context()); !ok || !c.OwnToken() {
		deleteHeaders(h, callerCredentialHeaders, callerCredentialPrefixes)
	}
	// HTTP/2 only: closing its request body never blocks, while an HTTP/1.1
	// body's Close waits for a pending read, and HTTP/1.1 clients send the
	// whole body anyway.
	if pr.In.ProtoMajor == 2 && pr.In.Body != nil && pr.In.Body != http.NoBody {
		pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), inboundBodyKey{}, pr.In.Body))
	}
}

// inboundBodyKey carries a pass-through request's inbound body to
// modifyResponse (ReverseProxy hands the transport a copy whose Close does
// nothing).
type inboundBodyKey struct{}

// deleteHeaders deletes the named headers and those starting with a prefix.
func deleteHeaders(h http.Header, names, prefixes []string) {
	for _, name := range names {
		h.Del(name)
	}
	for name := range h {
		for _, prefix := range prefixes {
			if strings.HasPrefix(http.CanonicalHeaderKey(name), prefix) {
				delete(h, name)
			}
		}
	}
}

func (p *passthrough) modifyResponse(res *http.Response) error {
	res.Header.Set(httpapi.HeaderServedFrom, httpapi.SourceAPIServer)
	// An upgraded connection's body is the connection itself; leave it be.
	if res.StatusCode != http.StatusSwitchingProtocols {
		inbound, _ := res.Request.Context().Value(inboundBodyKey{}).(io.Closer)
		res.Body = &shutdownBody{ReadCloser: res.Body, ctx: res.Request.Context(), inbound: inbound}
	}
	return nil
}

func (p *passthrough) handleError(w http.ResponseWriter, r *http.Request, err error) {
	rec, _ := w.(*responseRecorder)
	switch {
	case rec != nil && rec.hijacked.Load():
		// The connection is no longer HTTP; nothing can be written.
		klog.V(2).InfoS("Upgraded connection failed", "path", r.URL.Path, "err", err)
	case errors.Is(context.Cause(r.Context()), errShuttingDown):
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceAPIServer)
		httpapi.WriteStatus(w, shuttingDownError())
	case r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		if rec != nil {
			rec.clientGone()
		}
	default:
		klog.ErrorS(err, "Passing request through to the apiserver failed", "method", r.Method, "path", r.URL.Path)
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceAPIServer)
		httpapi.WriteStatus(w, unavailableError(err))
	}
}

// shutdownBody turns the error from reading a response body whose request
// Handler.Shutdown cancelled into io.EOF, so that the response ends cleanly
// (the client sees the end of a watch, as when the apiserver closes it)
// instead of being aborted.
//
// Closing it also closes the inbound request body. The apiserver may answer
// before reading the whole body (a 403 from authorization), and an HTTP/2
// client then stops sending it (inbound is set for HTTP/2 requests only); the transport's Close waits for its copy of
// the body to end, which would then never happen, and the client would wait
// for the end of the response forever. Once the response is over, the rest
// of the body is not needed.
type shutdownBody struct {
	io.ReadCloser
	ctx     context.Context
	inbound io.Closer // nil without a request body
}

func (b *shutdownBody) Close() error {
	if b.inbound != nil {
		_ = b.inbound.Close() // unblocks a pending read of the body; nothing to report
	}
	return b.ReadCloser.Close()
}

func (b *shutdownBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), errShuttingDown) {
		return n, io.EOF
	}
	return n, err
}

// upgradeAwareTransport sends upgrade requests over upgrade, which speaks
// HTTP/1.1 only, and all others over rt.
type upgradeAwareTransport struct {
	rt, upgrade http.RoundTripper
}

func (t *upgradeAwareTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if isUpgrade(req.Header) {
		return t.upgrade.RoundTrip(req)
	}
	return t.rt.RoundTrip(req)
}

func (t *upgradeAwareTransport) CloseIdleConnections() {
	utilnet.CloseIdleConnectionsFor(t.rt)
	utilnet.CloseIdleConnectionsFor(t.upgrade)
}
