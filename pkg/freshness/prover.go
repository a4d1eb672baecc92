package freshness

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Outcome is how proving a consistent read ended: the "outcome" label of
// listproxy_freshness_consistent_reads_total.
type Outcome string

// Outcomes of Prover.Consistent.
const (
	Served Outcome = "served"
	// ProbeFailed: etcd's current revision could not be read, or the
	// resource's prefix could not be verified (yet).
	ProbeFailed Outcome = "probe_failed"
	// ProgressTimeout: etcd did not report progress up to the revision in
	// time.
	ProgressTimeout Outcome = "progress_timeout"
	// SnapshotTimeout: the store did not reach the proven change in time.
	SnapshotTimeout Outcome = "snapshot_timeout"
	// PrefixUnverified: the resource's etcd prefix disagreed with the
	// snapshot, the resource is empty (which proves nothing), or it is an
	// aggregated API (not in this etcd); its consistent reads pass through.
	PrefixUnverified Outcome = "prefix_unverified"
	// NoBookmarks: proving through the apiserver, the resource's watches
	// carry no bookmarks and its own feed did not reach the probed
	// revision at once.
	NoBookmarks Outcome = "no_bookmarks"
	// DirectCheaper: proving through the apiserver, the caller said the
	// read is small (ConsistentIfCheap) and the store's own feed did not
	// reach the probed revision within the fast path's wait; the
	// apiserver answers a small read sooner than an auxiliary watch
	// proves it, so none was opened. A choice, not a failure: the read
	// passes through.
	DirectCheaper Outcome = "direct_cheaper"
)

// DefaultProofTimeout bounds one proof when ProverConfig.Timeout is 0: the
// apiserver's watch cache waits as long for a consistent read.
const DefaultProofTimeout = 3 * time.Second

// ProverConfig configures one store's Prover.
type ProverConfig struct {
	// Checker reads etcd. Without it, APIServer proves consistent reads
	// through the apiserver (managed clusters without etcd access); with
	// neither, nothing can be proven.
	Checker *Checker
	// APIServer proves consistent reads through the apiserver: without a
	// Checker every one, with a Checker those of an empty resource, whose
	// etcd prefix cannot be verified, and Unchanged; Path is the
	// store's cluster-wide collection path (e.g. /api/v1/pods) and
	// Namespaced says whether the resource is namespaced.
	APIServer  *APIServer
	Path       string
	Namespaced bool
	// Store is the apiserver-fed store whose freshness is proven.
	Store *snapshot.Store
	// Resource names the store's resource in logs and metrics.
	Resource string
	// Prefix is the resource's etcd key prefix (with a trailing "/").
	Prefix string
	// Aggregated marks a resource served by another server through an
	// APIService: it is not in this etcd, and nothing is proven for it.
	Aggregated bool
	// Timeout bounds one proof, including a first verification of the
	// prefix; 0 selects DefaultProofTimeout.
	Timeout time.Duration
	// Metrics counts consistent-read outcomes; nil records nothing.
	Metrics *ReadMetrics
	// Behind, if set, is called when the store did not reach in time a
	// revision etcd proved it must hold, with that revision and when it was
	// proven (the caller may restart a lagging watch).
	Behind func(rv uint64, proven time.Time)
}

