package lists

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/consistency"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

var runtimeConverter = runtime.DefaultUnstructuredConverter

// gzipThreshold is the body size above which the apiserver gzips a response
// for a client that accepts it (k8s.io/apiserver/pkg/endpoints/handlers/
// responsewriters defaultGzipThresholdBytes); listproxy does the same so the
// two are indistinguishable.
const gzipThreshold = 128 * 1024

// ContinueKeys seals and opens continue tokens (a *paging.Reloader or
// *paging.Keyring).
type ContinueKeys interface {
	Seal(paging.Token) (string, error)
	Open(string) (paging.Token, error)
}

// Config configures the snapshot-serving side of listproxy. Start from
// DefaultConfig: New takes every field as given.
type Config struct {
	// Upstream is how listproxy reaches the apiserver with its own identity.
	Upstream *rest.Config
	// Peer, when set, is how listproxy reaches other replicas of itself in
	// front of the same apiserver (typically their Service): each store's
	// first list is read from there, and only its watch from the apiserver
	// (snapshot.FeederConfig.Warm). A peer that cannot be reached or
	// cannot answer costs one failed request, and a list the apiserver
	// does not show to be its cluster's (peerSource) one name-scoped
	// LIST; the store then lists from the apiserver. It carries only what
	// the peer is to be sent, and redirects are never followed.
	Peer *rest.Config
	// Resources selects the cached resources.
	Resources ResourceFilter
	// Keys seal and open continue tokens.
	Keys ContinueKeys
	// History, HistoryMaxBytes and HistoryMaxRatio bound each store's
	// snapshot history (see snapshot.StoreConfig).
	History         time.Duration
	HistoryMaxBytes int64
	HistoryMaxRatio float64
	// IdleTTL drops a store that served no LIST for this long; preloaded
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
	// the running stores hold fewer bytes (live and history) than this;
	// otherwise the request passes through. Running stores are never
	// dropped for it. 0 is no bound.
	MaxStoreBytes int64
	// ColdStoreWait bounds how long a LIST or watch waits for its store's
	// first list (the one sync in flight, started by the first request)
	// instead of passing through beside it; past it the request gets what
	// the apiserver's unready watch cache answers (cold.go). 0 does not
	// wait.
	ColdStoreWait time.Duration
	// NotOlderThanWait bounds the wait for a snapshot to reach a requested
	// resourceVersion; past it the request passes through. Upstream's watch
	// cache waits 3s.
	NotOlderThanWait time.Duration
	// LimitForRV0 honours limit for resourceVersion="0". The apiserver
	// ignores it there (KEP-365 allows either); a reflector that gets a
	// paginated answer then relists with exact reads (client-go
	// tools/cache/reflector.go, paginatedResult).
	LimitForRV0 bool
	// ScanBudget bounds the objects one page examines under a selector; 0 is
	// no bound.
	ScanBudget int
	// DiscoveryInterval is how often discovery and CRDs are re-read; it
	// must be positive.
	DiscoveryInterval time.Duration
	// Metrics records outcomes; nil records nothing.
	Metrics *ListMetrics
	// StoreMetrics observes the snapshot stores; nil records nothing.
	StoreMetrics *snapshot.Metrics
	// ContinueMetrics counts continue-token outcomes; nil records nothing.
	ContinueMetrics *paging.Metrics

	// Freshness proves consistent reads with etcd; nil passes consistent
	// reads through (managed clusters without etcd access).
	Freshness *freshness.Checker
	// EtcdPrefix returns a resource's etcd key prefix (with a trailing "/").
	EtcdPrefix func(gr schema.GroupResource, custom bool) string
	// ConsistentReadTimeout bounds proving freshness; then FallbackReject
	// answers 429, otherwise the request passes through.
	ConsistentReadTimeout time.Duration
	FallbackReject        bool
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
	// Inflight bounds the responses being written at once and sets their
	// write deadline; the zero value bounds nothing.
	Inflight InflightConfig
	// ConsistencyCheck configures comparing snapshots with the apiserver
	// (pkg/consistency).
	ConsistencyCheck consistency.Config
}

