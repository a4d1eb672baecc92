package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
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
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/admission"
	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/consistency"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/lists"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/watch"
)

// CacheOptions are the flags of snapshot serving and consistent reads.
type CacheOptions struct {
	Resources               []string
	Preload                 []string
	ColdStoreWait           time.Duration
	WarmFrom                string
	WarmFromCAFile          string
	SnapshotHistory         time.Duration
	SnapshotHistoryMaxBytes int64
	SnapshotHistoryMaxRatio float64
	IdleResourceTTL         time.Duration
	MaxStoreBytes           int64
	ContinueTokenKeysFile   string
	LimitForRV0             bool
	ListScanBudget          int
	DiscoveryInterval       time.Duration
	NotOlderThanWait        time.Duration
	MaxInflightLists        int
	MaxInflightListBytes    int64
	ListQueueWait           time.Duration
	ListWriteTimeout        time.Duration

	ConsistencyCheckInterval time.Duration

	EtcdServers            []string
	EtcdCAFile             string
	EtcdCertFile           string
	EtcdKeyFile            string
	EtcdPrefix             string
	EtcdResourcePrefixes   map[string]string
	ConsistentReadTimeout  time.Duration
	ConsistentReadFallback string
	ConsistentProof        string
	// ConsistentPassThroughMaxObjects: lists.Config's.
	ConsistentPassThroughMaxObjects int
	// ConsistentStateProofMaxObjects: stores.Config's StateProofMaxObjects,
	// with 0 for off.
	ConsistentStateProofMaxObjects int

	WatchStallTimeout time.Duration
	WatchLagTimeout   time.Duration

	ServeWatches      bool
	WatchWriteTimeout time.Duration
	// ServeShardSelectors: lists.Config's and watch.Config's.
	ServeShardSelectors bool
}

// newCacheOptions returns the defaults: the store registry's
// (stores.DefaultConfig), the LIST server's (lists.DefaultConfig), the
// admission of responses' (admission.DefaultConfig), and the command's own
// for its flags that are none of theirs.
func newCacheOptions() CacheOptions {
	s, l, a := stores.DefaultConfig(), lists.DefaultConfig(), admission.DefaultConfig()
	return CacheOptions{
		Resources:                       []string{"*"},
		ColdStoreWait:                   s.ColdStoreWait,
		SnapshotHistory:                 s.History,
		SnapshotHistoryMaxBytes:         s.HistoryMaxBytes,
		SnapshotHistoryMaxRatio:         s.HistoryMaxRatio,
		IdleResourceTTL:                 s.IdleTTL,
		LimitForRV0:                     l.LimitForRV0,
		ListScanBudget:                  l.ScanBudget,
		DiscoveryInterval:               s.DiscoveryInterval,
		NotOlderThanWait:                l.NotOlderThanWait,
		MaxInflightLists:                a.MaxLists,
		MaxInflightListBytes:            a.MaxBytes,
		ListQueueWait:                   a.QueueWait,
		ListWriteTimeout:                a.WriteTimeout,
		ConsistencyCheckInterval:        s.ConsistencyCheck.Interval,
		EtcdPrefix:                      freshness.DefaultRoot,
		EtcdResourcePrefixes:            map[string]string{},
		ConsistentReadTimeout:           s.ConsistentReadTimeout,
		ConsistentReadFallback:          "apiserver",
		ConsistentProof:                 proofAuto,
		ConsistentPassThroughMaxObjects: l.ConsistentPassThroughMaxObjects,
		ConsistentStateProofMaxObjects:  freshness.DefaultStateProofMaxObjects,
		WatchStallTimeout:               s.WatchStallTimeout,
		WatchLagTimeout:                 s.WatchLagTimeout,

		// Watch serving passes the watch-list differential and informer
		// e2e tests (TestWatchDifferential, TestWatchListInformers).
		ServeWatches:        true,
		WatchWriteTimeout:   watch.DefaultConfig().WriteTimeout,
		ServeShardSelectors: l.ServeShardSelectors,
	}
}

