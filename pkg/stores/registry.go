package stores

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/consistency"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Config configures the registry of snapshot stores. Start from
// DefaultConfig: New takes every field as given.
type Config struct {
	// Upstream is how listproxy reaches the apiserver with its own identity.
	Upstream *rest.Config
	// Peer, when set, is how listproxy reaches other replicas of itself in
	// front of the same apiserver (typically their Service): each store's
	// first list is read from there, and only its watch from the apiserver
	// (snapshot.FeederConfig.Warm). A peer that cannot be reached or
	// cannot answer costs one failed request, and a list the apiserver
	// does not show to be its own at the list's resourceVersion
	// (peerSource: a count and up to peerSampleSize name-scoped LISTs)
	// those requests; the store then lists from the apiserver. It carries
	// only what the peer is to be sent, and redirects are never followed.
	Peer *rest.Config
	// Resources selects the cached resources.
	Resources catalog.ResourceFilter
	// History, HistoryMaxBytes and HistoryMaxRatio bound each store's
	// snapshot history (see snapshot.StoreConfig).
	History         time.Duration
	HistoryMaxBytes int64
	HistoryMaxRatio float64
	// IdleTTL drops a store that no request held for this long; preloaded
	// stores are never dropped as idle.
	IdleTTL time.Duration
	// Preload names the stores started when Run has read discovery and
	// kept running (Ready).
	Preload []Preload
	// AuthorizeStart, when set, is asked before a request starts a store
	// that is not preloaded: whether the request's caller (in ctx) may
	// list gvr in every namespace, as the store's source does. A store is
	// not started for a caller it refuses; the request passes through
	// (admission.go). Nil trusts every caller (sidecar mode).
	AuthorizeStart func(ctx context.Context, gvr schema.GroupVersionResource) bool
	// MaxStoreBytes: a store that is not preloaded is started only while
	// the running stores hold fewer bytes (live and history) than this,
	// a store whose first list is in flight counting a reservation
	// (admission.go); otherwise the request passes through. Running
	// stores are never dropped for it. 0 is no bound.
	MaxStoreBytes int64
	// ColdStoreWait bounds how long a LIST or watch waits for its store's
	// first list (the one sync in flight, started by the first request)
	// instead of passing through beside it (Handle.AwaitSynced; cold.go).
	// 0 does not wait.
	ColdStoreWait time.Duration
	// DiscoveryInterval is how often discovery and CRDs are re-read; it
	// must be positive.
	DiscoveryInterval time.Duration
	// Metrics counts stores refused; nil records nothing.
	Metrics *Metrics
	// StoreMetrics observes the snapshot stores; nil records nothing.
	StoreMetrics *snapshot.Metrics

	// Freshness proves consistent reads with etcd; nil without etcd
	// access (managed clusters).
	Freshness *freshness.Checker
	// ProveThroughAPIServer proves consistent reads through the apiserver
	// (freshness.APIServer), with the proof metrics registered with
	// ProofRegisterer: without Freshness every one, with it those of
	// resources whose etcd prefix is not verified (empty ones). With
	// neither, consistent reads pass through.
	ProveThroughAPIServer bool
	ProofRegisterer       prometheus.Registerer
	// StateProofMaxObjects is freshness.APIServerConfig's: the most
	// objects a store may hold for its consistent reads to be proven by a
	// state probe; 0 selects its default, a negative value turns it off.
	StateProofMaxObjects int
	// EtcdPrefix returns a resource's etcd key prefix (with a trailing "/").
	EtcdPrefix func(gr schema.GroupResource, custom bool) string
	// ConsistentReadTimeout bounds proving freshness (freshness.Prover).
	ConsistentReadTimeout time.Duration
	// FreshnessMetrics counts consistent-read outcomes; nil records nothing.
	FreshnessMetrics *freshness.ReadMetrics
	// WatchStallTimeout is how long a store's watch request may go
	// unanswered, and how often a watch that delivered no event or
	// bookmark is checked with etcd (watchStalled;
	// snapshot.FeederConfig.StallTimeout).
	WatchStallTimeout time.Duration
	// WatchLagTimeout restarts a store's watch when the store stays behind
	// a revision etcd proved it must reach for this long, and a silent
	// watch whose store does not reach a change etcd holds within it
	// (lag.go); 0 or negative never restarts a watch for either.
	WatchLagTimeout time.Duration
	// ConsistencyCheck configures comparing snapshots with the apiserver
	// (pkg/consistency).
	ConsistencyCheck consistency.Config
	// Clock drives the registry's loops (idle drop, compaction, preload)
	// and its cold waits; nil selects the real clock.
	Clock clock.WithTicker
	// TableRules returns the Table rules of a built-in resource on
	// apiserver release 1.minor; nil selects table.For. Tests substitute
	// wrong rules to see rows refused as they arrive.
	TableRules func(minor int, gr schema.GroupResource) (table.Rules, bool)
}