// DefaultConfig returns listproxy's defaults; the command's flags start from
// them. The history window and read timeouts follow the apiserver's watch
// cache (75s history doubled for pagination; 3s waits); none are measured
// for listproxy yet.
func DefaultConfig() Config {
	return Config{
		History:          150 * time.Second,
		HistoryMaxBytes:  1 << 30,
		HistoryMaxRatio:  0.1,
		IdleTTL:          15 * time.Minute,
		NotOlderThanWait: 3 * time.Second,
		// Not measured: room for a first list of tens of thousands of
		// objects on a busy machine, under the apiserver's 60s request
		// timeout. A client that gets the 429 after it retries (client-go
		// does, after Retry-After).
		ColdStoreWait:         30 * time.Second,
		ScanBudget:            100000,
		DiscoveryInterval:     10 * time.Second,
		ConsistentReadTimeout: freshness.DefaultProofTimeout,
		// Watch health (not measured): a watch request unanswered for 3
		// minutes is abandoned, and a watch silent for that long is
		// checked with etcd; a store that etcd proves behind for 10s has
		// its watch restarted (lag.go).
		WatchStallTimeout: snapshot.DefaultStallTimeout,
		WatchLagTimeout:   defaultWatchLagTimeout,
		// In-flight LIST bounds (not measured): the apiserver's
		// --max-requests-inflight for reads; 2 GiB of responses, so that
		// three full lists of 150k pods (~600 MB of JSON each) are written
		// at once and a larger one alone; its 60s request timeout.
		Inflight: InflightConfig{
			MaxLists:     400,
			MaxBytes:     2 << 30,
			QueueWait:    5 * time.Second,
			WriteTimeout: 60 * time.Second,
		},
		ConsistencyCheck: consistency.DefaultConfig(),
	}
}

// Lists answers cacheable LISTs from snapshots. It implements ListServer.
type Lists struct {
	cfg      Config
	client   *http.Client
	registry *registry
	// peerClient and peerHost reach Config.Peer; nil without one.
	peerClient *http.Client
	peerHost   string
	inflight   *inflight

	// ctx bounds every feeder; set by Run.
	ctx context.Context

	mu     sync.RWMutex
	stores map[storeKey]*storeEntry // guarded by mu

	preload preloadState

	consistency *consistency.Checker // compares the stores with the apiserver
}

type storeKey struct {
	gvr    schema.GroupVersionResource
	format wire.Format
}

type storeEntry struct {
	store    *snapshot.Store
	source   *apiSource
	info     *resourceInfo
	ctx      context.Context
	cancel   context.CancelFunc
	lastUsed atomic.Int64 // unix nanoseconds of the last LIST
	// watchers counts the watches served from the store; a store with
	// watchers is never idle.
	watchers atomic.Int64
	feeder   *snapshot.Feeder
	// lagCheck is true while a check that the store catches up runs (lag.go).
	lagCheck atomic.Bool
	// preloaded stores (Config.Preload) are never dropped as idle.
	preloaded atomic.Bool
	// started is when the store started: how long a store that has not
	// synced has been unready (cold.go).
	started time.Time

	// prover proves what the store must hold for consistent, exact and
	// not-older-than reads with etcd.
	prover *freshness.Prover
	// bytes is what the store holds, live and history, as last published:
	// its share of Config.MaxStoreBytes.
	bytes atomic.Int64
}

// New builds the snapshot server; Run must be called before it serves.
func New(cfg Config) (*Lists, error) {
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
	l := &Lists{
		cfg:      cfg,
		client:   client,
		registry: &registry{discovery: disc, dynamic: dyn, filter: cfg.Resources},
		inflight: newInflight(cfg.Inflight),
		stores:   map[storeKey]*storeEntry{},
	}
	if cfg.Peer != nil {
		// A peer's client that cannot be built (its CA file is missing)
		// leaves stores to list from the apiserver, as without a peer.
		if l.peerClient, err = newPeerClient(cfg.Peer); err != nil {
			klog.ErrorS(err, "Peer client; stores list from the apiserver", "peer", cfg.Peer.Host)
			l.peerClient = nil
		}
		l.peerHost = strings.TrimSuffix(cfg.Peer.Host, "/")
	}
	l.consistency = consistency.New(cfg.ConsistencyCheck, consistencyView{l}, consistencyView{l})
	return l, nil
}

