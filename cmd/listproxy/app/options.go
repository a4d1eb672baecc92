// Package app is the listproxy command: flags, their validation, and Run,
// which builds the store registry (pkg/stores, with pkg/freshness and
// pkg/consistency), the LIST and watch servers over it (pkg/lists,
// pkg/watch) and the edge (pkg/proxy) in front of them. It is the top of
// the import graph: no pkg/ package imports it; only test/ runs it in
// process.
package app

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/listproxy/listproxy/pkg/auth"
	"github.com/listproxy/listproxy/pkg/proxy"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
)

// Defaults. Not measured: the grace period leaves a margin under the
// kubelet's default 30s terminationGracePeriodSeconds.
const (
	defaultListenAddress       = "127.0.0.1:8001"
	defaultShutdownGracePeriod = 25 * time.Second
)

// Options are listproxy's command-line options.
type Options struct {
	// Kubeconfig is the path of a kubeconfig with the apiserver and
	// listproxy's credentials. Empty: in-cluster configuration.
	Kubeconfig string
	// ListenAddress is the host:port served: plain HTTP on a loopback
	// address in sidecar mode, HTTPS on any address in delegated mode.
	ListenAddress string
	// ShutdownGracePeriod bounds how long in-flight requests may take to
	// finish once shutdown begins.
	ShutdownGracePeriod time.Duration
	// ShutdownDelay is how long listproxy keeps serving, with /readyz failing,
	// before it stops accepting requests.
	ShutdownDelay time.Duration
	// Cache configures serving LISTs from snapshots.
	Cache CacheOptions
	// Auth configures authentication, authorization and TLS.
	Auth AuthOptions
	// Profiling serves Go's pprof profiles under /debug/listproxy/pprof/.
	Profiling bool
	// Logs configures logging (--logging-format, -v, --vmodule) as in
	// every Kubernetes component; main applies it before anything logs.
	Logs *logsapi.LoggingConfiguration
	// Version asks for the version to be printed instead of serving.
	Version bool
}

// NewOptions returns Options with defaults.
func NewOptions() *Options {
	return &Options{
		ListenAddress:       defaultListenAddress,
		ShutdownGracePeriod: defaultShutdownGracePeriod,
		Cache:               newCacheOptions(),
		Auth:                newAuthOptions(),
		Logs:                logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns all of listproxy's flags in named sections for --help:
// "listproxy" (AddFlags), "logging" and "misc".
func (o *Options) Flags() cliflag.NamedFlagSets {
	var sections cliflag.NamedFlagSets
	o.AddFlags(sections.FlagSet("listproxy"))
	logsapi.AddFlags(o.Logs, sections.FlagSet("logging"))
	sections.FlagSet("misc").BoolVar(&o.Version, "version", o.Version,
		"Print listproxy's version and the Kubernetes library versions it was built with, then exit.")
	return sections
}

// AddFlags adds o's flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Path to a kubeconfig file naming the apiserver and listproxy's own credentials for it. If empty, the in-cluster configuration (service account) is used.")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress,
		"host:port to serve on. With --authentication=none (plain HTTP, no authentication, listproxy's credentials for everything) the host must be a loopback address (for example 127.0.0.1, ::1 or localhost). With --authentication=delegated (HTTPS) any address, e.g. 0.0.0.0:8443.")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod,
		"On SIGTERM or SIGINT, how long in-flight requests may take to finish before their connections are closed. Watches and upgraded connections (exec, attach, port-forward) are ended at once.")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay,
		"On SIGTERM or SIGINT, how long to keep serving with /readyz failing before stopping to accept requests, so that load balancers notice first.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling,
		"Serve Go's pprof profiles of listproxy under /debug/listproxy/pprof/ (e.g. go tool pprof <url>/debug/listproxy/pprof/profile?seconds=30). In delegated mode callers need get on that non-resource path. /debug/pprof/ is the apiserver's and passes through.")
	o.Cache.addFlags(fs)
	o.Auth.addFlags(fs)
}