// DefaultConfig returns listproxy's defaults; the command's flags start from
// them. The history window follows the apiserver's watch cache (75s history
// doubled for pagination); none are measured for listproxy yet.
func DefaultConfig() Config {
	return Config{
		History:         150 * time.Second,
		HistoryMaxBytes: 1 << 30,
		HistoryMaxRatio: 0.1,
		IdleTTL:         15 * time.Minute,
		// Not measured: room for a first list of tens of thousands of
		// objects on a busy machine, under the apiserver's 60s request
		// timeout. A client that gets the 429 after it retries (client-go
		// does, after Retry-After).
		ColdStoreWait:         30 * time.Second,
		DiscoveryInterval:     10 * time.Second,
		ConsistentReadTimeout: freshness.DefaultProofTimeout,
		// Watch health (not measured): a watch request unanswered for 3
		// minutes is abandoned, and a watch silent for that long is
		// checked with etcd; a store that etcd proves behind for 10s has
		// its watch restarted (lag.go).
		WatchStallTimeout: snapshot.DefaultStallTimeout,
		WatchLagTimeout:   defaultWatchLagTimeout,
		ConsistencyCheck:  consistency.DefaultConfig(),
	}
}

// Registry keeps one snapshot store per cacheable resource and
// representation: it reads discovery, starts a store on first demand of a
// caller admitted to start it (admission.go) or on preload, feeds it from
// the apiserver (or a peer's first list), proves its freshness with etcd,
// restarts its watch when it lags or stalls, applies etcd's compaction,
// and drops it when idle or when discovery changes. Requests reach a store
// through Acquire only.
type Registry struct {
	cfg    Config
	clock  clock.WithTicker
	client *http.Client
	// apiserverProof proves consistent reads through the apiserver (see
	// Config.ProveThroughAPIServer); nil without it.
	apiserverProof *freshness.APIServer
	catalog        *catalog.Catalog
	// peerClient and peerHost reach Config.Peer; nil without one.
	peerClient *http.Client
	peerHost   string

	// ctx bounds every feeder; set by Run.
	ctx context.Context

	mu     sync.RWMutex
	stores map[storeKey]*storeEntry // guarded by mu

	preload preloadState
	// tableRefused holds until when a resource's Tables are refused
	// (table.go); guarded by mu.
	tableRefused map[schema.GroupVersionResource]time.Time

	consistency *consistency.Checker // compares the stores with the apiserver

	// acquireHook, when set (tests only), runs in Acquire once it has
	// found its store, before it returns; reg.mu is not held.
	acquireHook func()
}

type storeKey struct {
	gvr    schema.GroupVersionResource
	format wire.Format
}

type storeEntry struct {
	store    *snapshot.Store
	source   *apiSource
	info     *catalog.Resource
	ctx      context.Context
	cancel   context.CancelFunc
	lastUsed atomic.Int64 // unix nanoseconds of the last release or acquire
	// holders counts the Handles not yet released; a store held is never
	// idle (a watch holds it until it ends).
	holders atomic.Int64
	feeder  *snapshot.Feeder
	// lagCheck is true while a check that the store catches up runs (lag.go).
	lagCheck atomic.Bool
	// preloaded stores (Config.Preload) are never dropped as idle.
	preloaded atomic.Bool
	// started is when the store started: how long a store that has not
	// synced has been unready (cold.go).
	started time.Time

	// prover proves what the store must hold for consistent, exact and
	// not-older-than reads: with etcd, through the apiserver, or not at all
	// (freshness.NewProver chooses).
	prover freshness.Prover
	// bytes is what the store holds, live and history, as last published;
	// listed is set once it has published (its first list), and bytes is
	// then its share of Config.MaxStoreBytes (budgetBytes).
	bytes  atomic.Int64
	listed atomic.Bool
	// reserved is what the store counts against Config.MaxStoreBytes
	// until listed (reservationLocked); set when it is built.
	reserved int64
}