func (o *CacheOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Resources, "resources", o.Resources,
		"Resources served from snapshots, as RESOURCE[.GROUP] (pods, deployments.apps, widgets.example.com), or * for every resource discovery reports with list and watch. Empty: pass everything through.")
	fs.StringSliceVar(&o.Preload, "preload", o.Preload,
		"Stores started when listproxy starts, as RESOURCE[.GROUP][/FORMAT] in the resource's preferred version, FORMAT json, protobuf, meta-json, meta-protobuf or table (what plain kubectl get asks for); without FORMAT, protobuf for built-in resources and json for custom ones, what client-go's typed clients and informers ask for (e.g. pods,pods/json,endpointslices.discovery.k8s.io). /readyz fails until each has completed its first list, so a Service sends nothing to a replica with cold stores; they are never dropped as idle. Empty: every store starts on its first request.")
	fs.StringVar(&o.WarmFrom, "warm-from", o.WarmFrom,
		"URL of other replicas of this listproxy in front of the same cluster, typically their Service (https://listproxy.NAMESPACE.svc:8443). Each store's first list is read from there, answered only from a snapshot a replica holds synced, and only its watch from the apiserver, so that a restarted or added replica costs the apiserver a watch rather than a full list. A peer that cannot answer costs one declined request; the store then lists from the apiserver, as it does when the peer's list cannot be shown to be this apiserver's (one object of it is looked up by name). https needs --warm-from-ca-file; the peer gets listproxy's upstream bearer token and client certificate only, and redirects are not followed. http is only for a loopback IP address (sidecar mode) and carries no credentials. Empty: stores list from the apiserver.")
	fs.StringVar(&o.WarmFromCAFile, "warm-from-ca-file", o.WarmFromCAFile,
		"CA bundle that verifies the --warm-from peers' serving certificate; required with an https --warm-from (the system roots are never used). A bundle that cannot be read leaves stores to list from the apiserver (logged).")
	fs.DurationVar(&o.ColdStoreWait, "cold-store-wait", o.ColdStoreWait,
		"How long a LIST or watch of a store that has not synced yet waits for its first list (started by the first request) instead of passing through beside it. Past it: a LIST with a limit and no selectors passes through, any other LIST or watch gets 429 with Retry-After, as the apiserver answers while its watch cache initializes. 0 does not wait.")
	fs.DurationVar(&o.SnapshotHistory, "snapshot-history", o.SnapshotHistory,
		"How long superseded snapshots are kept for exact-resourceVersion reads and continue tokens.")
	fs.Int64Var(&o.SnapshotHistoryMaxBytes, "snapshot-history-max-bytes", o.SnapshotHistoryMaxBytes,
		"Bound on object bytes held only by snapshot history, per resource and representation, and likewise on those held only by its feed of recent changes for watchers; 0 for no bound.")
	fs.Float64Var(&o.SnapshotHistoryMaxRatio, "snapshot-history-max-ratio", o.SnapshotHistoryMaxRatio,
		"Bound on the bytes held only by snapshot history relative to the live snapshot's bytes, per resource and representation (0.1: history adds at most 10%, but at least 4 MiB is allowed); pinned continue-token snapshots older than the kept history are released (their tokens are handed to the apiserver). 0 for no relative bound.")
	fs.DurationVar(&o.IdleResourceTTL, "idle-resource-ttl", o.IdleResourceTTL,
		"Drop a resource's snapshots after this long without a LIST; 0 keeps them forever.")
	o.addStoreFlags(fs)
	fs.StringVar(&o.ContinueTokenKeysFile, "continue-token-keys-file", o.ContinueTokenKeysFile,
		"File of continue-token keys, one per line, base64 of 32 random bytes; the first seals, all open; re-read when it changes. Share it between replicas. Empty: a random key per process (tokens do not survive restarts).")
	fs.BoolVar(&o.LimitForRV0, "limit-for-resource-version-0", o.LimitForRV0,
		"Honour limit (paginate) for resourceVersion=0 lists. Off by default, as the apiserver: client-go's reflector that gets a paginated answer to its resourceVersion=0 list relists from then on with resourceVersion=N&limit=500, exact reads that a restarted or new listproxy may not hold, so they reach the apiserver at once. On, large RV=0 lists cost less memory per response; KEP-365 allows either.")
	fs.IntVar(&o.ListScanBudget, "list-scan-budget", o.ListScanBudget,
		"Most objects one page of a limited list (limit set) examines under a selector before returning a shorter page with a continue token, as KEP-365 allows; a list without a limit is never cut short. 0 for no bound.")
	fs.DurationVar(&o.DiscoveryInterval, "discovery-refresh-interval", o.DiscoveryInterval,
		"How often API discovery and CustomResourceDefinitions are re-read.")
	fs.DurationVar(&o.NotOlderThanWait, "not-older-than-wait", o.NotOlderThanWait,
		"How long a resourceVersion=N (NotOlderThan) list waits for snapshots to reach N before passing through.")
	fs.DurationVar(&o.ConsistencyCheckInterval, "consistency-check-interval", o.ConsistencyCheckInterval,
		"How often (jittered by up to 20%) every snapshot is compared with the apiserver at its resourceVersion, by a metadata-only LIST of each resource; a resource whose snapshot differs is dropped and resynced. 0 disables periodic checks (POST /debug/listproxy/consistency still runs one).")
	fs.IntVar(&o.MaxInflightLists, "max-inflight-lists", o.MaxInflightLists,
		"Most LIST responses written from snapshots at once; others wait up to --list-queue-wait, then get 429 with Retry-After. 0 for no bound.")
	fs.Int64Var(&o.MaxInflightListBytes, "max-inflight-list-bytes", o.MaxInflightListBytes,
		"Most bytes of LIST responses (their items' encoded size) written from snapshots at once; a larger response is written alone. Others wait up to --list-queue-wait, then get 429 with Retry-After. 0 for no bound.")
	fs.DurationVar(&o.ListQueueWait, "list-queue-wait", o.ListQueueWait,
		"How long a LIST waits for room under --max-inflight-lists and --max-inflight-list-bytes before it gets 429; 0 rejects at once.")
	fs.DurationVar(&o.ListWriteTimeout, "list-write-timeout", o.ListWriteTimeout,
		"Deadline for writing a LIST response from a snapshot, from when it starts; past it the response is cut short (HTTP/1.1 connection closed, HTTP/2 stream reset) and its resources freed. 0 for none.")
	fs.StringVar(&o.ConsistentProof, "consistent-proof", o.ConsistentProof,
		"How the freshness of consistent reads (resourceVersion unset: kubectl get, informers' watch-lists) is proven: etcd (needs --etcd-servers: an etcd revision probe and progress requests), apiserver (no etcd access, as on managed clusters: a name-scoped consistent LIST per round, then the store's own feed or a 3-second auxiliary watch), off (consistent reads pass through), or auto (etcd with --etcd-servers, else apiserver).")
	fs.StringSliceVar(&o.EtcdServers, "etcd-servers", o.EtcdServers,
		"etcd client URLs of the cluster's etcd, to prove freshness of consistent reads (resourceVersion unset) and follow its compaction.")
	fs.StringVar(&o.EtcdCAFile, "etcd-cafile", o.EtcdCAFile, "CA file to verify etcd's serving certificate.")
	fs.StringVar(&o.EtcdCertFile, "etcd-certfile", o.EtcdCertFile, "Client certificate for etcd.")
	fs.StringVar(&o.EtcdKeyFile, "etcd-keyfile", o.EtcdKeyFile, "Client key for etcd.")
	fs.StringVar(&o.EtcdPrefix, "etcd-prefix", o.EtcdPrefix, "The apiserver's --etcd-prefix.")
	fs.StringToStringVar(&o.EtcdResourcePrefixes, "etcd-resource-prefix", o.EtcdResourcePrefixes,
		"Override a resource's etcd key prefix, RESOURCE[.GROUP]=PREFIX (repeatable), e.g. pods=/registry/pods.")
	fs.DurationVar(&o.ConsistentReadTimeout, "consistent-read-timeout", o.ConsistentReadTimeout,
		"How long a consistent read may wait for its freshness proof before falling back.")
	fs.DurationVar(&o.WatchStallTimeout, "watch-stall-timeout", o.WatchStallTimeout,
		"Abandon a snapshot store's watch request unanswered for this long; check a watch that delivered no event and no bookmark for this long, and re-establish it only if etcd shows changes the store lacks (needs --etcd-servers). A quiet watch is kept: resources without a watch cache get no bookmarks, and dead connections are detected by HTTP/2 health checks and TCP keepalives.")
	fs.DurationVar(&o.WatchLagTimeout, "watch-lag-timeout", o.WatchLagTimeout,
		"Re-establish a snapshot store's watch when a consistent read proved with etcd that the store must reach a revision and it has not for this long (needs --etcd-servers).")
	fs.BoolVar(&o.ServeWatches, "serve-watches", o.ServeWatches,
		"Serve cacheable WATCH requests (watch-lists included) from snapshots and their stores' change feeds; false passes every watch through.")
	fs.BoolVar(&o.ServeShardSelectors, "serve-shard-selectors", o.ServeShardSelectors,
		"Serve LISTs and watches with a shardSelector (KEP-5866) from snapshots, answering as the 1.37 apiserver with its ShardedListAndWatch feature gate on, whatever the apiserver's gate or release (one without the gate ignores the parameter and answers the whole collection); false passes every request with a shardSelector through.")
	fs.DurationVar(&o.WatchWriteTimeout, "watch-write-timeout", o.WatchWriteTimeout,
		"End a served watch whose client does not accept a burst of events for this long (a stalled client); it re-watches from its last resourceVersion. A client that reads again sooner gets every change it missed, as long as the store still keeps them (at least the last 75s).")
	fs.StringVar(&o.ConsistentReadFallback, "consistent-read-fallback", o.ConsistentReadFallback,
		"What a consistent read does when freshness cannot be proven in time: apiserver (pass through) or reject (429 with Retry-After).")
	fs.IntVar(&o.ConsistentStateProofMaxObjects, "consistent-state-proof-max-objects", o.ConsistentStateProofMaxObjects,
		"Proving through the apiserver (no etcd, or an empty resource with etcd): a store of at most this many objects proves a consistent read with one LIST of the resource's metadata (shared by the round's readers), which must show the store's objects at the same resourceVersions, instead of waiting up to 2.25 s for an auxiliary watch's bookmark when the resource is quiet. 0 turns this off.")
	fs.IntVar(&o.ConsistentPassThroughMaxObjects, "consistent-pass-through-max-objects", o.ConsistentPassThroughMaxObjects,
		"Proving through the apiserver (no etcd): a consistent read whose scope (its namespace, or the whole resource) holds at most this many objects passes through when the store's own feed does not prove it within 50 ms, instead of waiting up to 2.25 s for an auxiliary watch; the apiserver answers it in milliseconds. Never a 429 of --consistent-read-fallback=reject. 0 turns this off.")
}

