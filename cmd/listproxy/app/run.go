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
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return fmt.Errorf("register runtime metrics: %w", err)
		}
	}

	// One review cache for the edge and store admission (stores.go).
	cfg, err := withSharedAuthorizer(cfg)
	if err != nil {
		return err
	}

	// Snapshots outlive ctx until in-flight requests have drained.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	listServer := cfg.Lists
	var debug map[string]http.Handler
	var watches proxy.WatchServer
	var ready func() error
	if listServer == nil && cfg.Cache != nil {
		c, err := startCache(cacheCtx, cfg, reg)
		if err != nil {
			return err
		}
		listServer = c.lists
		ready = c.stores.Ready
		debug = map[string]http.Handler{"consistency": consistency.Handler(c.stores.Consistency())}
		if c.watches != nil {
			watches = c.watches
		}
	}
	h, err := proxy.NewHandler(proxy.Config{
		Upstream: cfg.Upstream, Lists: listServer, Watches: watches, Registry: reg, Auth: cfg.Auth, Debug: debug, Profiling: cfg.Profiling,
		AcceptHosts: cfg.Origins.AcceptHosts, RejectCrossOrigin: cfg.Origins.RejectCrossOrigin, Ready: ready,
	})
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
	return nil
}