// New builds the registry; Run must be called before it starts stores.
func New(cfg Config) (*Registry, error) {
	if cfg.DiscoveryInterval <= 0 {
		return nil, fmt.Errorf("discovery interval must be positive, got %v", cfg.DiscoveryInterval)
	}
	client, err := rest.HTTPClientFor(withHealthCheckedTransport(cfg.Upstream))
	if err != nil {
		return nil, fmt.Errorf("upstream client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	reg := &Registry{
		cfg:          cfg,
		clock:        clockOrReal(cfg.Clock),
		client:       client,
		catalog:      catalog.New(catalog.Config{Discovery: disc, Dynamic: dyn, Filter: cfg.Resources, TableRules: cfg.TableRules}),
		stores:       map[storeKey]*storeEntry{},
		tableRefused: map[schema.GroupVersionResource]time.Time{},
	}
	if cfg.Peer != nil {
		// A peer's client that cannot be built (its CA file is missing)
		// leaves stores to list from the apiserver, as without a peer.
		if reg.peerClient, err = newPeerClient(cfg.Peer); err != nil {
			klog.ErrorS(err, "Peer client; stores list from the apiserver", "peer", cfg.Peer.Host)
			reg.peerClient = nil
		}
		reg.peerHost = strings.TrimSuffix(cfg.Peer.Host, "/")
	}
	if cfg.ProveThroughAPIServer {
		reg.apiserverProof, err = freshness.NewAPIServer(freshness.APIServerConfig{
			Client: client, Host: strings.TrimSuffix(cfg.Upstream.Host, "/"), Registerer: cfg.ProofRegisterer,
			StateProofMaxObjects: cfg.StateProofMaxObjects,
		})
		if err != nil {
			return nil, err
		}
	}
	reg.consistency = consistency.New(cfg.ConsistencyCheck, consistencyView{reg}, consistencyView{reg})
	return reg, nil
}

// Run reads discovery (retrying until it succeeds; until then no store
// starts and every request passes through), then keeps discovery fresh,
// the preloaded stores running and etcd's compaction applied, and drops
// idle stores, until ctx is done; then it stops every store.
func (reg *Registry) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		_, err := reg.catalog.Refresh(ctx)
		if err == nil {
			break
		}
		klog.ErrorS(err, "Reading discovery failed; passing everything through until it succeeds")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
	reg.mu.Lock()
	reg.ctx = ctx
	reg.mu.Unlock()
	go every(ctx, reg.clock, reg.cfg.DiscoveryInterval, func() { reg.refreshDiscovery(ctx) })
	if reg.cfg.Freshness != nil {
		go every(ctx, reg.clock, compactionInterval, reg.applyCompactionAll)
	}
	if len(reg.cfg.Preload) > 0 {
		reg.ensurePreloaded()
		go every(ctx, reg.clock, reg.cfg.DiscoveryInterval, reg.ensurePreloaded)
	}
	if reg.cfg.IdleTTL > 0 {
		go every(ctx, reg.clock, reg.cfg.IdleTTL/2, reg.dropIdle)
	}
	if reg.cfg.ConsistencyCheck.Interval > 0 {
		go reg.consistency.Run(ctx)
	}
	<-ctx.Done()
	reg.drop(nil)
}

// refreshDiscovery re-reads discovery and drops the stores of resources
// that are gone or changed; on failure it keeps the previous view.
func (reg *Registry) refreshDiscovery(ctx context.Context) {
	dropped, err := reg.catalog.Refresh(ctx)
	if err != nil {
		klog.ErrorS(err, "Refreshing discovery failed; keeping the previous view")
		return
	}
	if len(dropped) > 0 {
		reg.drop(dropped)
	}
}

// every calls f every interval of clk until ctx is done.
func every(ctx context.Context, clk clock.WithTicker, interval time.Duration, f func()) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		f()
	}
}

func clockOrReal(c clock.WithTicker) clock.WithTicker {
	if c == nil {
		return clock.RealClock{}
	}
	return c
}

// Lookup returns what discovery says about gvr, if listproxy caches it.
func (reg *Registry) Lookup(gvr schema.GroupVersionResource) (*catalog.Resource, bool) {
	return reg.catalog.Lookup(gvr)
}

// WatchListDefaults reports whether the apiserver turns a watch from
// resourceVersion "" or "0" without sendInitialEvents into a watch-list.
func (reg *Registry) WatchListDefaults() bool { return reg.catalog.WatchListDefaults() }

// WatchListGzip reports whether the apiserver gzips watch-list responses
// for clients that accept it.
func (reg *Registry) WatchListGzip() bool { return reg.catalog.WatchListGzip() }

// ProvesConsistentReads reports whether consistent reads can be proven,
// with etcd or through the apiserver; otherwise they pass through.
func (reg *Registry) ProvesConsistentReads() bool {
	return reg.cfg.Freshness != nil || reg.apiserverProof != nil
}

