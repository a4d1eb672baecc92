package lists

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
)

// Reason says why a LIST was served, passed through or rejected: the
// "reason" label of listproxy_lists_total (docs/metrics.md). The reasons of
// paging.Decide and the outcomes of freshness.Prover.Consistent are
// reasons too, under their own names.
type Reason string

// Reasons for passing a LIST through before it is resolved (parse): those
// of collection.Parse, and a query listproxy does not understand.
const (
	ReasonMethod    Reason = collection.ReasonMethod
	ReasonPath      Reason = collection.ReasonPath
	ReasonResource  Reason = collection.ReasonResource
	ReasonQuery     Reason = "query"
	ReasonMediaType Reason = collection.ReasonMediaType
	ReasonSelector  Reason = collection.ReasonSelector
	// ReasonShardSelector: a shardSelector while serving them is off
	// (Config.ServeShardSelectors), or on an aggregated API's resource.
	ReasonShardSelector Reason = collection.ReasonShardSelector
)

// Reasons of resolve and respond besides those of paging.Decide and
// freshness.Prover.
const (
	ReasonNoProof             Reason = "no_proof"                   // consistent read with no proof configured: pass through
	ReasonNotSynced           Reason = "not_synced"                 // the store has no snapshot yet: pass through
	ReasonTooLargeRV          Reason = "resource_version_too_large" // 504: etcd itself has not reached the RV
	ReasonNotOlderThanTimeout Reason = "not_older_than_timeout"     // the store did not reach the RV in time: pass through
	ReasonContinueExpired     Reason = "continue_expired"           // 410: etcd compacted the token's RV
	ReasonExactCompacted      Reason = "exact_compacted"            // 410: etcd compacted the exact RV
	ReasonContinueNotRetained Reason = "continue_not_retained"      // the apiserver continues the list
	ReasonSnapshotUnavailable Reason = "snapshot_unavailable"       // no snapshot at the RV: pass through
	ReasonTooManyRequests     Reason = "too_many_requests"          // 429: no room to write the response
	ReasonSealFailed          Reason = "seal_failed"                // the next token could not be sealed: pass through
)

// outcome is what resolve decided.
type outcome int

const (
	outcomeServe  outcome = iota // answer from verdict.snap at verdict.rv
	outcomePass                  // pass through to the apiserver
	outcomeReject                // answer verdict.status
)

// verdict is resolve's answer for one LIST.
type verdict struct {
	outcome outcome
	reason  Reason
	status  *apierrors.StatusError // outcomeReject

	// For outcomeServe: the decision, the continue token (zero without
	// one), the snapshot and resourceVersion to serve.
	decision paging.Decision
	token    paging.Token
	digest   [32]byte // of the request's selectors, bound into tokens
	snap     *snapshot.Snapshot
	rv       uint64
	// handle holds the request's store, whatever the outcome, once
	// acquired; released when the answer is written.
	handle *stores.Handle
}

func pass(reason Reason) verdict { return verdict{outcome: outcomePass, reason: reason} }

func reject(reason Reason, status *apierrors.StatusError) verdict {
	return verdict{outcome: outcomeReject, reason: reason, status: status}
}

// decide opens the request's continue token, if it is listproxy's, and
// asks paging.Decide for the row of the semantics table. It returns the
// decision, the token (zero without one), the digest of the request's
// selectors that tokens bind, and why the token did not open or does not
// belong to the request.
func (l *Lists) decide(req listRequest) (d paging.Decision, token paging.Token, digest [32]byte, openErr error) {
	q := req.query
	ours := paging.IsListproxyToken(q.continueToken)
	digest = selectorDigest(q.labelSelector, q.fieldSelector, q.shardSelector)
	if ours {
		token, openErr = l.cfg.Keys.Open(q.continueToken)
		if openErr == nil {
			openErr = token.Matches(req.Resource.GVR.Group, req.Resource.GVR.Resource, req.Namespace, digest)
		}
	}
	d = paging.Decide(paging.Request{
		ResourceVersion:      q.resourceVersion,
		ResourceVersionMatch: q.resourceVersionMatch,
		Limit:                q.limit,
		Continue:             q.continueToken,
		ContinueIsOurs:       ours,
		ContinueErr:          openErr,
		ShardSelectorErr:     req.ShardErr,
	})
	return d, token, digest, openErr
}

