// Package proxy is listproxy's HTTP edge: it serves /healthz, /readyz,
// /metrics and the debug handlers it is given itself, classifies every other
// request, offers cacheable LIST requests to a ListServer and cacheable WATCH
// requests to a WatchServer, passes the rest through to the apiserver
// unchanged, and tracks long-running requests so that Shutdown can end
// them. In service mode (Config.Auth, pkg/auth) it authenticates callers,
// authorizes their cached LISTs and WATCHes, and passes requests through
// with the caller's identity. It is the top of the import graph below cmd:
// no listproxy package may import it.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/auth"
	"github.com/listproxy/listproxy/pkg/httpapi"
)

// ListServer answers cacheable LIST requests from snapshots (pkg/lists).
type ListServer interface {
	// Cacheable reports, without side effects, whether r could be answered
	// from a snapshot at all. In service mode only such LISTs are
	// authorized by listproxy; the others pass through and the apiserver
	// authorizes them.
	Cacheable(r *http.Request) bool
	// ServeList returns false, having written nothing, when the request
	// must pass through.
	ServeList(w http.ResponseWriter, r *http.Request) bool
	// TranslateContinue rewrites a listproxy continue token in r, if any,
	// into the apiserver's own token for the same position (or a value the
	// apiserver rejects as an invalid continue token). The Handler calls it
	// for every GET that passes through without being offered to ServeList
	// (impersonation, a denied or failed review), so that the apiserver
	// never sees a listproxy token.
	TranslateContinue(r *http.Request)
}

// Paths served by listproxy itself rather than by the apiserver.
const (
	pathHealthz = "/healthz"
	pathReadyz  = "/readyz"
	pathMetrics = "/metrics"
)

// errShuttingDown is the cause with which long-running requests are cancelled
// by Handler.Shutdown.
var errShuttingDown = errors.New("listproxy is shutting down")

// Config configures a Handler.
type Config struct {
	// Upstream locates the apiserver and carries listproxy's own credentials,
	// which every pass-through request uses unless Auth is set. Required.
	// NewHandler does not modify it.
	Upstream *rest.Config
	// Auth, when set, is service mode: every API request and /metrics must
	// be authenticated (401 otherwise), LISTs are authorized for the caller
	// before a ListServer sees them, and pass-through requests carry the
	// caller's identity. Nil is sidecar mode: callers are trusted and
	// listproxy's credentials are used.
	Auth *auth.Config
	// Lists is offered every request whose Kubernetes verb is list, before it
	// passes through. Nil passes everything through.
	Lists ListServer
	// Watches is offered every request whose Kubernetes verb is watch,
	// before it passes through. Nil passes every watch through.
	Watches WatchServer
	// Registry registers listproxy's metrics. Nil: a private registry, so the
	// metrics are collected but not exported.
	Registry prometheus.Registerer
	// Gatherer is served at /metrics. Nil: Registry, if it is also a
	// prometheus.Gatherer (as *prometheus.Registry is); otherwise /metrics
	// answers 404.
	Gatherer prometheus.Gatherer
	// Ready, when set, is part of /readyz: listproxy is not ready while it
	// returns an error (discovery not read, preloaded stores not synced).
	Ready func() error
	// Clock times requests and expires cached readiness. Nil: the real clock.
	Clock clock.PassiveClock
	// Debug serves DebugPathPrefix+NAME with Debug[NAME] (for example
	// "consistency"); in service mode callers are authorized for the path
	// as for /metrics.
	Debug map[string]http.Handler
	// Profiling serves Go's pprof profiles under /debug/listproxy/pprof/.
	Profiling bool
	// AcceptHosts, when not nil, are the only Host names (port removed, IPv6
	// literals in brackets) served; any other Host gets a 403 Status. Nil
	// serves every Host.
	AcceptHosts []*regexp.Regexp
	// RejectCrossOrigin refuses with a 403 Status every request a browser
	// sends for another origin (an Origin header naming another host and
	// port than Host, or Sec-Fetch-Site: cross-site).
	RejectCrossOrigin bool
}