// drop stops the stores of the given resources (all stores for nil).
func (reg *Registry) drop(gvrs []schema.GroupVersionResource) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for k, e := range reg.stores {
		if gvrs == nil || slices.Contains(gvrs, k.gvr) {
			reg.dropLocked(k, e, "resource changed or listproxy stopping")
		}
	}
}

// dropLocked stops one store and forgets it and its metrics.
func (reg *Registry) dropLocked(k storeKey, e *storeEntry, why string) {
	e.cancel()
	delete(reg.stores, k)
	reg.cfg.StoreMetrics.Forget(k.gvr.GroupResource().String(), k.format.String())
	klog.InfoS("Dropped snapshot store", "resource", k.gvr.String(), "format", k.format.String(), "why", why)
}

// dropIdle drops the stores that are not preloaded, not held, and were
// last used more than IdleTTL ago.
func (reg *Registry) dropIdle() {
	cutoff := reg.clock.Now().Add(-reg.cfg.IdleTTL)
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for k, e := range reg.stores {
		if !e.preloaded.Load() && e.holders.Load() == 0 && time.Unix(0, e.lastUsed.Load()).Before(cutoff) {
			reg.dropLocked(k, e, "idle")
		}
	}
}

// compactionInterval is how often the compacted revision the Checker knows
// is applied to every store. The Checker reads it from etcd every 10s;
// applying it is a comparison per store.
const compactionInterval = time.Second

// applyCompactionAll applies etcd's compacted revision to every store, so
// that snapshots and pins holding only compacted states are released.
func (reg *Registry) applyCompactionAll() {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	for _, e := range reg.stores {
		reg.applyCompaction(e.store)
	}
}

// applyCompaction tells store the compacted revision known to the Checker.
func (reg *Registry) applyCompaction(store *snapshot.Store) {
	if reg.cfg.Freshness == nil {
		return
	}
	if rev := reg.cfg.Freshness.CompactedRevision(); rev > 0 {
		store.Compact(uint64(rev))
	}
}

// holdLocked takes a hold on e (released by releaseHold) and marks it used
// now. reg.mu must be held, for reading at least: dropIdle, which drops only
// stores nobody holds, takes it for writing, so a store found and held
// under one lock is never dropped as idle between the two.
func (reg *Registry) holdLocked(e *storeEntry) {
	e.holders.Add(1)
	e.lastUsed.Store(reg.clock.Now().UnixNano())
}

// releaseHold ends a hold taken by holdLocked; e's idle time starts again.
func (reg *Registry) releaseHold(e *storeEntry) {
	e.lastUsed.Store(reg.clock.Now().UnixNano())
	e.holders.Add(-1)
}

// heldStore returns the store of info in format, held (holdLocked), if one
// is running and was built for info's current discovery, else nil; it
// starts none.
func (reg *Registry) heldStore(info *catalog.Resource, format wire.Format) *storeEntry {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	e, ok := reg.stores[storeKey{gvr: info.GVR, format: format}]
	if !ok || e.info.Fingerprint() != info.Fingerprint() {
		return nil
	}
	reg.holdLocked(e)
	return e
}

// storeFor returns the store of a resource in a representation, held
// (holdLocked: the caller releases it with releaseHold), starting its
// feeder on first demand if admitStart admits it for the caller of ctx
// (admission.go); preload starts a preloaded store. Without a store it
// returns the pass-through reason: ReasonNotStarted before Run, or why the
// store was not started.
func (reg *Registry) storeFor(ctx context.Context, info *catalog.Resource, format wire.Format, preload bool) (*storeEntry, string, bool) {
	if e := reg.heldStore(info, format); e != nil {
		return e, "", true
	}
	start := startRequest{preloaded: preload || reg.isPreloaded(info, format), budget: reg.cfg.MaxStoreBytes}
	if !start.preloaded {
		// A review may reach the apiserver: not under reg.mu.
		start.authorized = reg.authorizedToStart(ctx, info)
	}
	key := storeKey{gvr: info.GVR, format: format}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.ctx == nil {
		return nil, ReasonNotStarted, false
	}
	e, ok := reg.stores[key]
	if ok && e.info.Fingerprint() == info.Fingerprint() {
		reg.holdLocked(e)
		return e, "", true
	}
	start.used = reg.storeBytesLocked()
	if reason, admitted := admitStart(start); !admitted {
		reg.refuseStart(info, format, reason, start.used)
		return nil, reason, false
	}
	if ok {
		// Discovery changed the resource under us: rebuild.
		e.cancel()
	}
	e = reg.newStoreLocked(info, format)
	reg.stores[key] = e
	reg.holdLocked(e)
	klog.InfoS("Started snapshot store", "resource", info.GVR.String(), "format", format.String(), "preloaded", start.preloaded)
	return e, "", true
}