// resolve maps a parsed LIST onto the semantics table (docs/design.md
// "Semantics table"): one case per row. It opens the request's continue
// token, asks paging.Decide for the row, and finds the snapshot that row
// serves, proving freshness with the store's freshness.Prover where the row
// needs it. It writes nothing.
func (l *Lists) resolve(ctx context.Context, req listRequest) (v verdict) {
	d, token, digest, openErr := l.decide(req)
	// Every row below the first two reads the request's store; the
	// verdict carries its handle, whatever the outcome.
	var h *stores.Handle
	defer func() { v.handle = h }()
	serve := func(snap *snapshot.Snapshot, rv uint64) verdict {
		return verdict{outcome: outcomeServe, reason: Reason(d.Reason), decision: d, token: token, digest: digest, snap: snap, rv: rv}
	}
	switch d.Action {
	case paging.PassThrough, paging.Reject:
	default:
		var unready verdict
		var ready bool
		if h, unready, ready = l.acquireStore(ctx, req, d.Action); !ready {
			return unready
		}
	}

	switch d.Action {
	case paging.PassThrough:
		// Invalid options or a continue token not ours: the apiserver
		// answers.
		return pass(Reason(d.Reason))

	case paging.Reject:
		return l.rejected(d, openErr)

	case paging.ServeContinue:
		snap, unserved, ok := l.continueSnapshot(ctx, req, h, token)
		if !ok {
			return unserved
		}
		return serve(snap, token.RV)

	case paging.ServeConsistent:
		// resourceVersion unset: the latest snapshot once freshness is
		// proven (with no proof at all it passed through above); a small
		// read the apiserver answers sooner than an auxiliary watch
		// proves it passes through; on timeout, pass through (or 429).
		small := false
		if latest, _, err := h.Store().Latest(); err == nil {
			small = l.smallScope(req, latest)
		}
		snap, rv, outcome := h.Prover().ConsistentIfCheap(ctx, small)
		if snap == nil {
			return l.unproven(outcome)
		}
		return serve(snap, rv)

	case paging.ServeLatest:
		// resourceVersion="0": the latest snapshot, no wait.
		snap, rv, err := h.Store().Latest()
		if err != nil {
			return pass(ReasonSnapshotUnavailable)
		}
		return serve(snap, rv)

	case paging.ServeNotOlderThan:
		// resourceVersion=N, NotOlderThan: the latest snapshot once it
		// reaches N; 504 when etcd itself is behind N; else pass through.
		snap, rv, err := h.Prover().NotOlderThan(ctx, d.RV, l.cfg.NotOlderThanWait)
		var tooLarge *freshness.TooLargeError
		if errors.As(err, &tooLarge) {
			return reject(ReasonTooLargeRV, paging.TooLargeResourceVersionError(tooLarge.RV, tooLarge.Current))
		}
		if snap == nil {
			return pass(ReasonNotOlderThanTimeout)
		}
		return serve(snap, rv)

	case paging.ServeExact:
		snap, unserved, ok := l.exactSnapshot(ctx, h, d.RV)
		if !ok {
			return unserved
		}
		return serve(snap, d.RV)
	}
	return pass(Reason(d.Reason))
}

// acquireStore acquires the request's store for a row that reads it and
// reports whether the store is ready to serve; when it is not, the verdict
// instead. A consistent read passes through without acquiring it when
// nothing proves freshness (no etcd, and no proof through the apiserver).
// The handle is returned whenever one was acquired, ready or not.
func (l *Lists) acquireStore(ctx context.Context, req listRequest, action paging.Action) (*stores.Handle, verdict, bool) {
	if action == paging.ServeConsistent && !l.stores.ProvesConsistentReads() {
		return nil, pass(ReasonNoProof), false
	}
	h, passReason, ready := l.readyStore(ctx, req)
	if !ready {
		return h, l.notReady(req, h, passReason), false
	}
	return h, verdict{}, true
}

// rejected is the verdict on invalid options or token with our continue
// token, which the apiserver cannot read: its answer, given by listproxy.
func (l *Lists) rejected(d paging.Decision, openErr error) verdict {
	if openErr != nil { // a token of ours that did not open or belong here
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueInvalid)
	}
	var status *apierrors.StatusError
	if !errors.As(d.Err, &status) {
		status = apierrors.NewInternalError(d.Err)
	}
	return reject(Reason(d.Reason), status)
}