// Handler is listproxy's HTTP edge. Create it with NewHandler; call Drain and
// then Shutdown when the server stops.
type Handler struct {
	lists     ListServer
	watches   WatchServer
	auth      *auth.Auth // nil in sidecar mode
	debug     map[string]http.Handler
	pass      *passthrough
	ready     *readiness
	ownReady  func() error // Config.Ready; nil is always ready
	metrics   *metrics
	metricsH  http.Handler
	profiling bool // serve pathPprof
	origins   originFilter
	clock     clock.PassiveClock
	draining  atomic.Bool             // set by Drain and Shutdown: /readyz fails
	stopCtx   context.Context         // done once Shutdown ends long-running requests
	stop      context.CancelCauseFunc // cancels stopCtx with errShuttingDown
	longLived tracker                 // in-flight long-running requests
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that passes requests through to cfg.Upstream.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Upstream == nil {
		return nil, errors.New("proxy: Config.Upstream is required")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	gatherer := cfg.Gatherer
	if gatherer == nil {
		gatherer, _ = reg.(prometheus.Gatherer)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	var a *auth.Auth
	if cfg.Auth != nil {
		if a, err = auth.New(cfg.Auth, cfg.Upstream, reg); err != nil {
			return nil, err
		}
	}
	pass, err := newPassthrough(cfg.Upstream, a != nil)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		lists:     cfg.Lists,
		watches:   cfg.Watches,
		auth:      a,
		debug:     cfg.Debug,
		pass:      pass,
		ready:     newReadiness(pass.transport, pass.target, clk),
		ownReady:  cfg.Ready,
		metrics:   m,
		clock:     clk,
		profiling: cfg.Profiling,
		origins:   originFilter{acceptHosts: cfg.AcceptHosts, rejectCrossOrigin: cfg.RejectCrossOrigin},
	}
	if gatherer != nil {
		h.metricsH = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: klog.NewStandardLogger("ERROR")})
	}
	h.stopCtx, h.stop = context.WithCancelCause(context.Background())
	return h, nil
}

// ServeHTTP serves /healthz, /readyz, /metrics and /debug/listproxy/ (debug.go)
// itself and every other request from Lists or the apiserver.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.origins.check(r); err != nil {
		refuse(w, err)
		return
	}
	switch r.URL.Path {
	case pathHealthz:
		h.serveHealthz(w, r)
	case pathReadyz:
		h.serveReadyz(w, r)
	case pathMetrics:
		if h.auth != nil {
			var ok bool
			if r, ok = h.auth.Authenticate(w, r); !ok || !h.auth.AuthorizeNonResource(w, r) {
				return
			}
		}
		if h.metricsH == nil {
			httpapi.WriteStatus(w, notFoundError())
			return
		}
		h.metricsH.ServeHTTP(w, r)
	default:
		if isDebugPath(r.URL.Path) {
			h.serveDebug(w, r)
			return
		}
		h.serveAPI(w, r)
	}
}

// Drain makes /readyz fail from now on. Requests are still served.
func (h *Handler) Drain() {
	h.draining.Store(true)
}

// Shutdown ends long-running requests: watch and streaming responses end
// cleanly at once (a client sees the end of the stream, as when the apiserver
// closes a watch), upgraded connections (exec, attach, port-forward) are
// closed, and long-running requests arriving later fail with 503. It then
// waits until their handlers have returned or ctx is done, and closes idle
// upstream connections. Ordinary requests are left to the http.Server's own
// Shutdown.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.draining.Store(true)
	h.stop(errShuttingDown)
	err := h.longLived.wait(ctx)
	h.pass.closeIdleConnections()
	if err != nil {
		return fmt.Errorf("wait for long-running requests: %w", err)
	}
	return nil
}

