package lists

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	shardparser "k8s.io/apiserver/pkg/sharding"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/admission"
	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

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

// Config configures the LIST server. Start from DefaultConfig: New takes
// every field as given.
type Config struct {
	// Stores holds the snapshot stores LISTs are answered from.
	Stores *stores.Registry
	// Keys seal and open continue tokens.
	Keys ContinueKeys
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
	// Metrics records outcomes; nil records nothing.
	Metrics *ListMetrics
	// ContinueMetrics counts continue-token outcomes; nil records nothing.
	ContinueMetrics *paging.Metrics
	// FallbackReject answers 429 to a consistent read whose freshness
	// could not be proven in time; otherwise it passes through.
	FallbackReject bool
	// ConsistentPassThroughMaxObjects: proving through the apiserver, a
	// consistent LIST whose scope (its namespace, or the whole resource)
	// holds at most this many objects passes through when the store's own
	// feed does not prove it at once (reason direct_cheaper), instead of
	// waiting up to 2.25 s for an auxiliary watch's bookmark; the
	// apiserver answers it in milliseconds. 0 turns the rule off.
	ConsistentPassThroughMaxObjects int
	// Admission admits the responses being written at once and sets their
	// write deadline, shared with the watch server's watch-lists; nil
	// bounds nothing.
	Admission *admission.Queue
	// ServeShardSelectors serves LISTs with a shardSelector (KEP-5866)
	// from snapshots, as the 1.37 apiserver with its ShardedListAndWatch
	// gate answers them; when false they pass through
	// (ReasonShardSelector).
	ServeShardSelectors bool
}

// DefaultConsistentPassThroughMaxObjects is Config's
// ConsistentPassThroughMaxObjects: the apiserver answers a consistent LIST
// of a few hundred objects from its watch cache in milliseconds (7.7 ms at
// the median for 50 podtemplates on 1.37), where an auxiliary watch's
// bookmark takes 1 s on average; 500 is also client-go's page size, so a
// reflector's paginated list of such a scope is one page.
const DefaultConsistentPassThroughMaxObjects = 500

// DefaultConfig returns listproxy's defaults; the command's flags start from
// them. The read wait follows the apiserver's watch cache (3s); none are
// measured for listproxy yet.
func DefaultConfig() Config {
	return Config{
		NotOlderThanWait:                3 * time.Second,
		ScanBudget:                      100000,
		ConsistentPassThroughMaxObjects: DefaultConsistentPassThroughMaxObjects,
		ServeShardSelectors:             true,
	}
}

// Lists answers cacheable LISTs from snapshots. It implements the edge's
// ListServer.
type Lists struct {
	cfg       Config
	stores    *stores.Registry
	admission *admission.Queue
}

// New builds the LIST server over cfg.Stores.
func New(cfg Config) (*Lists, error) {
	if cfg.Stores == nil {
		return nil, fmt.Errorf("no store registry")
	}
	queue := cfg.Admission
	if queue == nil {
		queue = admission.NewQueue(admission.Config{})
	}
	return &Lists{cfg: cfg, stores: cfg.Stores, admission: queue}, nil
}

// listRequest is a cacheable LIST, parsed.
type listRequest struct {
	collection.Request
	query listQuery
	// peer: another replica's first list of a store
	// (httpapi.HeaderPeerList), answered from a synced snapshot or
	// declined (peer.go).
	peer bool
}

