package freshness

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"k8s.io/klog/v2"

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

// prefixRetryInterval spaces attempts to verify a store's etcd prefix after
// a transient failure. Not measured.
const prefixRetryInterval = 5 * time.Second

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

// Prover proves, with etcd, what one store must hold to answer a read as the
// apiserver would, and waits until it does (docs/design.md "Freshness"). It
// is shared by every read of the store; create it with NewProver.
type Prover struct {
	cfg ProverConfig
	ctx context.Context // ends the tracker
	// remote proves through the apiserver; nil with a Checker or without
	// ProverConfig.APIServer.
	remote *apiserverProof

	mu sync.Mutex // guards fallback, tracker, wrong, empty and tried
	// fallback proves through the apiserver, with a Checker, the reads of
	// an empty resource, whose prefix cannot be verified, and Unchanged;
	// made on first use (throughAPIServer).
	fallback *apiserverProof
	tracker  *Tracker  // nil until the prefix was verified
	wrong    bool      // the prefix disagreed with the snapshot
	empty    bool      // the last attempt found the store empty
	tried    time.Time // last attempt to verify the prefix
}

// NewProver returns the prover of cfg.Store. Its etcd tracker, started on
// first use, stops when ctx is done.
func NewProver(ctx context.Context, cfg ProverConfig) *Prover {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultProofTimeout
	}
	p := &Prover{cfg: cfg, ctx: ctx}
	if cfg.Checker == nil && cfg.APIServer != nil && !cfg.Aggregated {
		p.remote = newAPIServerProof(ctx, cfg.APIServer, cfg.Store, cfg.Resource, cfg.Path, cfg.Namespaced)
	}
	return p
}

// Consistent proves a consistent read (resourceVersion unset): probe etcd's
// current revision E, learn the last change L ≤ E under the resource's
// prefix, wait for the store to hold L, and serve at max(snapshot RV, E). A
// nil snapshot means freshness was not proven; the Outcome says why.
func (p *Prover) Consistent(ctx context.Context) (*snapshot.Snapshot, uint64, Outcome) {
	return p.ConsistentIfCheap(ctx, false)
}

// ConsistentIfCheap is Consistent for a read whose caller knows how large
// its answer is. small says the apiserver answers it in milliseconds: then,
// proving through the apiserver, a read the fast path (the store's own
// feed within APIServerConfig.FastWait) does not prove returns at once with
// no snapshot and DirectCheaper, opening no auxiliary watch, whose bookmark
// can take 2.25 s; a quiet store (no change within quietAfter fast-path
// waits) that no state probe proves returns DirectCheaper without even
// probing. With etcd, whose proofs take milliseconds, small changes
// nothing. Like Consistent, it never returns a snapshot it did not prove.
func (p *Prover) ConsistentIfCheap(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	snap, rv, outcome := p.consistent(ctx, small)
	p.cfg.Metrics.observe(p.cfg.Resource, outcome, time.Since(start))
	return snap, rv, outcome
}

func (p *Prover) consistent(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	if p.remote != nil {
		return p.consistentThroughAPIServer(ctx, p.remote, small)
	}
	t, wrong := p.verifiedTracker(ctx)
	switch {
	case wrong:
		if f := p.fallbackProof(); f != nil {
			return p.consistentThroughAPIServer(ctx, f, small)
		}
		return nil, 0, PrefixUnverified
	case t == nil:
		// etcd could not be read to verify the prefix (yet): a failed probe.
		return nil, 0, ProbeFailed
	}
	etcdRev, err := p.cfg.Checker.CurrentRevision(ctx)
	if err != nil {
		return nil, 0, ProbeFailed
	}
	snap, rv, _, err := p.proveAndWait(ctx, t, etcdRev)
	switch {
	case errors.Is(err, errNoProgress):
		return nil, 0, ProgressTimeout
	case err != nil:
		return nil, 0, SnapshotTimeout
	}
	return snap, max(rv, uint64(etcdRev)), Served
}