func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	kind := classify(r)
	rec := &responseRecorder{ResponseWriter: w}
	source := httpapi.SourceAPIServer
	// The raw query is searched first: most requests carry no shard selector.
	sharded := strings.Contains(r.URL.RawQuery, "shardSelector") && r.URL.Query().Get("shardSelector") != ""
	// Deferred so that http.ErrAbortHandler panics (client gone mid-stream)
	// are counted too.
	defer func() {
		h.metrics.observe(kind.verb, source, rec.statusCode(), h.clock.Since(start), sharded)
	}()

	cacheable := h.lists != nil && kind.verb == verbList
	cacheableWatch := h.watches != nil && kind.verb == verbWatch
	if h.auth == nil && auth.HasImpersonation(r.Header) {
		// Sidecar mode has one identity, listproxy's. Dropping the headers
		// would run the request as listproxy, with rights the caller asked
		// not to use; honouring them would lend the caller listproxy's
		// right to impersonate. Neither is what the caller meant.
		source = httpapi.SourceListproxy
		refuse(rec, sidecarImpersonationError())
		return
	}
	if h.auth != nil {
		var answered bool
		if r, cacheable, cacheableWatch, answered = h.authenticate(rec, r, cacheable, cacheableWatch); answered {
			source = httpapi.SourceListproxy
			return
		}
	}

	if !cacheable {
		if h.lists != nil && r.Method == http.MethodGet {
			h.lists.TranslateContinue(r)
		}
	} else if offerToSnapshots(rec, r, "ListServer", h.lists.ServeList) {
		source = httpapi.SourceSnapshot
		return
	}

	if kind.longRunning {
		if !h.longLived.add() {
			httpapi.WriteStatus(rec, shuttingDownError())
			return
		}
		defer h.longLived.done()
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stopAfter := context.AfterFunc(h.stopCtx, func() {
			cancel(errShuttingDown)
			rec.closeHijacked()
		})
		defer stopAfter()
		r = r.WithContext(ctx)
	}
	if cacheableWatch && offerToSnapshots(rec, r, "WatchServer", h.watches.ServeWatch) {
		source = httpapi.SourceSnapshot
		return
	}
	if httpapi.IsPeerList(r) {
		// Another replica's warm start: it lists from the apiserver
		// itself rather than through this one.
		source = httpapi.SourceListproxy
		httpapi.DeclinePeerList(rec)
		return
	}
	h.pass.ServeHTTP(rec, r)
}

// authenticate is serveAPI's step in service mode: it authenticates r and,
// for a LIST or watch a snapshot server could answer (cacheable,
// cacheableWatch), authorizes the caller's read. It returns the
// authenticated request and whether snapshots may still answer it, or
// answered when listproxy has answered it itself (401, 403). Every watch
// passed through here is counted with why.
func (h *Handler) authenticate(rec *responseRecorder, r *http.Request, cacheable, cacheableWatch bool) (_ *http.Request, _, _, answered bool) {
	var ok bool
	if r, ok = h.auth.Authenticate(rec, r); !ok {
		return r, cacheable, cacheableWatch, true
	}
	passWatch := func(reason string) {
		if cacheableWatch {
			h.watches.PassedThrough(r, reason)
		}
		cacheable, cacheableWatch = false, false
	}
	switch {
	case !cacheable && !cacheableWatch:
	case auth.HasImpersonation(r.Header):
		// Only the apiserver can check the caller's right to
		// impersonate; never answer such a request from a snapshot.
		passWatch(WatchPassImpersonation)
	case cacheable && !h.lists.Cacheable(r), cacheableWatch && !h.watches.Cacheable(r):
		passWatch("")
	default:
		// The caller's verb (list or watch) is authorized.
		switch h.auth.AuthorizeRead(rec, r) {
		case auth.Answered:
			return r, cacheable, cacheableWatch, true
		case auth.PassThrough:
			passWatch(WatchPassAuthorization)
		}
	}
	return r, cacheable, cacheableWatch, false
}

// offerToSnapshots offers r to a snapshot server's serve (named server in
// logs) and reports whether it was answered. The response is labelled as
// served from a snapshot while serve runs; a server that declines must
// not have written anything, and one that wrote and still declined is
// logged and counted as answered, never passed through on top.
func offerToSnapshots(rec *responseRecorder, r *http.Request, server string, serve func(http.ResponseWriter, *http.Request) bool) bool {
	rec.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
	if serve(rec, r) {
		return true
	}
	rec.Header().Del(httpapi.HeaderServedFrom)
	if rec.wroteHeader() {
		klog.ErrorS(nil, server+" wrote a response but returned false; not passing through", "path", r.URL.Path)
		return true
	}
	return false
}

// Verbs used as the "verb" metric label.
const (
	verbList    = "list"
	verbWatch   = "watch"
	verbConnect = "connect"
	verbOther   = "other"
)

