package lists

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Reason says why a LIST was served, passed through or rejected: the
// "reason" label of listproxy_lists_total (docs/metrics.md). The reasons of
// paging.Decide and the outcomes of freshness.Prover.Consistent are
// reasons too, under their own names.
type Reason string

// Reasons for passing a LIST through before it is resolved (parse).
const (
	ReasonMethod    Reason = "method"     // not a GET
	ReasonPath      Reason = "path"       // not a resource collection
	ReasonResource  Reason = "resource"   // not a cached resource
	ReasonQuery     Reason = "query"      // a query parameter listproxy does not understand
	ReasonMediaType Reason = "media_type" // a representation listproxy does not store
	ReasonSelector  Reason = "selector"   // a selector listproxy cannot evaluate
)

// Reasons of resolve and respond besides those of paging.Decide and
// freshness.Prover.
const (
	ReasonNoEtcd              Reason = "no_etcd"                    // consistent read without etcd: pass through
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
	// one), the snapshot and resourceVersion to serve, and its store.
	decision paging.Decision
	token    paging.Token
	digest   [32]byte // of the request's selectors, bound into tokens
	snap     *snapshot.Snapshot
	rv       uint64
	entry    *storeEntry
}

func pass(reason Reason) verdict { return verdict{outcome: outcomePass, reason: reason} }

func reject(reason Reason, status *apierrors.StatusError) verdict {
	return verdict{outcome: outcomeReject, reason: reason, status: status}
}