// parse decides whether r is a cacheable LIST and parses it.
func (l *Lists) parse(r *http.Request) (listRequest, Reason, bool) {
	values := r.URL.Query()
	if values.Get("shardSelector") != "" && !l.cfg.ServeShardSelectors {
		return listRequest{}, ReasonShardSelector, false
	}
	col, reason, ok := collection.Parse(r, l.stores, collection.List, values.Get("labelSelector"), values.Get("fieldSelector"), values.Get("shardSelector"))
	if !ok {
		return listRequest{}, Reason(reason), false
	}
	q, ok := parseListQuery(r.URL.RawQuery, col.Format == wire.Table)
	if !ok {
		return listRequest{}, ReasonQuery, false
	}
	return listRequest{Request: col, query: q, peer: httpapi.IsPeerList(r)}, "", true
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
	resource := req.ResourceName()
	httpapi.SetAPIServerHeaders(w.Header(), r, req.Resource.Warnings)
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
	if v.handle != nil {
		defer v.handle.Release()
	}
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
	d, token, snap, rv, h := v.decision, v.token, v.snap, v.rv, v.handle
	page, total, slot, status := l.admit(r.Context(), l.estimateWeight(req, d, token, snap), func() (snapshot.Page, int64) { return l.page(req, d, token, snap) })
	if status != nil {
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, status)
		return true, ReasonTooManyRequests
	}
	defer slot.Release()
	// A page that passes through does so before its snapshot is pinned for
	// the next page's token: it leaves no pin behind.
	env := h.Envelope()
	if env == nil {
		return false, ReasonNotSynced
	}
	var tableHead *stores.TableHead
	var tableRows []*stores.TableRow
	if req.Format == wire.Table {
		head, rows, reason, ok := tableRowsOf(h, page.Items)
		if !ok {
			return false, reason
		}
		tableHead, tableRows = head, rows
	}
	meta := wire.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10), ShardSelector: req.ShardInfo()}
	if page.More {
		returned := token.Returned + int64(len(page.Items))
		next := paging.Token{
			Group: req.Resource.GVR.Group, Resource: req.Resource.GVR.Resource, Namespace: req.Namespace,
			RV: rv, StartKey: page.LastKey, SelectorDigest: v.digest,
			Returned: returned, Total: total, IssuedAt: time.Now(),
		}
		var err error
		meta.Continue, err = l.cfg.Keys.Seal(next)
		if err != nil {
			return false, ReasonSealFailed
		}
		h.Store().Pin(rv, snap)
		meta.RemainingItemCount = paging.RemainingItemCount(total, token.Returned, int64(len(page.Items)), true, req.Selective)
	}
	if d.Action == paging.ServeContinue {
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueServed)
	}
	if (d.Action == paging.ServeLatest || d.Action == paging.ServeNotOlderThan) && !h.Watching() {
		// Latest data, but the store is not following the apiserver now.
		l.cfg.Metrics.servedStale(req.ResourceName())
	}
	if req.Format == wire.Table {
		l.respondTable(slot.Writer(w), r, req, tableHead, tableRows, meta, page.Items)
		return true, v.reason
	}
	l.write(slot.Writer(w), r, req.Format, wire.ListEnvelope{APIVersion: env.APIVersion, Kind: env.Kind, Unstructured: env.Unstructured, ListMeta: meta}, page.Items, req.GzipCache())
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
	col, ok := collection.ParsePath(r)
	if !ok {
		// Not a collection listproxy knows: no position to hand over.
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueInvalid)
		q.Set("continue", undecodableContinue)
		r.URL.RawQuery = q.Encode()
		return
	}
	l.handOff(r, col, token, selectorDigest(q.Get("labelSelector"), q.Get("fieldSelector"), q.Get("shardSelector")))
}

// handOff makes sure the apiserver never sees a listproxy continue token
// (docs/design.md "Goals", rule 2) on a request listproxy does not answer itself: a
// token that opens and belongs to the request becomes the apiserver's own
// token for the same position; any other becomes a value the apiserver
// cannot decode, so that it answers with its own first error (a bad selector,
// a bad limit, or "invalid continue token"), in its own order of checks.
// The request always passes through.
func (l *Lists) handOff(r *http.Request, col collection.Path, continueToken string, digest [32]byte) {
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
func selectorDigest(labelSelector, fieldSelector, shardSelector string) [32]byte {
	if sel, err := labels.Parse(labelSelector); err == nil {
		labelSelector = sel.String()
	}
	if sel, err := fields.ParseSelector(fieldSelector); err == nil {
		fieldSelector = sel.String()
	}
	if shardSelector != "" {
		if sel, err := shardparser.Parse(shardSelector); err == nil {
			shardSelector = sel.String()
		}
	}
	return paging.SelectorDigest(labelSelector, fieldSelector, shardSelector)
}

// page selects the items of one page, mirroring how the apiserver's watch
// cache scopes and filters a list (collection.Selection, which watch-lists
// share). It returns the page and the item total of the list for
// remainingItemCount.
func (l *Lists) page(req listRequest, d paging.Decision, token paging.Token, snap *snapshot.Snapshot) (snapshot.Page, int64) {
	firstPage := d.Action != paging.ServeContinue
	sel := req.Select(firstPage)
	if sel.Single {
		// A single key: never a continue token.
		var page snapshot.Page
		if e, ok := sel.Get(snap); ok {
			page.Items, page.LastKey = []*snapshot.Entry{e}, e.Key
		}
		return page, int64(len(page.Items))
	}
	pr := sel.PageRequest()
	pr.After, pr.Limit, pr.ScanBudget = token.StartKey, l.pageLimit(req, d), l.cfg.ScanBudget
	// The watch cache consults its index for first pages of latest and
	// consistent reads; "more" then means more index matches.
	pr.MoreInIndex = sel.IndexValue != nil && firstPage && d.Action != paging.ServeExact
	total := token.Total
	if firstPage {
		total = int64(snap.Count(sel.Namespace))
	}
	return snap.Page(pr), total
}

// write streams a list response from stored bytes, gzipped as the apiserver
// would for a client that accepts it; cache says how its chunks are cached
// (see writeGzipList).
func (l *Lists) write(w http.ResponseWriter, r *http.Request, format wire.Format, env wire.ListEnvelope, entries []*snapshot.Entry, cache snapshot.GzipCache) {
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
	if size > gzipThreshold && collection.AcceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if err := writeGzipList(w, format, parts, entries, cache); err != nil {
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