// maxStateProofObjects bounds --consistent-state-proof-max-objects: a state
// probe lists that many objects' metadata each round of readers, which
// past a few thousand costs the apiserver more than the auxiliary watch's
// bookmark it spares the readers. Not measured.
const maxStateProofObjects = 5000

func (o *CacheOptions) validate() []error {
	var errs []error
	errs = append(errs, o.validateStores()...)
	if o.ConsistentReadFallback != "apiserver" && o.ConsistentReadFallback != "reject" {
		errs = append(errs, fmt.Errorf("--consistent-read-fallback: must be apiserver or reject, got %q", o.ConsistentReadFallback))
	}
	if preload, err := stores.ParsePreload(o.Preload); err != nil {
		errs = append(errs, fmt.Errorf("--preload: %w", err))
	} else {
		for _, p := range preload {
			if !catalog.ResourceFilter(o.Resources).Allows(p.Resource) {
				errs = append(errs, fmt.Errorf("--preload: %s is not served (--resources)", p))
			}
		}
	}
	if o.WarmFrom != "" {
		errs = append(errs, o.validateWarmFrom()...)
	} else if o.WarmFromCAFile != "" {
		errs = append(errs, errors.New("--warm-from-ca-file: set without --warm-from"))
	}
	for name, d := range map[string]time.Duration{"--cold-store-wait": o.ColdStoreWait, "--snapshot-history": o.SnapshotHistory, "--idle-resource-ttl": o.IdleResourceTTL, "--not-older-than-wait": o.NotOlderThanWait, "--list-queue-wait": o.ListQueueWait, "--list-write-timeout": o.ListWriteTimeout, "--watch-write-timeout": o.WatchWriteTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", name, d))
		}
	}
	switch o.ConsistentProof {
	case proofAuto, proofAPIServer, proofOff:
		if o.ConsistentProof != proofAuto && len(o.EtcdServers) > 0 {
			errs = append(errs, fmt.Errorf("--consistent-proof=%s: --etcd-servers is set; etcd proves consistent reads (--consistent-proof=etcd or auto)", o.ConsistentProof))
		}
	case proofEtcd:
		if len(o.EtcdServers) == 0 {
			errs = append(errs, errors.New("--consistent-proof=etcd: needs --etcd-servers"))
		}
	default:
		errs = append(errs, fmt.Errorf("--consistent-proof: must be auto, etcd, apiserver or off, got %q", o.ConsistentProof))
	}
	if o.ConsistentReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--consistent-read-timeout: must be positive, got %v", o.ConsistentReadTimeout))
	}
	if o.ConsistencyCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("--consistency-check-interval: must not be negative, got %v", o.ConsistencyCheckInterval))
	}
	if o.WatchStallTimeout <= 0 || o.WatchLagTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--watch-stall-timeout and --watch-lag-timeout: must be positive, got %v and %v", o.WatchStallTimeout, o.WatchLagTimeout))
	}
	if o.DiscoveryInterval <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-refresh-interval: must be positive, got %v", o.DiscoveryInterval))
	}
	if o.SnapshotHistoryMaxRatio < 0 || math.IsNaN(o.SnapshotHistoryMaxRatio) || math.IsInf(o.SnapshotHistoryMaxRatio, 0) {
		errs = append(errs, fmt.Errorf("--snapshot-history-max-ratio: must be a non-negative number, got %v", o.SnapshotHistoryMaxRatio))
	}
	if o.ConsistentStateProofMaxObjects < 0 || o.ConsistentStateProofMaxObjects > maxStateProofObjects {
		errs = append(errs, fmt.Errorf("--consistent-state-proof-max-objects: must be within 0-%d, got %d", maxStateProofObjects, o.ConsistentStateProofMaxObjects))
	}
	if o.ConsistentPassThroughMaxObjects < 0 {
		errs = append(errs, fmt.Errorf("--consistent-pass-through-max-objects: must not be negative, got %d", o.ConsistentPassThroughMaxObjects))
	}
	if o.SnapshotHistoryMaxBytes < 0 || o.ListScanBudget < 0 {
		errs = append(errs, errors.New("--snapshot-history-max-bytes and --list-scan-budget: must not be negative"))
	}
	if o.MaxInflightLists < 0 {
		errs = append(errs, fmt.Errorf("--max-inflight-lists: must not be negative, got %d", o.MaxInflightLists))
	}
	if o.MaxInflightListBytes < 0 {
		errs = append(errs, fmt.Errorf("--max-inflight-list-bytes: must not be negative, got %d", o.MaxInflightListBytes))
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

// validateWarmFrom checks a set --warm-from: an https peer must be verified
// with --warm-from-ca-file (never the system roots, which would trust any
// public certificate for the name), and plain http, which carries no
// credentials and is not verified, is only for a loopback IP address (a
// sidecar's peer on the same host).
func (o *CacheOptions) validateWarmFrom() []error {
	u, err := url.Parse(o.WarmFrom)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return []error{fmt.Errorf("--warm-from: want an http or https URL, got %q", o.WarmFrom)}
	}
	if u.Scheme == "https" {
		if o.WarmFromCAFile == "" {
			return []error{errors.New("--warm-from-ca-file: required for an https --warm-from (the CA that signed the peers' serving certificate)")}
		}
		return nil
	}
	var errs []error
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		errs = append(errs, fmt.Errorf("--warm-from: plain http only to a loopback IP address (127.0.0.1, [::1]), got host %q; use https with --warm-from-ca-file", u.Hostname()))
	}
	if o.WarmFromCAFile != "" {
		errs = append(errs, errors.New("--warm-from-ca-file: set, but --warm-from is not https"))
	}
	return errs
}

