package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/consistency"
	"github.com/listproxy/listproxy/pkg/proxy"
)

// readHeaderTimeout bounds reading a request's headers (slow clients). Not
// measured; generous for loopback clients.
const readHeaderTimeout = 30 * time.Second

// Run serves until ctx is done, then shuts down: /readyz fails at once; after
// cfg.ShutdownDelay listproxy stops accepting connections, ends watches and
// upgraded connections, and lets other in-flight requests finish for up to
// cfg.ShutdownGracePeriod before closing their connections. Run returns nil
// after a shutdown and an error if it cannot serve.
func Run(ctx context.Context, cfg *Config) error {
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := registerRuntimeMetrics(reg); err != nil {
		return err
	}

	// One review cache for the edge and store admission (stores.go).
	cfg, err := withSharedAuthorizer(cfg)
	if err != nil {
		return err
	}

	// Snapshots outlive ctx until in-flight requests have drained.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	h, err := newEdge(cacheCtx, cfg, reg)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if cfg.Serving != nil {
		if tlsConfig, err = cfg.Serving.tlsConfig(cacheCtx); err != nil {
			_ = h.Shutdown(context.Background())
			return err
		}
	}
	ln := cfg.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", cfg.ListenAddress)
		if err != nil {
			_ = h.Shutdown(context.Background())
			return fmt.Errorf("listen on --listen-address: %w", err)
		}
	}

	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
	}
	serveErr := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	klog.InfoS("Serving", "address", ln.Addr().String(), "tls", tlsConfig != nil, "authentication", cfg.Auth != nil, "apiserver", cfg.Upstream.Host)

	select {
	case err := <-serveErr:
		_ = h.Shutdown(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown(cfg, h, srv, serveErr)
	return nil
}

// registerRuntimeMetrics registers the Go runtime's and the process's
// metrics with reg, unless they are already.
func registerRuntimeMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return fmt.Errorf("register runtime metrics: %w", err)
		}
	}
	return nil
}

// newEdge builds the HTTP edge over cfg.Lists, or, from cfg.Cache, over
// the store registry and the servers startCache starts under ctx.
func newEdge(ctx context.Context, cfg *Config, reg *prometheus.Registry) (*proxy.Handler, error) {
	pcfg := proxy.Config{
		Upstream: cfg.Upstream, Lists: cfg.Lists, Registry: reg, Auth: cfg.Auth, Profiling: cfg.Profiling,
		AcceptHosts: cfg.Origins.AcceptHosts, RejectCrossOrigin: cfg.Origins.RejectCrossOrigin,
	}
	if cfg.Lists == nil && cfg.Cache != nil {
		c, err := startCache(ctx, cfg, reg)
		if err != nil {
			return nil, err
		}
		pcfg.Lists = c.lists
		pcfg.Ready = c.stores.Ready
		pcfg.Debug = map[string]http.Handler{"consistency": consistency.Handler(c.stores.Consistency())}
		if c.watches != nil {
			pcfg.Watches = c.watches
		}
	}
	return proxy.NewHandler(pcfg)
}

// shutdown drains the edge: /readyz fails at once; after
// cfg.ShutdownDelay srv stops accepting connections, watches and upgraded
// connections end, and other in-flight requests get up to
// cfg.ShutdownGracePeriod before their connections close.
func shutdown(cfg *Config, h *proxy.Handler, srv *http.Server, serveErr <-chan error) {
	klog.InfoS("Shutting down", "delay", cfg.ShutdownDelay, "gracePeriod", cfg.ShutdownGracePeriod)
	h.Drain()
	if cfg.ShutdownDelay > 0 {
		t := time.NewTimer(cfg.ShutdownDelay)
		<-t.C
	}

	graceCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGracePeriod)
	defer cancel()
	longRunningDone := make(chan error, 1)
	go func() { longRunningDone <- h.Shutdown(graceCtx) }()
	if err := srv.Shutdown(graceCtx); err != nil {
		klog.InfoS("Grace period over; closing remaining connections", "err", err)
		_ = srv.Close()
	}
	if err := <-longRunningDone; err != nil {
		klog.InfoS("Grace period over with upgraded connections still open", "err", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Serving ended unexpectedly during shutdown")
	}
	klog.InfoS("Shut down")
}