// Run reads discovery (retrying until it succeeds; until then every request
// passes through), then keeps discovery fresh and drops idle stores until
// ctx is done.
func (l *Lists) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		_, err := l.registry.refresh(ctx)
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
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	go l.registry.refreshLoop(ctx, l.cfg.DiscoveryInterval, l.drop)
	if l.cfg.Freshness != nil {
		go l.compactionLoop(ctx)
	}
	if len(l.cfg.Preload) > 0 {
		go l.preloadLoop(ctx)
	}
	if l.cfg.IdleTTL > 0 {
		go l.janitor(ctx)
	}
	if l.cfg.ConsistencyCheck.Interval > 0 {
		go l.consistency.Run(ctx)
	}
	<-ctx.Done()
	l.drop(nil)
}

// drop stops the stores of the given resources (all stores for nil).
func (l *Lists) drop(gvrs []schema.GroupVersionResource) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.stores {
		if gvrs == nil || slices.Contains(gvrs, k.gvr) {
			l.dropLocked(k, e, "resource changed or listproxy stopping")
		}
	}
}

// dropLocked stops one store and forgets it and its metrics.
func (l *Lists) dropLocked(k storeKey, e *storeEntry, why string) {
	e.cancel()
	delete(l.stores, k)
	l.cfg.StoreMetrics.Forget(k.gvr.GroupResource().String(), k.format.String())
	klog.InfoS("Dropped snapshot store", "resource", k.gvr.String(), "format", k.format.String(), "why", why)
}

func (l *Lists) janitor(ctx context.Context) {
	t := time.NewTicker(l.cfg.IdleTTL / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-l.cfg.IdleTTL)
		l.mu.Lock()
		for k, e := range l.stores {
			if !e.preloaded.Load() && e.watchers.Load() == 0 && time.Unix(0, e.lastUsed.Load()).Before(cutoff) {
				l.dropLocked(k, e, "idle")
			}
		}
		l.mu.Unlock()
	}
}

// compactionInterval is how often the compacted revision the Checker knows
// is applied to every store. The Checker reads it from etcd every 10s;
// applying it is a comparison per store.
const compactionInterval = time.Second

// compactionLoop applies etcd's compacted revision to every store until ctx
// is done, so that snapshots and pins holding only compacted states are
// released.
func (l *Lists) compactionLoop(ctx context.Context) {
	t := time.NewTicker(compactionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.RLock()
		for _, e := range l.stores {
			l.applyCompaction(e.store)
		}
		l.mu.RUnlock()
	}
}

// applyCompaction tells store the compacted revision known to the Checker.
func (l *Lists) applyCompaction(store *snapshot.Store) {
	if l.cfg.Freshness == nil {
		return
	}
	if rev := l.cfg.Freshness.CompactedRevision(); rev > 0 {
		store.Compact(uint64(rev))
	}
}

// existingStore returns the store of info in format if one is running and
// was built for info's current discovery, else nil; it starts none.
func (l *Lists) existingStore(info *resourceInfo, format wire.Format) *storeEntry {
	l.mu.RLock()
	e, ok := l.stores[storeKey{gvr: info.GVR, format: format}]
	l.mu.RUnlock()
	if !ok || e.info.fingerprint != info.fingerprint {
		return nil
	}
	e.lastUsed.Store(time.Now().UnixNano())
	return e
}