// fallbackProof returns the proof through the apiserver for a resource
// whose etcd prefix cannot be verified because it is empty; nil for any
// other (a prefix that disagrees with the snapshot is a configuration to
// fix, whose reads keep passing through and counting as fallbacks) and
// as throughAPIServer.
func (p *Prover) fallbackProof() *apiserverProof {
	p.mu.Lock()
	empty := p.empty && !p.wrong
	p.mu.Unlock()
	if !empty {
		return nil
	}
	return p.throughAPIServer()
}

// throughAPIServer returns the resource's proof through the apiserver:
// remote without a Checker, else one made on first use; nil without
// ProverConfig.APIServer and for an aggregated resource, which is in
// neither this etcd nor the apiserver's watch cache.
func (p *Prover) throughAPIServer() *apiserverProof {
	if p.remote != nil {
		return p.remote
	}
	if p.cfg.APIServer == nil || p.cfg.Aggregated {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fallback == nil {
		p.fallback = newAPIServerProof(p.ctx, p.cfg.APIServer, p.cfg.Store, p.cfg.Resource, p.cfg.Path, p.cfg.Namespaced)
	}
	return p.fallback
}

// consistentThroughAPIServer is Consistent through the apiserver, with
// proof: probe the resource's current revision R through the apiserver,
// learn the last change L ≤ R from the store's own feed or an auxiliary
// watch, wait for the store to hold L, and serve at max(snapshot RV, R).
// A small store's probe is the state probe, which proves the read at once
// when it shows the store's snapshot (provenByState). A small read
// (ConsistentIfCheap) opens no auxiliary watch.
func (p *Prover) consistentThroughAPIServer(ctx context.Context, proof *apiserverProof, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	var r uint64
	byState := p.provableByState(proof)
	if small && !byState && !p.cfg.Store.ChangedWithin(quietAfter*proof.shared.api.cfg.FastWait) {
		// A quiet store's feed is unlikely to prove the read within the
		// fast path's wait, and the apiserver answers a small read in
		// milliseconds: pass it through without probing.
		proof.shared.api.metrics.proof(proof.shared.resource, pathDirectCheaper)
		return nil, 0, DirectCheaper
	}
	if byState {
		snap, rv, st, err := p.provenByState(ctx, proof)
		switch {
		case err == nil:
			return snap, rv, Served
		case errors.Is(err, errStateDiffers):
			r = st.rev // the store is behind: it must reach R
		}
		// A failed state probe (an error, an answer too large to read)
		// leaves the read to the probe by name.
	}
	if r == 0 {
		rev, _, err := proof.shared.probes.current(ctx)
		if err != nil {
			return nil, 0, ProbeFailed
		}
		r = uint64(rev)
	}
	snap, rv, _, err := p.proveThroughAPIServerAndWait(ctx, proof, r, !small)
	switch {
	case errors.Is(err, errFastPathOnly):
		return nil, 0, DirectCheaper
	case errors.Is(err, errNoBookmarks):
		return nil, 0, NoBookmarks
	case errors.Is(err, errStoreBehind):
		return nil, 0, SnapshotTimeout
	case err != nil:
		return nil, 0, ProgressTimeout
	}
	return snap, max(rv, r), Served
}

// provableByState reports whether the store is small enough for the state
// probe (APIServerConfig.StateProofMaxObjects) and synced.
func (p *Prover) provableByState(proof *apiserverProof) bool {
	snap, _, err := p.cfg.Store.Latest()
	return err == nil && snap.Len() <= proof.shared.api.cfg.StateProofMaxObjects
}

// provenByState proves a consistent read with the state probe: a
// consistent LIST of the resource's metadata at R (sent after the read
// arrived) holding exactly the objects of the store's snapshot, taken after
// the answer, at the same resourceVersions shows that the snapshot, at its
// own S, is the state at max(S, R). The changes up to R that the store's
// feed may yet deliver cancel out (a watch subscribed at R skips them), so
// the store's progress is not raised: it does not hold them. When the
// store is not synced or the state differs it returns errStateDiffers and
// the state read; any other error when the probe failed.
func (p *Prover) provenByState(ctx context.Context, proof *apiserverProof) (*snapshot.Snapshot, uint64, *resourceState, error) {
	st, _, err := proof.shared.states.current(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	snap, rv, err := p.cfg.Store.Latest()
	if err != nil || !st.is(snap) {
		return nil, 0, st, errStateDiffers
	}
	proof.shared.api.metrics.proof(proof.shared.resource, pathState)
	return snap, max(rv, st.rev), st, nil
}

// liveFeed is how recently a store's feed must have shown a bookmark, a
// change or a relist for a watch ahead of it to be served on the probe
// alone: the
// apiserver sends a watch of a watch-cached resource a bookmark about
// every minute. Not measured.
const liveFeed = 90 * time.Second

// quietAfter is how many fast-path waits (APIServerConfig.FastWait) since
// a store's last change make it quiet for ConsistentIfCheap: a resource
// written 20 times a second shows a change within 200 ms 98% of the time,
// and then its next one within the 50 ms wait 63% of the time; one written
// once a second shows none 82% of the time, and its next within the wait
// 5% of the time. Not measured beyond that arithmetic.
const quietAfter = 4

// proveThroughAPIServerAndWait is proveAndWait without etcd: the store's
// own feed or an auxiliary watch tells the last change L of the resource at
// or before rev (a watch stream covering rev shows every change up to it,
// whatever rev is), then the store must hold L. It returns the store's
// latest snapshot, its resourceVersion, and L. A store that does not reach
// L in time is reported to Behind. An rev no watch reaches in time (beyond
// the apiserver's revision) is not proven. Without orAux only the fast path
// may prove it: errFastPathOnly when it does not.
func (p *Prover) proveThroughAPIServerAndWait(ctx context.Context, proof *apiserverProof, rev uint64, orAux bool) (*snapshot.Snapshot, uint64, uint64, error) {
	last, err := proof.prove(ctx, rev, orAux)
	if err != nil {
		return nil, 0, 0, err
	}
	snap, rv, err := p.holdAndKeep(ctx, last, rev)
	if err != nil {
		return nil, 0, 0, err
	}
	return snap, rv, last, nil
}

// Unchanged reports whether the resource had no change after from up to
// to (from < to), so that a watch from from may be served from a feed
// whose changes start after to (a re-watch from before the store's first
// list: a client of another replica, or of this one before its store
// relisted). An auxiliary watch through the apiserver from from shows it:
// its first event is beyond to, or a bookmark at or beyond to comes first;
// with etcd too, since etcd's tracker of the resource starts at the
// store's list. False when it cannot be shown in time: from has left the
// apiserver's watch history, the watch carries no bookmark, or there is
// no proof through the apiserver.
func (p *Prover) Unchanged(ctx context.Context, from, to uint64) bool {
	if from >= to {
		return from == to
	}
	proof := p.throughAPIServer()
	if proof == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return proof.unchanged(ctx, from, to)
}

// ProvesConsistentReads reports whether the prover can prove consistent
// reads at all: with etcd, or through the apiserver.
func (p *Prover) ProvesConsistentReads() bool {
	return p.cfg.Checker != nil || p.remote != nil
}

// At returns the state at rv for a store that has not yet seen rv (a
// continue token another replica issued): etcd says which change of the
// resource was the last at or before rv, and once the store holds it, the
// snapshot at that change is the state at rv. Without etcd the store's own
// feed or an auxiliary watch says it (proveThroughAPIServerAndWait). It
// fails with snapshot.ErrNotRetained when that cannot be proven in time.
func (p *Prover) At(ctx context.Context, rv uint64) (*snapshot.Snapshot, error) {
	rev, ok := etcdRevision(rv)
	if !ok {
		return nil, snapshot.ErrNotRetained
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if p.remote != nil {
		_, _, last, err := p.proveThroughAPIServerAndWait(ctx, p.remote, rv, true)
		if err != nil {
			return nil, snapshot.ErrNotRetained
		}
		return p.cfg.Store.At(last)
	}
	if p.cfg.Checker == nil {
		return nil, snapshot.ErrNotRetained
	}
	t, _ := p.verifiedTracker(ctx)
	if t == nil {
		return nil, snapshot.ErrNotRetained
	}
	_, _, last, err := p.proveAndWait(ctx, t, rev)
	if err != nil {
		return nil, snapshot.ErrNotRetained
	}
	return p.cfg.Store.At(last)
}

// Holds reports whether a watch from rv, a revision newer than the store
// has seen (a consistent read's), may be served from the store's feed:
// whether every change after rv will reach it. With etcd, etcd tells the
// last change at or before rv and the store reaches it within the proof
// timeout. Without etcd, it is enough that rv is at or below the
// resource's revision, which the probe by name reads in one round trip,
// provided the store's feed is live (a bookmark, a change or a relist
// within liveFeed): the store's watch then delivers every change after rv, in
// order, and a cursor subscribed at rv skips the changes up to rv that
// arrive later (snapshot.Store.Subscribe). A feed silent for longer (a
// resource without bookmarks, or a watch that may be stuck) must reach
// the last change at or before rv first, as a read at rv, so that a stuck
// store is reported behind rather than given watchers. Unlike At it needs no snapshot at rv, so a
// compacted rv is no obstacle. False when it cannot be shown: no proof,
// the prefix not verified, the probe failing, or rv beyond etcd's (or the
// apiserver's) revision.
func (p *Prover) Holds(ctx context.Context, rv uint64) bool {
	rev, ok := etcdRevision(rv)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if p.remote != nil {
		return p.holdsThroughAPIServer(ctx, p.remote, rv)
	}
	if p.cfg.Checker == nil {
		return false
	}
	t, _ := p.verifiedTracker(ctx)
	if t == nil {
		// An empty store's prefix cannot be verified: its consistent
		// reads are proven through the apiserver, and so are its watches.
		if proof := p.fallbackProof(); proof != nil {
			return p.holdsThroughAPIServer(ctx, proof, rv)
		}
		return false
	}
	_, _, _, err := p.proveAndWait(ctx, t, rev)
	return err == nil
}

// holdsThroughAPIServer is Holds through the apiserver: rv at or below a
// revision a probe of the resource showed (the one that proved the read
// whose resourceVersion rv is, or one sent now), the store's feed live.
func (p *Prover) holdsThroughAPIServer(ctx context.Context, proof *apiserverProof, rv uint64) bool {
	if p.cfg.Store.FedWithin(liveFeed) {
		if rv <= proof.shared.reached.Load() {
			return true
		}
		current, _, err := proof.shared.probes.current(ctx)
		if err == nil {
			return uint64(current) >= rv
		}
	}
	// A feed silent for longer, or a probe that failed: the store must
	// reach the last change at or before rv, as a read at rv, or be
	// reported behind (its watch restarted when it stays so).
	_, _, _, err := p.proveThroughAPIServerAndWait(ctx, proof, rv, true)
	return err == nil
}

// Missing reports whether the store lacks a change of the resource that
// etcd holds: it reads etcd's current revision, learns the last change at or
// before it, and waits up to wait for the store to reach it. It returns false
// when nothing can be proven (no etcd, the prefix not verified, etcd not
// answering within the proof timeout) or when ctx ends first.
func (p *Prover) Missing(ctx context.Context, wait time.Duration) bool {
	if p.cfg.Checker == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	t, _ := p.verifiedTracker(pctx)
	if t == nil {
		return false
	}
	rev, err := p.cfg.Checker.CurrentRevision(pctx)
	if err != nil {
		return false
	}
	last, err := t.LastChangeAtOrBefore(pctx, rev)
	if err != nil {
		return false
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	_, _, err = p.cfg.Store.WaitFor(wctx, uint64(last))
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// TooLargeError reports that etcd itself had not reached a requested
// resourceVersion in time: the apiserver's 504 "Too large resource version".
type TooLargeError struct {
	RV, Current uint64
}

func (e *TooLargeError) Error() string {
	return "resource version too large"
}

// NotOlderThan returns a snapshot at resourceVersion ≥ minRV, waiting at
// most wait. A store already there answers at once. Otherwise, with etcd,
// the last change of the resource at or before minRV is all the store must
// hold (the read is then served at minRV); when etcd itself has not reached
// minRV in time, it returns a *TooLargeError. Through the apiserver, the
// store's own feed or an auxiliary watch tells the last change at or
// before minRV likewise, or, for a small store, the state probe shows its
// snapshot at a revision ≥ minRV (served there); with no proof at all the
// store waits for minRV. A nil snapshot and nil error mean the read must
// pass through so that the apiserver decides, as for a minRV beyond etcd's
// revisions.
func (p *Prover) NotOlderThan(ctx context.Context, minRV uint64, wait time.Duration) (*snapshot.Snapshot, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if snap, rv, err := p.cfg.Store.Latest(); err == nil && rv >= minRV {
		return snap, rv, nil
	}
	rev, ok := etcdRevision(minRV)
	if !ok {
		return nil, 0, nil
	}
	if p.remote != nil {
		// A small store's state probe proves at once the snapshot it
		// shows at R: enough when R ≥ minRV (a state-proven read's
		// resourceVersion, which the store's progress has not reached).
		if p.provableByState(p.remote) {
			if snap, rv, _, err := p.provenByState(ctx, p.remote); err == nil && rv >= minRV {
				return snap, rv, nil
			}
		}
		snap, rv, _, err := p.proveThroughAPIServerAndWait(ctx, p.remote, minRV, true)
		if err != nil {
			return nil, 0, nil
		}
		return snap, max(rv, minRV), nil
	}
	t, _ := p.verifiedTracker(ctx)
	if t == nil {
		snap, rv, err := p.cfg.Store.WaitFor(ctx, minRV)
		if err != nil {
			return nil, 0, nil
		}
		return snap, rv, nil
	}
	snap, rv, _, err := p.proveAndWait(ctx, t, rev)
	switch {
	case errors.Is(err, errNoProgress):
		if ctx.Err() == nil {
			return nil, 0, nil // etcd trouble: let the apiserver answer
		}
		probeCtx, cancelProbe := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancelProbe()
		current, err := p.cfg.Checker.CurrentRevision(probeCtx)
		if err != nil || uint64(current) >= minRV {
			return nil, 0, nil
		}
		return nil, 0, &TooLargeError{RV: minRV, Current: uint64(current)}
	case err != nil:
		return nil, 0, nil
	}
	return snap, max(rv, minRV), nil
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

var (
	// errNoProgress: etcd did not tell the last change at or before the
	// revision in time.
	errNoProgress = errors.New("etcd progress not reported in time")
	// errStoreBehind: the store did not reach the proven change in time.
	errStoreBehind = errors.New("store behind a proven revision")
)

// proveAndWait is the one prove-and-wait every read uses: learn from etcd
// the last change L of the resource at or before rev (a revision etcd has
// reached or must reach), then wait until the store holds L. It returns the
// store's latest snapshot, its resourceVersion, and L. A store that does not
// reach L in time is reported to Behind.
func (p *Prover) proveAndWait(ctx context.Context, t *Tracker, rev int64) (*snapshot.Snapshot, uint64, uint64, error) {
	l, err := t.LastChangeAtOrBefore(ctx, rev)
	if err != nil {
		return nil, 0, 0, errNoProgress
	}
	last := uint64(l)
	snap, rv, err := p.holdAndKeep(ctx, last, uint64(rev))
	if err != nil {
		return nil, 0, 0, err
	}
	return snap, rv, last, nil
}

// holdAndKeep is the wait both proofs end with: the resource had no change
// in (last, rev], so once the store holds last it holds the state at rev,
// and it keeps rev as its progress (the client's next request at rev — a
// watch from the list's resourceVersion, a read not older than it — finds
// the store there). It returns the store's latest snapshot and its
// resourceVersion; a store that does not reach last in time is reported to
// Behind (errStoreBehind).
func (p *Prover) holdAndKeep(ctx context.Context, last, rev uint64) (*snapshot.Snapshot, uint64, error) {
	proven := time.Now()
	snap, rv, err := p.cfg.Store.WaitFor(ctx, last)
	if err != nil {
		if p.cfg.Behind != nil {
			p.cfg.Behind(last, proven)
		}
		return nil, 0, errStoreBehind
	}
	p.cfg.Store.AdvanceProgress(last, rev)
	return snap, rv, nil
}

// verifiedTracker starts the store's tracker on first use and verifies its
// prefix (Checker.VerifyPrefix): at the snapshot's resourceVersion the prefix
// must hold as many keys as the snapshot objects, with the same first and
// last keys at the same mod revisions, else the prefix is wrong and reads of
// the resource cannot be proven (wrong is then true, for good). An empty
// store proves nothing: wrong is true until it holds an object, when the
// prefix is verified at once. An aggregated API is never verified. It
// returns nil and false while the prefix could not be verified (no etcd,
// etcd unreachable within ctx, or the snapshot's revision compacted).
// Callers bound ctx: other callers wait on mu meanwhile.
func (p *Prover) verifiedTracker(ctx context.Context) (t *Tracker, wrong bool) {
	if p.cfg.Aggregated {
		return nil, true
	}
	if p.cfg.Checker == nil {
		return nil, false // no etcd: nothing can be proven
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tracker != nil || p.wrong {
		return p.tracker, p.wrong
	}
	if p.empty {
		if snap, _, err := p.cfg.Store.Latest(); err != nil || snap.Len() == 0 {
			return nil, true
		}
	} else if time.Since(p.tried) < prefixRetryInterval {
		return nil, false
	}
	p.tried = time.Now()
	snap, rv, err := p.cfg.Store.Latest()
	if err != nil {
		return nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = p.cfg.Checker.VerifyPrefix(cctx, p.cfg.Prefix, int64(rv), prefixContents(snap))
	p.empty = errors.Is(err, ErrPrefixUnproven)
	switch {
	case p.empty:
		// Nothing proves an empty resource's prefix: its reads pass
		// through until it holds an object.
		return nil, true
	case errors.Is(err, ErrPrefixMismatch):
		klog.ErrorS(err, "etcd prefix does not match the resource; its consistent reads pass through (see --etcd-resource-prefix)",
			"resource", p.cfg.Resource, "prefix", p.cfg.Prefix)
		p.cfg.Metrics.prefixMismatch(p.cfg.Resource)
		p.wrong = true
		return nil, true
	case err != nil:
		// Transient, or the snapshot's revision is already compacted: try
		// again later with a newer snapshot.
		klog.InfoS("Cannot verify etcd prefix yet", "resource", p.cfg.Resource, "prefix", p.cfg.Prefix, "revision", rv, "err", err)
		return nil, false
	}
	t, release := p.cfg.Checker.TrackShared(p.cfg.Prefix, int64(rv))
	p.tracker = t
	context.AfterFunc(p.ctx, release)
	return p.tracker, false
}

// prefixContents describes snap for Checker.VerifyPrefix.
func prefixContents(snap *snapshot.Snapshot) PrefixContents {
	first, last, ok := snap.Ends()
	if !ok {
		return PrefixContents{}
	}
	return PrefixContents{
		Count: int64(snap.Len()),
		First: KeyRevision{Key: first.Key, ModRevision: int64(first.RV)},
		Last:  KeyRevision{Key: last.Key, ModRevision: int64(last.RV)},
	}
}
