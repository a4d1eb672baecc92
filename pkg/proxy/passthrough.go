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

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// passthrough forwards requests to the apiserver with listproxy's own
// credentials. Request and response travel unchanged except for hop-by-hop
// headers and the caller's credentials, which are removed (sidecar mode: the
// caller is trusted and listproxy's identity is used).
type passthrough struct {
	target    *url.URL
	transport *upgradeAwareTransport
	proxy     *httputil.ReverseProxy
}

// strippedHeaders are caller credentials and identity assertions that must
// not reach the apiserver under listproxy's identity. X-Remote-* are the
// default request-header (front proxy) names, honoured by the apiserver only
// from a front-proxy client certificate; stripping them is defence in depth.
var strippedHeaders = []string{"Authorization", "X-Remote-User", "X-Remote-Group"}

// strippedHeaderPrefixes are stripped like strippedHeaders (canonical form).
var strippedHeaderPrefixes = []string{"Impersonate-", "X-Remote-Extra-"}

// forwardedHeaders are removed by ReverseProxy before Rewrite; they are
// restored so that the apiserver sees the request as the client sent it.
var forwardedHeaders = []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

func newPassthrough(upstream *rest.Config) (*passthrough, error) {
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("apiserver URL: %w", err)
	}
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

	p := &passthrough{
		target:    target,
		transport: &upgradeAwareTransport{rt: rt, upgrade: upgradeRT},
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.transport,
		// Flush every write: watch events must reach the client as they
		// arrive. Large responses still stream through a fixed buffer.
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.handleError,
		ErrorLog:       klog.NewStandardLogger("WARNING"),
	}
	return p, nil
}

func (p *passthrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.proxy.ServeHTTP(w, r)
}

func (p *passthrough) closeIdleConnections() {
	p.transport.CloseIdleConnections()
}

func (p *passthrough) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.target)
	h := pr.Out.Header
	for _, name := range forwardedHeaders {
		if v, ok := pr.In.Header[name]; ok {
			h[name] = v
		}
	}
	for _, name := range strippedHeaders {
		h.Del(name)
	}
	for name := range h {
		for _, prefix := range strippedHeaderPrefixes {
			if strings.HasPrefix(http.CanonicalHeaderKey(name), prefix) {
				delete(h, name)
			}
		}
	}
}

func (p *passthrough) modifyResponse(res *http.Response) error {
	res.Header.Set(HeaderServedFrom, SourceAPIServer)
	// An upgraded connection's body is the connection itself; leave it be.
	if res.StatusCode != http.StatusSwitchingProtocols {
		res.Body = &shutdownBody{ReadCloser: res.Body, ctx: res.Request.Context()}
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
		w.Header().Set(HeaderServedFrom, SourceAPIServer)
		WriteStatus(w, shuttingDownError())
	case r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		if rec != nil {
			rec.clientGone()
		}
	default:
		klog.ErrorS(err, "Passing request through to the apiserver failed", "method", r.Method, "path", r.URL.Path)
		w.Header().Set(HeaderServedFrom, SourceAPIServer)
		WriteStatus(w, unavailableError(err))
	}
}

// shutdownBody turns the error from reading a response body whose request
// Handler.Shutdown cancelled into io.EOF, so that the response ends cleanly
// (the client sees the end of a watch, as when the apiserver closes it)
// instead of being aborted.
type shutdownBody struct {
	io.ReadCloser
	ctx context.Context
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
