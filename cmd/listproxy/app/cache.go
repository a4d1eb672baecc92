package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/proxy"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// CacheOptions are the flags of snapshot serving and consistent reads.
type CacheOptions struct {
	Resources               []string
	SnapshotHistory         time.Duration
	SnapshotHistoryMaxBytes int64
	IdleResourceTTL         time.Duration
	ContinueTokenKeysFile   string
	LimitForRV0             bool
	ListScanBudget          int
	DiscoveryInterval       time.Duration
	NotOlderThanWait        time.Duration

	EtcdServers            []string
	EtcdCAFile             string
	EtcdCertFile           string
	EtcdKeyFile            string
	EtcdPrefix             string
	EtcdResourcePrefixes   map[string]string
	ConsistentReadTimeout  time.Duration
	ConsistentReadFallback string
}

// Defaults. The history window and read timeouts follow the apiserver's
// watch cache (75s history doubled for pagination; 3s waits); none are
// measured for listproxy yet.
func newCacheOptions() CacheOptions {
	return CacheOptions{
		Resources:               []string{"*"},
		SnapshotHistory:         150 * time.Second,
		SnapshotHistoryMaxBytes: 1 << 30,
		IdleResourceTTL:         15 * time.Minute,
		LimitForRV0:             true,
		ListScanBudget:          100000,
		DiscoveryInterval:       10 * time.Second,
		NotOlderThanWait:        3 * time.Second,
		EtcdPrefix:              freshness.DefaultRoot,
		EtcdResourcePrefixes:    map[string]string{},
		ConsistentReadTimeout:   3 * time.Second,
		ConsistentReadFallback:  "apiserver",
	}
}

func (o *CacheOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Resources, "resources", o.Resources,
		"Resources served from snapshots, as RESOURCE[.GROUP] (pods, deployments.apps, widgets.example.com), or * for every resource discovery reports with list and watch. Empty: pass everything through.")
	fs.DurationVar(&o.SnapshotHistory, "snapshot-history", o.SnapshotHistory,
		"How long superseded snapshots are kept for exact-resourceVersion reads and continue tokens.")
	fs.Int64Var(&o.SnapshotHistoryMaxBytes, "snapshot-history-max-bytes", o.SnapshotHistoryMaxBytes,
		"Bound on object bytes held only by snapshot history, per resource and representation; 0 for no bound.")
	fs.DurationVar(&o.IdleResourceTTL, "idle-resource-ttl", o.IdleResourceTTL,
		"Drop a resource's snapshots after this long without a LIST; 0 keeps them forever.")
	fs.StringVar(&o.ContinueTokenKeysFile, "continue-token-keys-file", o.ContinueTokenKeysFile,
		"File of continue-token keys, one per line, base64 of 32 random bytes; the first seals, all open; re-read when it changes. Share it between replicas. Empty: a random key per process (tokens do not survive restarts).")
	fs.BoolVar(&o.LimitForRV0, "limit-for-resource-version-0", o.LimitForRV0,
		"Honour limit (paginate) for resourceVersion=0 lists; the apiserver ignores limit there, KEP-365 allows either.")
	fs.IntVar(&o.ListScanBudget, "list-scan-budget", o.ListScanBudget,
		"Most objects one page examines under a selector before returning a shorter page with a continue token; 0 for no bound.")
	fs.DurationVar(&o.DiscoveryInterval, "discovery-refresh-interval", o.DiscoveryInterval,
		"How often API discovery and CustomResourceDefinitions are re-read.")
	fs.DurationVar(&o.NotOlderThanWait, "not-older-than-wait", o.NotOlderThanWait,
		"How long a resourceVersion=N (NotOlderThan) list waits for snapshots to reach N before passing through.")
	fs.StringSliceVar(&o.EtcdServers, "etcd-servers", o.EtcdServers,
		"etcd client URLs of the cluster's etcd, to prove freshness of consistent reads (resourceVersion unset). Empty: consistent reads pass through.")
	fs.StringVar(&o.EtcdCAFile, "etcd-cafile", o.EtcdCAFile, "CA file to verify etcd's serving certificate.")
	fs.StringVar(&o.EtcdCertFile, "etcd-certfile", o.EtcdCertFile, "Client certificate for etcd.")
	fs.StringVar(&o.EtcdKeyFile, "etcd-keyfile", o.EtcdKeyFile, "Client key for etcd.")
	fs.StringVar(&o.EtcdPrefix, "etcd-prefix", o.EtcdPrefix, "The apiserver's --etcd-prefix.")
	fs.StringToStringVar(&o.EtcdResourcePrefixes, "etcd-resource-prefix", o.EtcdResourcePrefixes,
		"Override a resource's etcd key prefix, RESOURCE[.GROUP]=PREFIX (repeatable), e.g. pods=/registry/pods.")
	fs.DurationVar(&o.ConsistentReadTimeout, "consistent-read-timeout", o.ConsistentReadTimeout,
		"How long a consistent read may wait for its freshness proof before falling back.")
	fs.StringVar(&o.ConsistentReadFallback, "consistent-read-fallback", o.ConsistentReadFallback,
		"What a consistent read does when freshness cannot be proven in time: apiserver (pass through) or reject (429 with Retry-After).")
}