var (
	requestInfoFactory = &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
	// metricVerbs are the Kubernetes verbs reported as they are.
	metricVerbs = sets.New("list", "watch", "get", "create", "update", "patch", "delete", "deletecollection")
	// connectSubresources are proxied streams; together with watch they are
	// the apiserver's long-running requests (see BasicLongRunningRequestCheck
	// in k8s.io/apiserver/pkg/server/filters).
	connectSubresources = sets.New("attach", "exec", "portforward", "proxy")
)

// requestKind is what listproxy needs to know about a request up front.
type requestKind struct {
	verb        string // bounded: one of metricVerbs, connect or other
	longRunning bool   // may stream for minutes: watch, log, connect, upgrade
}

// classify derives a request's Kubernetes verb the way the apiserver does.
func classify(r *http.Request) requestKind {
	upgrade := isUpgrade(r.Header)
	info, err := requestInfoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		if upgrade {
			return requestKind{verb: verbConnect, longRunning: true}
		}
		return requestKind{verb: verbOther}
	}
	switch {
	case upgrade || info.Verb == "proxy" || connectSubresources.Has(info.Subresource):
		return requestKind{verb: verbConnect, longRunning: true}
	case info.Verb == verbWatch:
		return requestKind{verb: verbWatch, longRunning: true}
	case metricVerbs.Has(info.Verb):
		return requestKind{verb: info.Verb, longRunning: info.Subresource == "log"}
	default:
		return requestKind{verb: verbOther}
	}
}

// isUpgrade reports whether h asks for a protocol upgrade (SPDY, WebSocket).
func isUpgrade(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// responseRecorder remembers the status code written through it. It keeps
// flushing and hijacking available to http.ResponseController, and can close
// a hijacked connection (closeHijacked) on shutdown.
type responseRecorder struct {
	http.ResponseWriter
	code     atomic.Int32 // final status code, or 101 once switched; 0 until then
	hijacked atomic.Bool

	mu     sync.Mutex // guards conn and closed
	conn   net.Conn   // the hijacked connection; nil until hijacked
	closed bool       // closeHijacked was called
}

// statusCodeClientGone is counted for requests whose client went away before
// any response was written (nginx's convention).
const statusCodeClientGone = 499

func (w *responseRecorder) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.code.CompareAndSwap(0, int32(code))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseRecorder) Write(b []byte) (int, error) {
	w.code.CompareAndSwap(0, http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *responseRecorder) FlushError() error {
	w.code.CompareAndSwap(0, http.StatusOK)
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *responseRecorder) Flush() { _ = w.FlushError() }

func (w *responseRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	w.hijacked.Store(true)
	w.code.CompareAndSwap(0, http.StatusSwitchingProtocols)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn = conn
	if w.closed {
		_ = conn.Close() // shutdown came first; the caller's copies fail at once
	}
	return conn, brw, nil
}

// closeHijacked closes the hijacked connection, now or when it is hijacked.
// http.Server.Shutdown does not track hijacked connections, and
// httputil.ReverseProxy keeps an upgraded connection open after the apiserver
// ended its side until the client ends its own.
func (w *responseRecorder) closeHijacked() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.conn != nil {
		_ = w.conn.Close() // ends the copies; nothing to report
	}
}

func (w *responseRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseRecorder) wroteHeader() bool { return w.code.Load() != 0 }

// clientGone records that nothing was written because the client left.
func (w *responseRecorder) clientGone() { w.code.CompareAndSwap(0, statusCodeClientGone) }

func (w *responseRecorder) statusCode() int {
	if c := w.code.Load(); c != 0 {
		return int(c)
	}
	return http.StatusOK // what net/http sends when a handler writes nothing
}

// tracker counts in-flight long-running requests. Unlike sync.WaitGroup it
// allows add concurrently with wait, and refuses new requests once stopped.
type tracker struct {
	mu      sync.Mutex    // guards the fields below
	n       int           // in-flight requests
	idle    chan struct{} // closed when n drops to 0; nil while n == 0
	stopped bool          // set by wait; add fails from then on
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
		t.idle = nil
	}
}

// wait stops the tracker and waits until no request is in flight or ctx is done.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	t.stopped = true
	idle := t.idle
	t.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