// peerConfig returns how to reach --warm-from (validated), nil without it.
// A peer gets only what its service mode authenticates, and only over
// https verified with --warm-from-ca-file: the upstream bearer token (or
// its file) and client certificate. Never the upstream's exec or
// auth-provider plugins (their tokens may reach beyond the cluster), basic
// auth, impersonation, CA or TLS server name. Over http (a sidecar's
// loopback peer, which trusts its callers) it gets no credentials.
func (o *CacheOptions) peerConfig(upstream *rest.Config) *rest.Config {
	if o.WarmFrom == "" {
		return nil
	}
	cfg := &rest.Config{Host: o.WarmFrom, UserAgent: upstream.UserAgent, QPS: upstream.QPS, Burst: upstream.Burst}
	if u, err := url.Parse(o.WarmFrom); err == nil && u.Scheme == "https" {
		cfg.BearerToken, cfg.BearerTokenFile = upstream.BearerToken, upstream.BearerTokenFile
		cfg.TLSClientConfig = rest.TLSClientConfig{
			CAFile:   o.WarmFromCAFile,
			CertFile: upstream.CertFile, KeyFile: upstream.KeyFile,
			CertData: upstream.CertData, KeyData: upstream.KeyData,
		}
	}
	return cfg
}

func (o *CacheOptions) etcdTLS() (*tls.Config, error) {
	if o.EtcdCAFile == "" && o.EtcdCertFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: o.EtcdCAFile, CertFile: o.EtcdCertFile, KeyFile: o.EtcdKeyFile}
	return info.ClientConfig()
}