// continueSnapshot finds the snapshot our continue token is at, in h's
// store; when there is none to serve (ok false), the verdict instead. A
// newer replica's token is proven with etcd; 410 once etcd compacted it;
// else the apiserver continues the list at the same RV.
func (l *Lists) continueSnapshot(ctx context.Context, req listRequest, h *stores.Handle, token paging.Token) (snap *snapshot.Snapshot, unserved verdict, ok bool) {
	// A token from another replica may be at a revision this one has
	// not seen.
	snap, err := h.StateAt(ctx, token.RV)
	if errors.Is(err, snapshot.ErrCompacted) || errors.Is(err, snapshot.ErrNotRetained) && l.stores.Compacted(ctx, token.RV) {
		// etcd no longer has this revision: the apiserver's 410, with a
		// token that continues from the same key at the latest RV.
		l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueExpired)
		next := paging.NativeContinueLatest(paging.RelativeKey(req.Namespace, token.StartKey))
		return nil, reject(ReasonContinueExpired, paging.ExpiredContinueError(next)), false
	}
	if errors.Is(err, snapshot.ErrNotRetained) {
		return nil, pass(ReasonContinueNotRetained), false
	}
	if err != nil {
		return nil, pass(ReasonSnapshotUnavailable), false
	}
	return snap, verdict{}, true
}

// exactSnapshot finds, for resourceVersion=N with Exact, the retained
// snapshot holding the state at rv (N) in h's store; when there is none to
// serve (ok false), the verdict instead.
func (l *Lists) exactSnapshot(ctx context.Context, h *stores.Handle, rv uint64) (snap *snapshot.Snapshot, unserved verdict, ok bool) {
	// May be newer than the store has seen (a reflector relisting at an
	// RV from its watch through the apiserver).
	snap, err := h.StateAt(ctx, rv)
	if errors.Is(err, snapshot.ErrCompacted) {
		// As the apiserver, whose read of a compacted revision from
		// etcd fails.
		return nil, reject(ReasonExactCompacted, paging.ExpiredResourceVersionError()), false
	}
	if err != nil {
		return nil, pass(ReasonSnapshotUnavailable), false
	}
	return snap, verdict{}, true
}

// smallScope reports whether a consistent LIST of req is small enough for
// the apiserver to answer sooner than an auxiliary watch proves it
// (freshness.Prover.ConsistentIfCheap): the objects of its scope in snap,
// the store's latest snapshot, number at most
// Config.ConsistentPassThroughMaxObjects. Its scope is what its first page
// reads (collection.Request.Select): the request's namespace, or the one
// its field selector pins, or the whole resource; a selection of one name
// is one object. Selectors and limit do not shrink it: the apiserver still
// reads the scope to select, and a first page passed through leaves the
// whole list's pages to the apiserver. Always false when the rule is off
// (0), and for a peer replica's first list of a store (warm start): a list
// passed through is declined to a peer, so it is proven as before.
func (l *Lists) smallScope(req listRequest, snap *snapshot.Snapshot) bool {
	limit := l.cfg.ConsistentPassThroughMaxObjects
	if limit <= 0 || req.peer {
		return false
	}
	sel := req.Select(true)
	if sel.Single {
		return true
	}
	return snap.Count(sel.Namespace) <= limit
}

// unproven is the verdict on a consistent read whose freshness was not
// proven: it passes through, or gets the 429 of FallbackReject when the
// proof ran out of time or failed. Reads that are never proven
// (PrefixUnverified, NoBookmarks) and small reads passed through by choice
// (DirectCheaper) pass through whatever FallbackReject says.
func (l *Lists) unproven(outcome freshness.Outcome) verdict {
	switch outcome {
	case freshness.DirectCheaper, freshness.PrefixUnverified, freshness.NoBookmarks:
		return pass(Reason(outcome))
	}
	if l.cfg.FallbackReject {
		return reject(Reason(outcome), apierrors.NewTooManyRequests("listproxy could not prove the freshness of its snapshot in time; retry", 1))
	}
	return pass(Reason(outcome))
}