// resolve maps a parsed LIST onto the semantics table (docs/design.md
// "Semantics table"): one case per row. It opens the request's continue
// token, asks paging.Decide for the row, and finds the snapshot that row
// serves, proving freshness with the store's freshness.Prover where the row
// needs it. It writes nothing.
func (l *Lists) resolve(ctx context.Context, req listRequest) verdict {
	q := req.query
	var token paging.Token
	var openErr error
	ours := paging.IsListproxyToken(q.continueToken)
	digest := selectorDigest(q.labelSelector, q.fieldSelector)
	if ours {
		token, openErr = l.cfg.Keys.Open(q.continueToken)
		if openErr == nil {
			openErr = token.Matches(req.info.GVR.Group, req.info.GVR.Resource, req.col.Namespace, digest)
		}
	}
	d := paging.Decide(paging.Request{
		ResourceVersion:      q.resourceVersion,
		ResourceVersionMatch: q.resourceVersionMatch,
		Limit:                q.limit,
		Continue:             q.continueToken,
		ContinueIsOurs:       ours,
		ContinueErr:          openErr,
	})
	serve := func(entry *storeEntry, snap *snapshot.Snapshot, rv uint64) verdict {
		return verdict{outcome: outcomeServe, reason: Reason(d.Reason), decision: d, token: token, digest: digest, snap: snap, rv: rv, entry: entry}
	}

	switch d.Action {
	case paging.PassThrough:
		// Invalid options or a continue token not ours: the apiserver
		// answers.
		return pass(Reason(d.Reason))

	case paging.Reject:
		// Invalid options or token with our continue token, which the
		// apiserver cannot read: its answer, given by listproxy.
		if ours && openErr != nil {
			l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueInvalid)
		}
		var status *apierrors.StatusError
		if !errors.As(d.Err, &status) {
			status = apierrors.NewInternalError(d.Err)
		}
		return reject(Reason(d.Reason), status)

	case paging.ServeContinue:
		// Our continue token: the snapshot at its RV; a newer replica's
		// token is proven with etcd; 410 once etcd compacted it; else the
		// apiserver continues the list at the same RV.
		entry, refused, ok := l.readyStore(ctx, req)
		if !ok {
			return l.notReady(req, entry, refused)
		}
		// A token from another replica may be at a revision this one has
		// not seen.
		snap, err := l.stateAt(ctx, entry, token.RV)
		if errors.Is(err, snapshot.ErrCompacted) || errors.Is(err, snapshot.ErrNotRetained) && l.compacted(ctx, token.RV) {
			// etcd no longer has this revision: the apiserver's 410, with a
			// token that continues from the same key at the latest RV.
			l.cfg.ContinueMetrics.ObserveContinue(paging.ContinueExpired)
			next := paging.NativeContinueLatest(paging.RelativeKey(req.col.Namespace, token.StartKey))
			return reject(ReasonContinueExpired, paging.ExpiredContinueError(next))
		}
		if errors.Is(err, snapshot.ErrNotRetained) {
			return pass(ReasonContinueNotRetained)
		}
		if err != nil {
			return pass(ReasonSnapshotUnavailable)
		}
		return serve(entry, snap, token.RV)

	case paging.ServeConsistent:
		// resourceVersion unset: the latest snapshot once freshness is
		// proven; without etcd, or on timeout, pass through (or 429).
		if l.cfg.Freshness == nil {
			return pass(ReasonNoEtcd)
		}
		entry, refused, ok := l.readyStore(ctx, req)
		if !ok {
			return l.notReady(req, entry, refused)
		}
		snap, rv, outcome := entry.prover.Consistent(ctx)
		if snap == nil {
			if l.cfg.FallbackReject && outcome != freshness.PrefixUnverified {
				return reject(Reason(outcome), apierrors.NewTooManyRequests("listproxy could not prove the freshness of its snapshot in time; retry", 1))
			}
			return pass(Reason(outcome))
		}
		return serve(entry, snap, rv)

	case paging.ServeLatest:
		// resourceVersion="0": the latest snapshot, no wait.
		entry, refused, ok := l.readyStore(ctx, req)
		if !ok {
			return l.notReady(req, entry, refused)
		}
		snap, rv, err := entry.store.Latest()
		if err != nil {
			return pass(ReasonSnapshotUnavailable)
		}
		return serve(entry, snap, rv)

	case paging.ServeNotOlderThan:
		// resourceVersion=N, NotOlderThan: the latest snapshot once it
		// reaches N; 504 when etcd itself is behind N; else pass through.
		entry, refused, ok := l.readyStore(ctx, req)
		if !ok {
			return l.notReady(req, entry, refused)
		}
		snap, rv, err := entry.prover.NotOlderThan(ctx, d.RV, l.cfg.NotOlderThanWait)
		var tooLarge *freshness.TooLargeError
		if errors.As(err, &tooLarge) {
			return reject(ReasonTooLargeRV, paging.TooLargeResourceVersionError(tooLarge.RV, tooLarge.Current))
		}
		if snap == nil {
			return pass(ReasonNotOlderThanTimeout)
		}
		return serve(entry, snap, rv)

	case paging.ServeExact:
		// resourceVersion=N, Exact: the retained snapshot holding the
		// state at N.
		entry, refused, ok := l.readyStore(ctx, req)
		if !ok {
			return l.notReady(req, entry, refused)
		}
		// May be newer than the store has seen (a reflector relisting at an
		// RV from its watch through the apiserver).
		snap, err := l.stateAt(ctx, entry, d.RV)
		if errors.Is(err, snapshot.ErrCompacted) {
			// As the apiserver, whose read of a compacted revision from
			// etcd fails.
			return reject(ReasonExactCompacted, paging.ExpiredResourceVersionError())
		}
		if err != nil {
			return pass(ReasonSnapshotUnavailable)
		}
		return serve(entry, snap, d.RV)
	}
	return pass(Reason(d.Reason))
}

// stateAt returns the snapshot holding the state at rv: a retained one, or,
// for an rv newer than the store has seen, the state at the last change
// before it as etcd proves (Prover.At). Compaction known to the Checker is
// applied first, so a compacted rv yields snapshot.ErrCompacted.
func (l *Lists) stateAt(ctx context.Context, entry *storeEntry, rv uint64) (*snapshot.Snapshot, error) {
	l.applyCompaction(entry.store)
	snap, err := entry.store.At(rv)
	if errors.Is(err, snapshot.ErrNotRetained) && rv > entry.store.Progress() {
		snap, err = entry.prover.At(ctx, rv)
	}
	return snap, err
}