// storeFor returns the store of a resource in a representation, starting
// its feeder on first demand if admitStart admits it for the caller of ctx
// (admission.go); preload starts a preloaded store. Without a store it
// returns the pass-through reason: ReasonNotSynced before Run, or why the
// store was not started.
func (l *Lists) storeFor(ctx context.Context, info *resourceInfo, format wire.Format, preload bool) (*storeEntry, Reason, bool) {
	if e := l.existingStore(info, format); e != nil {
		return e, "", true
	}
	start := startRequest{preloaded: preload || l.isPreloaded(info, format), budget: l.cfg.MaxStoreBytes}
	if !start.preloaded {
		// A review may reach the apiserver: not under l.mu.
		start.authorized = l.authorizedToStart(ctx, info)
	}
	key := storeKey{gvr: info.GVR, format: format}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return nil, ReasonNotSynced, false
	}
	e, ok := l.stores[key]
	if ok && e.info.fingerprint == info.fingerprint {
		e.lastUsed.Store(time.Now().UnixNano())
		return e, "", true
	}
	start.used = l.storeBytesLocked()
	if reason, admitted := admitStart(start); !admitted {
		l.refuseStart(info, format, reason, start.used)
		return nil, reason, false
	}
	if ok {
		// Discovery changed the resource under us: rebuild.
		e.cancel()
	}
	indexField := ""
	if info.GVR.GroupResource() == (schema.GroupResource{Resource: "pods"}) && !format.IsMeta() {
		indexField = "spec.nodeName"
	}
	name := info.GVR.String() + "/" + format.String()
	observe := l.cfg.StoreMetrics.For(info.GVR.GroupResource().String(), format.String())
	e = &storeEntry{info: info, started: time.Now()}
	entry := e
	store := snapshot.NewStore(snapshot.StoreConfig{
		IndexField:      indexField,
		History:         l.cfg.History,
		HistoryMaxBytes: l.cfg.HistoryMaxBytes,
		HistoryMaxRatio: l.cfg.HistoryMaxRatio,
		OnPublish: func(s snapshot.Stats) {
			entry.bytes.Store(s.Bytes + s.HistoryBytes)
			if observe.OnPublish != nil {
				observe.OnPublish(s)
			}
		},
		Pack: func(items [][]byte) [][]byte { return wire.PackItems(format, items) },
	})
	source := &apiSource{client: l.client, host: strings.TrimSuffix(l.cfg.Upstream.Host, "/"), path: collectionPath(info.GVR), format: format, custom: info.Custom}
	storeCtx, cancel := context.WithCancel(l.ctx)
	e.store, e.source, e.ctx, e.cancel = store, source, storeCtx, cancel
	var warm snapshot.Lister
	if l.peerClient != nil {
		warm = peerSource{main: source, peer: &apiSource{client: l.peerClient, host: l.peerHost, path: source.path, format: format, custom: info.Custom, peer: true}}
	}
	feeder := snapshot.NewFeeder(snapshot.FeederConfig{
		Store:          store,
		Source:         source,
		Warm:           warm,
		OnWarm:         observe.OnWarm,
		Extract:        newExtractor(info, format),
		Name:           name,
		OnRelist:       observe.OnRelist,
		OnWatchRestart: observe.OnWatchRestart,
		OnWatching:     observe.OnWatching,
		OnProgress:     observe.OnProgress,
		StallTimeout:   l.cfg.WatchStallTimeout,
		Stalled:        func(ctx context.Context) bool { return l.watchStalled(ctx, e) },
	})
	e.feeder = feeder
	prefix := ""
	if l.cfg.Freshness != nil {
		prefix = l.cfg.EtcdPrefix(info.GVR.GroupResource(), info.Custom)
	}
	e.prover = freshness.NewProver(storeCtx, freshness.ProverConfig{
		Checker:    l.cfg.Freshness,
		Store:      store,
		Resource:   info.GVR.GroupResource().String(),
		Prefix:     prefix,
		Aggregated: info.Aggregated,
		Timeout:    l.cfg.ConsistentReadTimeout,
		Metrics:    l.cfg.FreshnessMetrics,
		Behind:     func(rv uint64, proven time.Time) { l.checkLag(entry, rv, proven) },
	})
	go feeder.Run(storeCtx)
	e.lastUsed.Store(time.Now().UnixNano())
	l.stores[key] = e
	klog.InfoS("Started snapshot store", "resource", info.GVR.String(), "format", format.String(), "preloaded", start.preloaded)
	return e, "", true
}