// cache is what startCache starts: the store registry, the LIST server
// over it and, with --serve-watches, the watch server (nil otherwise).
type cache struct {
	stores  *stores.Registry
	lists   *lists.Lists
	watches *watch.Handler
}

// startCache builds the store registry and the servers over it, and starts
// their background loops under ctx.
func startCache(ctx context.Context, cfg *Config, reg prometheus.Registerer) (*cache, error) {
	o := cfg.Cache
	var keys lists.ContinueKeys
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
	scfg, err := o.storesConfig(ctx, cfg, reg)
	if err != nil {
		return nil, err
	}
	registry, err := stores.New(scfg)
	if err != nil {
		return nil, err
	}
	if cfg.OnStores != nil {
		cfg.OnStores(registry)
	}
	listMetrics, err := lists.NewListMetrics(reg)
	if err != nil {
		return nil, err
	}
	continueMetrics, err := paging.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	admissionMetrics, err := admission.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	// One queue admits LIST responses and watch-lists' initial events
	// alike: a storm of either is a LIST storm.
	queue := admission.NewQueue(admission.Config{
		MaxLists:     o.MaxInflightLists,
		MaxBytes:     o.MaxInflightListBytes,
		QueueWait:    o.ListQueueWait,
		WriteTimeout: o.ListWriteTimeout,
		Metrics:      admissionMetrics,
	})
	l, err := lists.New(lists.Config{
		Stores:                          registry,
		Keys:                            keys,
		NotOlderThanWait:                o.NotOlderThanWait,
		LimitForRV0:                     o.LimitForRV0,
		ScanBudget:                      o.ListScanBudget,
		Metrics:                         listMetrics,
		ContinueMetrics:                 continueMetrics,
		FallbackReject:                  o.ConsistentReadFallback == "reject",
		ConsistentPassThroughMaxObjects: o.ConsistentPassThroughMaxObjects,
		ServeShardSelectors:             o.ServeShardSelectors,
		Admission:                       queue,
	})
	if err != nil {
		return nil, err
	}
	go registry.Run(ctx)
	c := &cache{stores: registry, lists: l}
	if !o.ServeWatches {
		return c, nil
	}
	watchMetrics, err := watch.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	wcfg := watch.DefaultConfig()
	wcfg.Metrics, wcfg.WriteTimeout, wcfg.ServeShardSelectors = watchMetrics, o.WatchWriteTimeout, o.ServeShardSelectors
	srv := watch.NewServer(wcfg)
	c.watches = watch.NewHandler(srv, registry, queue)
	return c, nil
}