// newStoreLocked builds the store of info in format with its feeder and
// prover, and starts the feeder under reg.ctx.
func (reg *Registry) newStoreLocked(info *catalog.Resource, format wire.Format) *storeEntry {
	indexField := ""
	if info.GVR.GroupResource() == (schema.GroupResource{Resource: "pods"}) && catalog.FieldsFromObject(info, format) {
		indexField = "spec.nodeName"
	}
	observe := reg.cfg.StoreMetrics.For(info.GVR.GroupResource().String(), format.String())
	e := &storeEntry{info: info, started: reg.clock.Now(), reserved: reg.reservationLocked(info.GVR)}
	e.store = snapshot.NewStore(snapshot.StoreConfig{
		IndexField:      indexField,
		History:         reg.cfg.History,
		HistoryMaxBytes: reg.cfg.HistoryMaxBytes,
		HistoryMaxRatio: reg.cfg.HistoryMaxRatio,
		// Watchers may fall as far behind, and re-watch from as old a
		// resourceVersion, as the apiserver's watch cache lets them.
		EventRetention: snapshot.DefaultEventRetention,
		OnPublish: func(s snapshot.Stats) {
			e.bytes.Store(s.Bytes + s.HistoryBytes)
			e.listed.Store(true)
			if observe.OnPublish != nil {
				observe.OnPublish(s)
			}
		},
		Pack: func(items [][]byte) [][]byte { return wire.PackItems(format, items) },
		UID:  func(e *snapshot.Entry) (string, error) { return ObjectUID(format, e) },
	})
	e.source = &apiSource{client: reg.client, host: strings.TrimSuffix(reg.cfg.Upstream.Host, "/"), path: collectionPath(info.GVR), format: format, custom: info.Custom}
	extract := newExtractor(info, format)
	if format == wire.Table {
		e.source.table = &tableFeed{rules: info.Table, columnNames: info.TableColumns, watchLists: reg.catalog.WatchListDefaults}
		extract = newTableExtractor(info, e.source.table, reg.clock.Now, reg.cfg.Metrics, func(err error) { reg.refuseTables(info, err) })
	}
	e.ctx, e.cancel = context.WithCancel(reg.ctx)
	var warm snapshot.Lister
	if reg.peerClient != nil && format != wire.Table {
		// A peer renders a Table's clock cells for its own instant; its
		// rows are not the apiserver's.
		warm = &peerSource{main: e.source, peer: &apiSource{client: reg.peerClient, host: reg.peerHost, path: e.source.path, format: format, custom: info.Custom, peer: true}}
	}
	e.feeder = snapshot.NewFeeder(snapshot.FeederConfig{
		Store:          e.store,
		Source:         e.source,
		Warm:           warm,
		OnWarm:         observe.OnWarm,
		Extract:        extract,
		Name:           info.GVR.String() + "/" + format.String(),
		OnRelist:       observe.OnRelist,
		OnWatchRestart: observe.OnWatchRestart,
		OnWatching:     observe.OnWatching,
		OnProgress:     observe.OnProgress,
		StallTimeout:   reg.cfg.WatchStallTimeout,
		Stalled:        func(ctx context.Context) bool { return reg.watchStalled(ctx, e) },
	})
	prefix := ""
	if reg.cfg.Freshness != nil {
		prefix = reg.cfg.EtcdPrefix(info.GVR.GroupResource(), info.Custom)
	}
	e.prover = freshness.NewProver(e.ctx, freshness.ProverConfig{
		Checker:    reg.cfg.Freshness,
		APIServer:  reg.apiserverProof,
		Path:       e.source.path,
		Namespaced: info.Namespaced,
		Store:      e.store,
		Resource:   info.GVR.GroupResource().String(),
		Prefix:     prefix,
		Aggregated: info.Aggregated,
		Timeout:    reg.cfg.ConsistentReadTimeout,
		Metrics:    reg.cfg.FreshnessMetrics,
		Behind:     func(rv uint64, proven time.Time) { reg.checkLag(e, rv, proven) },
	})
	go e.feeder.Run(e.ctx)
	e.lastUsed.Store(reg.clock.Now().UnixNano())
	return e
}

func collectionPath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}