// Validate checks o and returns every problem found, each naming its flag.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Auth.validate(o.ListenAddress)...)
	if o.ShutdownGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-grace-period: must not be negative, got %v", o.ShutdownGracePeriod))
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay: must not be negative, got %v", o.ShutdownDelay))
	}
	errs = append(errs, o.Cache.validate()...)
	if o.Logs != nil {
		for _, err := range logsapi.Validate(o.Logs, nil, nil) {
			errs = append(errs, fmt.Errorf("%s: %s", loggingFlag(err.Field), err.ErrorBody()))
		}
	}
	return errors.Join(errs...)
}

// loggingFlag names the flag that sets a LoggingConfiguration field.
func loggingFlag(field string) string {
	switch {
	case field == "format":
		return "--logging-format"
	case field == "verbosity":
		return "-v"
	case strings.HasPrefix(field, "vmodule"):
		return "--vmodule"
	case strings.HasPrefix(field, "options.json."):
		return "--log-json-*"
	case strings.HasPrefix(field, "options.text."):
		return "--log-text-*"
	}
	return "logging " + field
}

// validateHostPort checks that addr is host:port with a non-zero port.
func validateHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %q", port)
	} else if p == 0 {
		return errors.New("port must not be 0")
	}
	return nil
}

// validateLoopback checks that host:port addr has a loopback host.
func validateLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("host %q is not a loopback address; listproxy performs no authentication in this mode and must not be reachable from other hosts", host)
	}
	return nil
}

// Config is everything Run needs.
type Config struct {
	// Upstream locates the apiserver and carries listproxy's credentials.
	Upstream *rest.Config
	// Listener, if set, is served instead of ListenAddress (tests). Run
	// closes it.
	Listener net.Listener
	// ListenAddress is listened on when Listener is nil.
	ListenAddress string
	// Registry collects listproxy's metrics and is served at /metrics. Nil:
	// Run creates one.
	Registry *prometheus.Registry
	// Lists answers cacheable LISTs. Nil passes everything through.
	Lists proxy.ListServer
	// ShutdownGracePeriod and ShutdownDelay: see Options.
	ShutdownGracePeriod time.Duration
	ShutdownDelay       time.Duration
	// Cache, when set and Lists is nil, makes Run serve LISTs from
	// snapshots. Nil passes everything through.
	Cache *CacheOptions
	// Serving, when set, serves HTTPS; nil serves plain HTTP.
	Serving *ServingConfig
	// Auth, when set, is delegated mode (see proxy.Config.Auth).
	Auth *auth.Config
	// Profiling: see Options.
	Profiling bool
	// Origins: which requests are refused by Host and browser origin.
	Origins OriginPolicy
	// OnStores, when set, is called with the store registry Run starts from
	// Cache, before it serves. For tests only (test/framework).
	OnStores func(*stores.Registry)
	// TableRules, when set, replaces the Table rules of built-in
	// resources (stores.Config.TableRules). For tests only.
	TableRules func(minor int, gr schema.GroupResource) (table.Rules, bool)
}

// Complete loads the upstream configuration and returns the Config to Run.
// Call Validate first.
func (o *Options) Complete() (*Config, error) {
	var (
		upstream *rest.Config
		err      error
	)
	if o.Kubeconfig != "" {
		upstream, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: load %s: %w", o.Kubeconfig, err)
		}
	} else {
		upstream, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (set --kubeconfig outside a cluster): %w", err)
		}
	}
	// Pass-through goes through the transport, which client-go never rate
	// limits; QPS < 0 also turns off the rate limiter of any client built
	// from this config, so listproxy's own calls are not throttled either.
	upstream.QPS = -1
	upstream.Burst = 0
	if upstream.UserAgent == "" {
		upstream.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	var cache *CacheOptions
	if len(o.Cache.Resources) > 0 {
		c := o.Cache
		cache = &c
	}
	serving, authCfg, err := o.Auth.complete(o.ListenAddress)
	if err != nil {
		return nil, err
	}
	origins, err := o.Auth.originPolicy()
	if err != nil {
		return nil, err
	}
	return &Config{
		Serving:             serving,
		Auth:                authCfg,
		Cache:               cache,
		Upstream:            upstream,
		ListenAddress:       o.ListenAddress,
		ShutdownGracePeriod: o.ShutdownGracePeriod,
		ShutdownDelay:       o.ShutdownDelay,
		Profiling:           o.Profiling,
		Origins:             origins,
	}, nil
}