func collectionPath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// listRequest is a cacheable LIST, parsed.
type listRequest struct {
	col       collection
	info      *resourceInfo
	format    wire.Format
	query     listQuery
	labelSel  labels.Selector
	fieldSel  fields.Selector
	selectors bool // a non-empty label or field selector
	// peer: another replica's first list of a store
	// (httpapi.HeaderPeerList), answered from a synced snapshot or
	// declined (peer.go).
	peer bool
}

// parse decides whether r is a cacheable LIST and parses it.
func (l *Lists) parse(r *http.Request) (listRequest, Reason, bool) {
	if r.Method != http.MethodGet {
		return listRequest{}, ReasonMethod, false
	}
	col, ok := parseCollection(r)
	if !ok {
		return listRequest{}, ReasonPath, false
	}
	info, ok := l.registry.lookup(col.GVR)
	if !ok {
		return listRequest{}, ReasonResource, false
	}
	if col.Namespace != "" && !info.Namespaced {
		return listRequest{}, ReasonPath, false
	}
	q, ok := parseListQuery(r.URL.RawQuery)
	if !ok {
		return listRequest{}, ReasonQuery, false
	}
	format, ok := negotiateFormat(r, info.Custom)
	if !ok {
		return listRequest{}, ReasonMediaType, false
	}
	labelSel, err := labels.Parse(q.labelSelector)
	if err != nil {
		return listRequest{}, ReasonSelector, false
	}
	fieldSel, err := fields.ParseSelector(q.fieldSelector)
	if err != nil || !info.Fields.accepts(fieldSel, format.IsMeta()) {
		return listRequest{}, ReasonSelector, false
	}
	return listRequest{
		col: col, info: info, format: format, query: q,
		labelSel: labelSel, fieldSel: fieldSel,
		selectors: !labelSel.Empty() || !fieldSel.Empty(),
		peer:      httpapi.IsPeerList(r),
	}, "", true
}

// ServeList answers r from a snapshot, or returns false having written
// nothing, in which case r must pass through. It may rewrite r's query
// before returning false: a continue token whose snapshot is gone is replaced
// by the apiserver's own token for the same position.
func (l *Lists) ServeList(w http.ResponseWriter, r *http.Request) bool {
	start := time.Now()
	req, reason, ok := l.parse(r)
	if !ok {
		if httpapi.IsPeerList(r) {
			// Declined by the edge, which passes nothing of a peer's.
			return false
		}
		l.cfg.Metrics.passThrough("", reason)
		l.TranslateContinue(r)
		return false
	}
	resource := req.info.GVR.GroupResource().String()
	httpapi.SetAPIServerHeaders(w.Header(), r, req.info.Warnings)
	served, reason := l.serve(w, r, req)
	if !served && req.peer {
		httpapi.UnsetAPIServerHeaders(w.Header())
		httpapi.DeclinePeerList(w)
		served, reason = true, ReasonPeerDeclined
	}
	if !served {
		httpapi.UnsetAPIServerHeaders(w.Header())
		l.cfg.Metrics.passThrough(resource, reason)
		l.TranslateContinue(r)
		return false
	}
	l.cfg.Metrics.served(resource, reason, time.Since(start))
	return true
}

// serve resolves a parsed LIST and, unless it passes through, writes its
// answer. It returns whether it wrote one, and the reason for metrics.
func (l *Lists) serve(w http.ResponseWriter, r *http.Request, req listRequest) (bool, Reason) {
	v := l.resolve(r.Context(), req)
	switch v.outcome {
	case outcomePass:
		return false, v.reason
	case outcomeReject:
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, v.status)
		return true, v.reason
	}
	return l.respond(w, r, req, v)
}

