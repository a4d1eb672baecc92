package freshness

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// prefixRetryInterval spaces attempts to verify a store's etcd prefix after
// a transient failure. Not measured.
const prefixRetryInterval = 5 * time.Second

// errNoProgress: etcd did not tell the last change at or before the
// revision in time.
var errNoProgress = errors.New("etcd progress not reported in time")

// etcdProver is the Prover with etcd (ProverConfig.Checker): etcd's
// current revision E, read linearizably, and the resource's tracker, which
// tells the last change L ≤ E under its verified prefix; the store waits
// for L and serves at max(snapshot RV, E). An empty resource, whose prefix
// cannot be verified, and Unchanged are proven through the apiserver
// (fallback), when there is one.
type etcdProver struct {
	proverBase
	ctx context.Context // ends the tracker and the fallback's share of its resource

	mu sync.Mutex // guards fallback, tracker, wrong, empty and tried
	// fallback proves through the apiserver the reads of an empty
	// resource, whose prefix cannot be verified, and Unchanged; made on
	// first use (throughAPIServer).
	fallback *apiserverProver
	tracker  *Tracker  // nil until the prefix was verified
	wrong    bool      // the prefix disagreed with the snapshot
	empty    bool      // the last attempt found the store empty
	tried    time.Time // last attempt to verify the prefix
}

func (p *etcdProver) Consistent(ctx context.Context) (*snapshot.Snapshot, uint64, Outcome) {
	return p.ConsistentIfCheap(ctx, false)
}

func (p *etcdProver) ConsistentIfCheap(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	return p.consistentRead(ctx, small, p.consistent)
}

// consistent probes etcd's current revision E, learns the last change
// L ≤ E under the resource's prefix, waits for the store to hold L, and
// serves at max(snapshot RV, E).
func (p *etcdProver) consistent(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	t, wrong := p.verifiedTracker(ctx)
	switch {
	case wrong:
		if f := p.fallbackProof(); f != nil {
			return f.consistent(ctx, small)
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
func (p *etcdProver) fallbackProof() *apiserverProver {
	p.mu.Lock()
	empty := p.empty && !p.wrong
	p.mu.Unlock()
	if !empty {
		return nil
	}
	return p.throughAPIServer()
}

// throughAPIServer returns the resource's proof through the apiserver,
// made on first use; nil without ProverConfig.APIServer and for an
// aggregated resource, which is in neither this etcd nor the apiserver's
// watch cache.
func (p *etcdProver) throughAPIServer() *apiserverProver {
	if p.cfg.APIServer == nil || p.cfg.Aggregated {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fallback == nil {
		p.fallback = newAPIServerProver(p.ctx, p.proverBase)
	}
	return p.fallback
}

// Unchanged is proven through the apiserver: etcd's tracker of the
// resource starts at the store's list, so it cannot show it.
func (p *etcdProver) Unchanged(ctx context.Context, from, to uint64) bool {
	if f := p.throughAPIServer(); f != nil {
		return f.Unchanged(ctx, from, to)
	}
	return from == to
}

// At: etcd says which change of the resource was the last at or before
// rv; once the store holds it, the snapshot at that change is the state
// at rv.
func (p *etcdProver) At(ctx context.Context, rv uint64) (*snapshot.Snapshot, error) {
	return p.at(ctx, rv, func(ctx context.Context, rv uint64) (uint64, error) {
		t, _ := p.verifiedTracker(ctx)
		if t == nil {
			return 0, errNoProgress
		}
		_, _, last, err := p.proveAndWait(ctx, t, int64(rv))
		return last, err
	})
}

// Holds: etcd tells the last change at or before rv and the store reaches
// it within the proof timeout. An empty store's prefix cannot be verified:
// its consistent reads are proven through the apiserver, and so are its
// watches.
func (p *etcdProver) Holds(ctx context.Context, rv uint64) bool {
	return p.holds(ctx, rv, func(ctx context.Context, rv uint64) bool {
		t, _ := p.verifiedTracker(ctx)
		if t == nil {
			if f := p.fallbackProof(); f != nil {
				return f.holdsRevision(ctx, rv)
			}
			return false
		}
		_, _, _, err := p.proveAndWait(ctx, t, int64(rv))
		return err == nil
	})
}

func (p *etcdProver) Missing(ctx context.Context, wait time.Duration) bool {
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

func (p *etcdProver) NotOlderThan(ctx context.Context, minRV uint64, wait time.Duration) (*snapshot.Snapshot, uint64, error) {
	return p.notOlderThan(ctx, minRV, wait, p.notOlderThanProven)
}

// notOlderThanProven is NotOlderThan for a store behind minRV: the last
// change at or before minRV is all it must hold (served at minRV); a
// *TooLargeError when etcd itself has not reached minRV in time. Before
// the prefix is verified the store waits for minRV.
func (p *etcdProver) notOlderThanProven(ctx context.Context, minRV uint64) (*snapshot.Snapshot, uint64, error) {
	t, _ := p.verifiedTracker(ctx)
	if t == nil {
		return p.waitFor(ctx, minRV)
	}
	snap, rv, _, err := p.proveAndWait(ctx, t, int64(minRV))
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

// proveAndWait is the one prove-and-wait every read with etcd uses: learn
// from etcd the last change L of the resource at or before rev (a revision
// etcd has reached or must reach), then wait until the store holds L. It
// returns the store's latest snapshot, its resourceVersion, and L. A store
// that does not reach L in time is reported to Behind.
func (p *etcdProver) proveAndWait(ctx context.Context, t *Tracker, rev int64) (*snapshot.Snapshot, uint64, uint64, error) {
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

// verifiedTracker starts the store's tracker on first use and verifies its
// prefix (Checker.VerifyPrefix): at the snapshot's resourceVersion the prefix
// must hold as many keys as the snapshot objects, with the same first and
// last keys at the same mod revisions, else the prefix is wrong and reads of
// the resource cannot be proven (wrong is then true, for good). An empty
// store proves nothing: wrong is true until it holds an object, when the
// prefix is verified at once. An aggregated API is never verified. It
// returns nil and false while the prefix could not be verified (etcd
// unreachable within ctx, or the snapshot's revision compacted).
// Callers bound ctx: other callers wait on mu meanwhile.
func (p *etcdProver) verifiedTracker(ctx context.Context) (t *Tracker, wrong bool) {
	if p.cfg.Aggregated {
		return nil, true
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