// Values of --consistent-proof.
const (
	proofAuto      = "auto"
	proofEtcd      = "etcd"
	proofAPIServer = "apiserver"
	proofOff       = "off"
)

// storesConfig is the store registry's config from the options, with its
// metrics registered with reg and, with --etcd-servers, the freshness
// checker started under ctx.
func (o *CacheOptions) storesConfig(ctx context.Context, cfg *Config, reg prometheus.Registerer) (stores.Config, error) {
	preload, err := stores.ParsePreload(o.Preload)
	if err != nil {
		return stores.Config{}, fmt.Errorf("--preload: %w", err)
	}
	metrics, err := stores.NewMetrics(reg)
	if err != nil {
		return stores.Config{}, err
	}
	storeMetrics, err := snapshot.NewMetrics(reg)
	if err != nil {
		return stores.Config{}, err
	}
	freshMetrics, err := freshness.NewReadMetrics(reg)
	if err != nil {
		return stores.Config{}, err
	}
	consistencyMetrics, err := consistency.NewMetrics(reg)
	if err != nil {
		return stores.Config{}, err
	}
	scfg := stores.Config{
		Upstream:              cfg.Upstream,
		Peer:                  o.peerConfig(cfg.Upstream),
		Resources:             catalog.ResourceFilter(o.Resources),
		History:               o.SnapshotHistory,
		HistoryMaxBytes:       o.SnapshotHistoryMaxBytes,
		HistoryMaxRatio:       o.SnapshotHistoryMaxRatio,
		IdleTTL:               o.IdleResourceTTL,
		Preload:               preload,
		AuthorizeStart:        authorizeStart(cfg.Auth),
		MaxStoreBytes:         o.MaxStoreBytes,
		ColdStoreWait:         o.ColdStoreWait,
		DiscoveryInterval:     o.DiscoveryInterval,
		TableRules:            cfg.TableRules,
		Metrics:               metrics,
		StoreMetrics:          storeMetrics,
		EtcdPrefix:            o.etcdPrefix,
		ConsistentReadTimeout: o.ConsistentReadTimeout,
		FreshnessMetrics:      freshMetrics,
		WatchStallTimeout:     o.WatchStallTimeout,
		WatchLagTimeout:       o.WatchLagTimeout,
		ConsistencyCheck:      consistency.DefaultConfig(),
		StateProofMaxObjects:  o.ConsistentStateProofMaxObjects,
	}
	if o.ConsistentStateProofMaxObjects == 0 {
		scfg.StateProofMaxObjects = -1
	}
	scfg.ConsistencyCheck.Interval = o.ConsistencyCheckInterval
	scfg.ConsistencyCheck.Metrics = consistencyMetrics
	if len(o.EtcdServers) == 0 {
		if o.ConsistentProof == proofOff {
			klog.InfoS("Consistent reads pass through to the apiserver (--consistent-proof=off); other reads are served from snapshots")
			return scfg, nil
		}
		scfg.ProveThroughAPIServer = true
		scfg.ProofRegisterer = reg
		klog.InfoS("Consistent reads are served from snapshots, with freshness proven through the apiserver (no --etcd-servers)")
		return scfg, nil
	}
	tlsConfig, err := o.etcdTLS()
	if err != nil {
		return stores.Config{}, fmt.Errorf("etcd TLS: %w", err)
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
		return stores.Config{}, fmt.Errorf("--etcd-servers: %w", err)
	}
	context.AfterFunc(ctx, func() { _ = client.Close() })
	checker, err := freshness.New(freshness.Config{Client: client, Registerer: reg})
	if err != nil {
		return stores.Config{}, err
	}
	go checker.Run(ctx)
	scfg.Freshness = checker
	// A resource whose etcd prefix is not verified (an empty one's cannot
	// be) has its consistent reads proven through the apiserver instead.
	scfg.ProveThroughAPIServer = true
	scfg.ProofRegisterer = reg
	klog.InfoS("Consistent reads are served from snapshots, with freshness proven by etcd", "etcdServers", o.EtcdServers)
	return scfg, nil
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