// respond writes a resolved read from its snapshot: admission (in-flight
// limits), the page, the next continue token, and the stored bytes,
// gzipped when the client accepts it.
func (l *Lists) respond(w http.ResponseWriter, r *http.Request, req listRequest, v verdict) (bool, Reason) {
	d, token, snap, rv, entry := v.decision, v.token, v.snap, v.rv, v.entry
	page, total, slot, status := l.admit(r.Context(), l.estimateWeight(req, d, token, snap), func() (snapshot.Page, int64) { return l.page(req, d, token, snap) })
	if status != nil {
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, status)
		return true, ReasonTooManyRequests
	}
	defer slot.release()
	meta := wire.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	if page.More {
		returned := token.Returned + int64(len(page.Items))
		next := paging.Token{
			Group: req.info.GVR.Group, Resource: req.info.GVR.Resource, Namespace: req.col.Namespace,
			RV: rv, StartKey: page.LastKey, SelectorDigest: v.digest,
			Returned: returned, Total: total, IssuedAt: time.Now(),
		}
		var err error
		meta.Continue, err = l.cfg.Keys.Seal(next)
		if err != nil {
			return false, ReasonSealFailed
		}
		entry.store.Pin(rv, snap)
		meta.RemainingItemCount = paging.RemainingItemCount(total, token.Returned, int64(len(page.Items)), true, req.selectors)
	}
	if d.Action == paging.ServeContinue {
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueServed)
	}
	env := entry.source.envelope.Load()
	if env == nil {
		return false, ReasonNotSynced
	}
	if (d.Action == paging.ServeLatest || d.Action == paging.ServeNotOlderThan) && entry.feeder != nil && !entry.feeder.Watching() {
		// Latest data, but the store is not following the apiserver now.
		l.cfg.Metrics.servedStale(req.info.GVR.GroupResource().String())
	}
	l.write(slot.writer(w), r, req.format, wire.ListEnvelope{APIVersion: env.APIVersion, Kind: env.Kind, Unstructured: env.Unstructured, ListMeta: meta}, page.Items, !req.selectors)
	return true, v.reason
}

// TranslateContinue rewrites a listproxy continue token in r's query, if
// any, for a request that passes through to the apiserver, whether or not
// it was offered to ServeList (see handOff): the apiserver never sees a
// listproxy token.
func (l *Lists) TranslateContinue(r *http.Request) {
	q := r.URL.Query()
	token := q.Get("continue")
	if !paging.IsListproxyToken(token) {
		return
	}
	col, ok := parseCollection(r)
	if !ok {
		// Not a collection listproxy knows: no position to hand over.
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueInvalid)
		q.Set("continue", undecodableContinue)
		r.URL.RawQuery = q.Encode()
		return
	}
	l.handOff(r, col, token, selectorDigest(q.Get("labelSelector"), q.Get("fieldSelector")))
}

// handOff makes sure the apiserver never sees a listproxy continue token
// (docs/design.md "Goals", rule 2) on a request listproxy does not answer itself: a
// token that opens and belongs to the request becomes the apiserver's own
// token for the same position; any other becomes a value the apiserver
// cannot decode, so that it answers with its own first error (a bad selector,
// a bad limit, or "invalid continue token"), in its own order of checks.
// The request always passes through.
func (l *Lists) handOff(r *http.Request, col collection, continueToken string, digest [32]byte) {
	query := r.URL.Query()
	token, err := l.cfg.Keys.Open(continueToken)
	if err == nil {
		err = token.Matches(col.GVR.Group, col.GVR.Resource, col.Namespace, digest)
	}
	if err != nil {
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueInvalid)
		query.Set("continue", undecodableContinue)
	} else {
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueDelegated)
		query.Set("continue", paging.NativeContinue(token.RV, paging.RelativeKey(col.Namespace, token.StartKey)))
	}
	r.URL.RawQuery = query.Encode()
}

// undecodableContinue is not base64url: the apiserver rejects it as an
// invalid continue token, after its own earlier checks.
const undecodableContinue = paging.UndecodableContinue

// selectorDigest binds a token to its selectors in canonical form, so that
// an equivalent spelling continues the same list. Unparsable selectors are
// taken as written (the apiserver rejects them anyway).
func selectorDigest(labelSelector, fieldSelector string) [32]byte {
	if sel, err := labels.Parse(labelSelector); err == nil {
		labelSelector = sel.String()
	}
	if sel, err := fields.ParseSelector(fieldSelector); err == nil {
		fieldSelector = sel.String()
	}
	return paging.SelectorDigest(labelSelector, fieldSelector)
}