// Prover proves what one store must hold to answer a read as the apiserver
// would, and waits until it does (docs/design.md "Freshness"). It is
// shared by every read of the store; NewProver chooses, once, how it
// proves: with etcd (ProverConfig.Checker), through the apiserver alone
// (ProverConfig.APIServer, "Freshness without etcd"), or not at all.
type Prover interface {
	// Consistent proves a consistent read (resourceVersion unset): probe
	// the current revision R (with etcd, etcd's; else the resource's
	// through the apiserver), learn the last change L ≤ R of the resource,
	// wait for the store to hold L, and serve at max(snapshot RV, R). A
	// nil snapshot means freshness was not proven; the Outcome says why.
	Consistent(ctx context.Context) (*snapshot.Snapshot, uint64, Outcome)
	// ConsistentIfCheap is Consistent for a read whose caller knows how
	// large its answer is. small says the apiserver answers it in
	// milliseconds: then, proving through the apiserver, a read the fast
	// path (the store's own feed within APIServerConfig.FastWait) does not
	// prove returns at once with no snapshot and DirectCheaper, opening no
	// auxiliary watch, whose bookmark can take 2.25 s; a quiet store (no
	// change within quietAfter fast-path waits) that no state probe
	// proves returns DirectCheaper without even probing. With etcd, whose
	// proofs take milliseconds, small changes nothing. Like Consistent, it
	// never returns a snapshot it did not prove.
	ConsistentIfCheap(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome)
	// NotOlderThan returns a snapshot at resourceVersion ≥ minRV, waiting
	// at most wait. A store already there answers at once. Otherwise, with
	// etcd, the last change of the resource at or before minRV is all the
	// store must hold (the read is then served at minRV); when etcd itself
	// has not reached minRV in time, it returns a *TooLargeError. Through
	// the apiserver, the store's own feed or an auxiliary watch tells the
	// last change at or before minRV likewise, or, for a small store, the
	// state probe shows its snapshot at a revision ≥ minRV (served there);
	// with no proof at all the store waits for minRV. A nil snapshot and
	// nil error mean the read must pass through so that the apiserver
	// decides, as for a minRV beyond etcd's revisions.
	NotOlderThan(ctx context.Context, minRV uint64, wait time.Duration) (*snapshot.Snapshot, uint64, error)
	// At returns the state at rv for a store that has not yet seen rv (a
	// continue token another replica issued): etcd, or without it the
	// store's own feed or an auxiliary watch, says which change of the
	// resource was the last at or before rv, and once the store holds it,
	// the snapshot at that change is the state at rv. It fails with
	// snapshot.ErrNotRetained when that cannot be proven in time.
	At(ctx context.Context, rv uint64) (*snapshot.Snapshot, error)
	// Holds reports whether a watch from rv, a revision newer than the
	// store has seen (a consistent read's), may be served from the store's
	// feed: whether every change after rv will reach it. Unlike At it
	// needs no snapshot at rv, so a compacted rv is no obstacle. False
	// when it cannot be shown: no proof, the prefix not verified, the
	// probe failing, or rv beyond etcd's (or the apiserver's) revision.
	Holds(ctx context.Context, rv uint64) bool
	// Unchanged reports whether the resource had no change after from up
	// to to (from < to), so that a watch from from may be served from a
	// feed whose changes start after to (a re-watch from before the
	// store's first list: a client of another replica, or of this one
	// before its store relisted). An auxiliary watch through the apiserver
	// from from shows it: its first event is beyond to, or a bookmark at
	// or beyond to comes first; with etcd too, since etcd's tracker of the
	// resource starts at the store's list. False when it cannot be shown
	// in time: from has left the apiserver's watch history, the watch
	// carries no bookmark, or there is no proof through the apiserver.
	Unchanged(ctx context.Context, from, to uint64) bool
	// Missing reports whether the store lacks a change of the resource
	// that etcd holds: it reads etcd's current revision, learns the last
	// change at or before it, and waits up to wait for the store to reach
	// it. It returns false when nothing can be proven (no etcd, the prefix
	// not verified, etcd not answering within the proof timeout) or when
	// ctx ends first.
	Missing(ctx context.Context, wait time.Duration) bool
}

// NewProver returns the prover of cfg.Store, chosen once from cfg: with a
// Checker, etcdProver (whose tracker, started on first use, stops when
// ctx is done); else, with an APIServer, apiserverProver (which shares its
// resource's probes and auxiliary watches until ctx is done), except for
// an aggregated resource; else unprovenProver.
func NewProver(ctx context.Context, cfg ProverConfig) Prover {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultProofTimeout
	}
	base := proverBase{cfg: cfg}
	switch {
	case cfg.Checker != nil:
		return &etcdProver{proverBase: base, ctx: ctx}
	case cfg.APIServer != nil && !cfg.Aggregated:
		return newAPIServerProver(ctx, base)
	default:
		return unprovenProver{base}
	}
}

// proverBase is what every Prover implementation shares: the config, the
// frames of its reads (bounds, metrics, the revisions nothing proves) and
// the wait every proof ends with (holdAndKeep). An implementation supplies
// only its proof.
type proverBase struct {
	cfg ProverConfig
}

// consistentRead is the frame of ConsistentIfCheap: consistent, bounded by
// the proof timeout, with its outcome and duration recorded.
func (b *proverBase) consistentRead(ctx context.Context, small bool, consistent func(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome)) (*snapshot.Snapshot, uint64, Outcome) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	snap, rv, outcome := consistent(ctx, small)
	b.cfg.Metrics.observe(b.cfg.Resource, outcome, time.Since(start))
	return snap, rv, outcome
}

// notOlderThan is the frame of NotOlderThan: bounded by wait, a store
// already at minRV answers at once, a minRV beyond etcd's revisions passes
// through; else prove answers.
func (b *proverBase) notOlderThan(ctx context.Context, minRV uint64, wait time.Duration, prove func(ctx context.Context, minRV uint64) (*snapshot.Snapshot, uint64, error)) (*snapshot.Snapshot, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if snap, rv, err := b.cfg.Store.Latest(); err == nil && rv >= minRV {
		return snap, rv, nil
	}
	if _, ok := etcdRevision(minRV); !ok {
		return nil, 0, nil
	}
	return prove(ctx, minRV)
}