func (o *CacheOptions) validate() []error {
	var errs []error
	if o.ConsistentReadFallback != "apiserver" && o.ConsistentReadFallback != "reject" {
		errs = append(errs, fmt.Errorf("--consistent-read-fallback: must be apiserver or reject, got %q", o.ConsistentReadFallback))
	}
	for name, d := range map[string]time.Duration{"--snapshot-history": o.SnapshotHistory, "--idle-resource-ttl": o.IdleResourceTTL, "--not-older-than-wait": o.NotOlderThanWait} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", name, d))
		}
	}
	if o.ConsistentReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--consistent-read-timeout: must be positive, got %v", o.ConsistentReadTimeout))
	}
	if o.DiscoveryInterval <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-refresh-interval: must be positive, got %v", o.DiscoveryInterval))
	}
	if o.SnapshotHistoryMaxBytes < 0 || o.ListScanBudget < 0 {
		errs = append(errs, errors.New("--snapshot-history-max-bytes and --list-scan-budget: must not be negative"))
	}
	if (o.EtcdCertFile == "") != (o.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile: set both or neither"))
	}
	for res, prefix := range o.EtcdResourcePrefixes {
		if res == "" || !strings.HasPrefix(prefix, "/") {
			errs = append(errs, fmt.Errorf("--etcd-resource-prefix: want RESOURCE[.GROUP]=/PREFIX, got %q=%q", res, prefix))
		}
	}
	return errs
}

// etcdPrefix returns a resource's etcd key prefix with a trailing "/".
func (o *CacheOptions) etcdPrefix(gr schema.GroupResource, custom bool) string {
	if p, ok := o.EtcdResourcePrefixes[gr.String()]; ok {
		return strings.TrimSuffix(p, "/") + "/"
	}
	return freshness.DefaultPrefix(o.EtcdPrefix, gr.Group, gr.Resource, custom)
}

func (o *CacheOptions) etcdTLS() (*tls.Config, error) {
	if o.EtcdCAFile == "" && o.EtcdCertFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: o.EtcdCAFile, CertFile: o.EtcdCertFile, KeyFile: o.EtcdKeyFile}
	return info.ClientConfig()
}

// startCache builds the snapshot server and its helpers, starts their
// background loops under ctx, and returns the ListServer.
func startCache(ctx context.Context, cfg *Config, reg prometheus.Registerer) (proxy.ListServer, error) {
	o := cfg.Cache
	var keys proxy.ContinueKeys
	if o.ContinueTokenKeysFile != "" {
		reloader, err := paging.NewReloader(paging.ReloaderConfig{Path: o.ContinueTokenKeysFile})
		if err != nil {
			return nil, fmt.Errorf("--continue-token-keys-file: %w", err)
		}
		go reloader.Run(ctx)
		keys = reloader
	} else {
		keyring, err := paging.NewRandomKeyring()
		if err != nil {
			return nil, err
		}
		klog.InfoS("WARNING: no --continue-token-keys-file; continue tokens use a random per-process key and do not survive restarts or reach other replicas")
		keys = keyring
	}
	listMetrics, err := proxy.NewListMetrics(reg)
	if err != nil {
		return nil, err
	}
	storeMetrics, err := snapshot.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	freshMetrics, err := proxy.NewFreshnessMetrics(reg)
	if err != nil {
		return nil, err
	}
	lcfg := proxy.ListsConfig{
		Upstream:              cfg.Upstream,
		Resources:             proxy.ResourceFilter(o.Resources),
		Keys:                  keys,
		History:               o.SnapshotHistory,
		HistoryMaxBytes:       o.SnapshotHistoryMaxBytes,
		IdleTTL:               o.IdleResourceTTL,
		NotOlderThanWait:      o.NotOlderThanWait,
		LimitForRV0:           o.LimitForRV0,
		ScanBudget:            o.ListScanBudget,
		DiscoveryInterval:     o.DiscoveryInterval,
		Metrics:               listMetrics,
		StoreMetrics:          storeMetrics,
		ContinueMetrics:       paging.NewMetrics(reg),
		EtcdPrefix:            o.etcdPrefix,
		ConsistentReadTimeout: o.ConsistentReadTimeout,
		FallbackReject:        o.ConsistentReadFallback == "reject",
		FreshnessMetrics:      freshMetrics,
	}
	if len(o.EtcdServers) > 0 {
		tlsConfig, err := o.etcdTLS()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		client, err := clientv3.New(clientv3.Config{
			Endpoints: o.EtcdServers, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: etcdLogger(),
			// Reconnect within seconds after an etcd outage (gRPC's default
			// backoff grows to 2 minutes). Not measured beyond that.
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			})},
		})
		if err != nil {
			return nil, fmt.Errorf("--etcd-servers: %w", err)
		}
		context.AfterFunc(ctx, func() { _ = client.Close() })
		checker, err := freshness.New(freshness.Config{Client: client, Registerer: reg})
		if err != nil {
			return nil, err
		}
		go checker.Run(ctx)
		lcfg.Freshness = checker
		klog.InfoS("Consistent reads are served from snapshots, with freshness proven by etcd", "etcdServers", o.EtcdServers)
	} else {
		klog.InfoS("Consistent reads pass through to the apiserver (no --etcd-servers); other reads are served from snapshots")
	}
	lists, err := proxy.NewLists(lcfg)
	if err != nil {
		return nil, err
	}
	go lists.Run(ctx)
	return lists, nil
}

// etcdLogger logs the etcd client's errors only; listproxy reports what
// matters itself.
func etcdLogger() *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	logger, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return logger
}