// page selects the items of one page, mirroring how the apiserver's watch
// cache scopes and filters a list (k8s.io/apiserver/pkg/storage/cacher). It
// returns the page and the item total of the list for remainingItemCount.
func (l *Lists) page(req listRequest, d paging.Decision, token paging.Token, snap *snapshot.Snapshot) (snapshot.Page, int64) {
	firstPage := d.Action != paging.ServeContinue
	namespace := req.col.Namespace
	if firstPage && namespace == "" {
		// A cluster-wide list whose field selector pins one namespace is
		// scoped to it, as the apiserver's registry does.
		if ns, ok := req.fieldSel.RequiresExactMatch("metadata.namespace"); ok && len(validation.ValidateNamespaceName(ns, false)) == 0 {
			namespace = ns
		}
	}
	pr := snapshot.PageRequest{Namespace: namespace, After: token.StartKey, Limit: l.pageLimit(req, d), ScanBudget: l.cfg.ScanBudget}
	if req.selectors {
		labelSel, fieldSel := req.labelSel, req.fieldSel
		pr.Match = func(e *snapshot.Entry) bool {
			return labelSel.Matches(e.Labels) && fieldSel.Matches(e.Fields)
		}
	}
	if firstPage {
		// A selector on metadata.name reads that single key: never a
		// continue token.
		if name, ok := req.fieldSel.RequiresExactMatch("metadata.name"); ok && (namespace != "" || !req.info.Namespaced) {
			var page snapshot.Page
			if e, found := snap.Get(snapshot.ObjectKey(namespace, name)); found && (pr.Match == nil || pr.Match(e)) {
				page.Items, page.LastKey = []*snapshot.Entry{e}, e.Key
			}
			return page, int64(len(page.Items))
		}
	}
	// The watch cache consults its spec.nodeName index for first pages of
	// latest and consistent reads; "more" then means more index matches.
	if node, ok := req.fieldSel.RequiresExactMatch("spec.nodeName"); ok && req.info.GVR.GroupResource() == (schema.GroupResource{Resource: "pods"}) && !req.format.IsMeta() {
		pr.IndexValue = &node
		pr.MoreInIndex = firstPage && d.Action != paging.ServeExact
		if req.labelSel.Empty() && len(req.fieldSel.Requirements()) == 1 {
			pr.Match = nil // the index already selects exactly these
		}
	}
	total := token.Total
	if firstPage {
		total = int64(snap.Count(namespace))
	}
	return snap.Page(pr), total
}

// write streams a list response from stored bytes, gzipped as the apiserver
// would for a client that accepts it. unfiltered says the entries are
// consecutive in key order (see writeGzipList).
func (l *Lists) write(w http.ResponseWriter, r *http.Request, format wire.Format, env wire.ListEnvelope, entries []*snapshot.Entry, unfiltered bool) {
	items := make([][]byte, len(entries))
	for i, e := range entries {
		items[i] = e.Raw
	}
	h := w.Header()
	h.Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
	parts, err := wire.SplitList(format, env, items)
	if err != nil {
		// Negotiation only accepts formats and envelopes that split.
		httpapi.WriteStatus(w, apierrors.NewInternalError(err))
		return
	}
	size := parts.Size(format, items)
	h.Set("Content-Type", format.ContentType())
	h.Set("Cache-Control", "no-cache, private")
	// The apiserver gzips when the encoded body exceeds the threshold.
	if size > gzipThreshold && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if err := writeGzipList(w, format, parts, entries, unfiltered); err != nil {
			klog.V(2).InfoS("Writing list response failed", "err", err)
		}
		return
	}
	// A known length spares net/http chunking the body (fewer writes per
	// byte on the largest responses).
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if err := wire.WriteListParts(w, format, parts, items); err != nil {
		klog.V(2).InfoS("Writing list response failed", "err", err)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, token := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(token) == "gzip" {
			return true
		}
	}
	return false
}