// waitFor is NotOlderThan without a proof: the store must reach minRV
// within ctx, else the read passes through (nil snapshot, nil error).
func (b *proverBase) waitFor(ctx context.Context, minRV uint64) (*snapshot.Snapshot, uint64, error) {
	snap, rv, err := b.cfg.Store.WaitFor(ctx, minRV)
	if err != nil {
		return nil, 0, nil
	}
	return snap, rv, nil
}

// at is the frame of At: lastChange, bounded by the proof timeout, tells
// the last change at or before rv, which the store then holds; an rv beyond
// etcd's revisions, or a lastChange that fails, is not retained.
func (b *proverBase) at(ctx context.Context, rv uint64, lastChange func(ctx context.Context, rv uint64) (uint64, error)) (*snapshot.Snapshot, error) {
	if _, ok := etcdRevision(rv); !ok {
		return nil, snapshot.ErrNotRetained
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	last, err := lastChange(ctx, rv)
	if err != nil {
		return nil, snapshot.ErrNotRetained
	}
	return b.cfg.Store.At(last)
}

// holds is the frame of Holds: holds, bounded by the proof timeout; an rv
// beyond etcd's revisions is never held.
func (b *proverBase) holds(ctx context.Context, rv uint64, holds func(ctx context.Context, rv uint64) bool) bool {
	if _, ok := etcdRevision(rv); !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	return holds(ctx, rv)
}

// holdAndKeep is the wait both proofs end with: the resource had no change
// in (last, rev], so once the store holds last it holds the state at rev,
// and it keeps rev as its progress (the client's next request at rev — a
// watch from the list's resourceVersion, a read not older than it — finds
// the store there). It returns the store's latest snapshot and its
// resourceVersion; a store that does not reach last in time is reported to
// Behind (errStoreBehind).
func (b *proverBase) holdAndKeep(ctx context.Context, last, rev uint64) (*snapshot.Snapshot, uint64, error) {
	proven := time.Now()
	snap, rv, err := b.cfg.Store.WaitFor(ctx, last)
	if err != nil {
		if b.cfg.Behind != nil {
			b.cfg.Behind(last, proven)
		}
		return nil, 0, errStoreBehind
	}
	b.cfg.Store.AdvanceProgress(last, rev)
	return snap, rv, nil
}

// unprovenProver is the Prover of a store nothing proves: no etcd and no
// proof through the apiserver (--consistent-proof=off, static stores), or
// an aggregated resource without etcd. Its consistent reads pass through
// (ProbeFailed; PrefixUnverified for an aggregated resource), its
// NotOlderThan reads wait for the store, and nothing ahead of the store is
// held or retained.
type unprovenProver struct {
	proverBase
}

func (p unprovenProver) Consistent(ctx context.Context) (*snapshot.Snapshot, uint64, Outcome) {
	return p.ConsistentIfCheap(ctx, false)
}

func (p unprovenProver) ConsistentIfCheap(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	return p.consistentRead(ctx, small, func(context.Context, bool) (*snapshot.Snapshot, uint64, Outcome) {
		if p.cfg.Aggregated {
			return nil, 0, PrefixUnverified
		}
		return nil, 0, ProbeFailed
	})
}

func (p unprovenProver) NotOlderThan(ctx context.Context, minRV uint64, wait time.Duration) (*snapshot.Snapshot, uint64, error) {
	return p.notOlderThan(ctx, minRV, wait, p.waitFor)
}

func (p unprovenProver) At(context.Context, uint64) (*snapshot.Snapshot, error) {
	return nil, snapshot.ErrNotRetained
}

func (unprovenProver) Holds(context.Context, uint64) bool { return false }

func (unprovenProver) Unchanged(_ context.Context, from, to uint64) bool { return from == to }

func (unprovenProver) Missing(context.Context, time.Duration) bool { return false }

// TooLargeError reports that etcd itself had not reached a requested
// resourceVersion in time: the apiserver's 504 "Too large resource version".
type TooLargeError struct {
	RV, Current uint64
}

func (e *TooLargeError) Error() string {
	return "resource version too large"
}

// etcdRevision converts a requested resourceVersion to an etcd revision.
// Revisions are int64: a larger rv (the caller's, parsed as uint64 as the
// apiserver does) is no revision etcd can reach, and ok is false.
func etcdRevision(rv uint64) (rev int64, ok bool) {
	if rv > math.MaxInt64 {
		return 0, false
	}
	return int64(rv), true
}

// errStoreBehind: the store did not reach the proven change in time.
var errStoreBehind = errors.New("store behind a proven revision")
