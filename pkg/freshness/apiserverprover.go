package freshness

import (
	"context"
	"errors"
	"time"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

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

// apiserverProver is the Prover through the apiserver alone (no etcd;
// apiserver.go, docs/design.md "Freshness without etcd"), and the proof an
// etcdProver falls back to for an empty resource and Unchanged. It shares
// its resource's probes and auxiliary watches (shared) with the other
// stores of the resource.
type apiserverProver struct {
	proverBase
	shared *resourceProof
}

// newAPIServerProver returns the proof of base's store through
// base.cfg.APIServer, sharing its resource's probes and auxiliary watches
// with the other stores of the resource until ctx ends.
func newAPIServerProver(ctx context.Context, base proverBase) *apiserverProver {
	cfg := base.cfg
	r := cfg.APIServer.acquire(cfg.Resource, cfg.Path, cfg.Namespaced, cfg.Store)
	context.AfterFunc(ctx, func() { cfg.APIServer.release(r, cfg.Store) })
	return &apiserverProver{proverBase: base, shared: r}
}

func (p *apiserverProver) Consistent(ctx context.Context) (*snapshot.Snapshot, uint64, Outcome) {
	return p.ConsistentIfCheap(ctx, false)
}

func (p *apiserverProver) ConsistentIfCheap(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	return p.consistentRead(ctx, small, p.consistent)
}

// consistent proves a consistent read through the apiserver: probe the
// resource's current revision R through the apiserver, learn the last
// change L ≤ R from the store's own feed or an auxiliary watch, wait for
// the store to hold L, and serve at max(snapshot RV, R). A small store's
// probe is the state probe, which proves the read at once when it shows
// the store's snapshot (provenByState). A small read (ConsistentIfCheap)
// opens no auxiliary watch.
func (p *apiserverProver) consistent(ctx context.Context, small bool) (*snapshot.Snapshot, uint64, Outcome) {
	var r uint64
	byState := p.provableByState()
	if small && !byState && !p.cfg.Store.ChangedWithin(quietAfter*p.shared.api.cfg.FastWait) {
		// A quiet store's feed is unlikely to prove the read within the
		// fast path's wait, and the apiserver answers a small read in
		// milliseconds: pass it through without probing.
		p.shared.api.metrics.proof(p.shared.resource, pathDirectCheaper)
		return nil, 0, DirectCheaper
	}
	if byState {
		snap, rv, st, err := p.provenByState(ctx)
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
		rev, _, err := p.shared.probes.current(ctx)
		if err != nil {
			return nil, 0, ProbeFailed
		}
		r = uint64(rev)
	}
	snap, rv, _, err := p.proveAndWait(ctx, r, !small)
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
func (p *apiserverProver) provableByState() bool {
	snap, _, err := p.cfg.Store.Latest()
	return err == nil && snap.Len() <= p.shared.api.cfg.StateProofMaxObjects
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
func (p *apiserverProver) provenByState(ctx context.Context) (*snapshot.Snapshot, uint64, *resourceState, error) {
	st, _, err := p.shared.states.current(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	snap, rv, err := p.cfg.Store.Latest()
	if err != nil || !st.is(snap) {
		return nil, 0, st, errStateDiffers
	}
	p.shared.api.metrics.proof(p.shared.resource, pathState)
	return snap, max(rv, st.rev), st, nil
}

// proveAndWait is the prove-and-wait without etcd: the store's own feed or
// an auxiliary watch tells the last change L of the resource at or before
// rev (a watch stream covering rev shows every change up to it, whatever
// rev is), then the store must hold L. It returns the store's latest
// snapshot, its resourceVersion, and L. A store that does not reach L in
// time is reported to Behind. An rev no watch reaches in time (beyond the
// apiserver's revision) is not proven. Without orAux only the fast path
// may prove it: errFastPathOnly when it does not.
func (p *apiserverProver) proveAndWait(ctx context.Context, rev uint64, orAux bool) (*snapshot.Snapshot, uint64, uint64, error) {
	last, err := p.prove(ctx, rev, orAux)
	if err != nil {
		return nil, 0, 0, err
	}
	snap, rv, err := p.holdAndKeep(ctx, last, rev)
	if err != nil {
		return nil, 0, 0, err
	}
	return snap, rv, last, nil
}

// prove returns L, a revision such that a store holding every change up to
// L holds the state at R: the fast path, or, when orAux, up to two
// auxiliary watches. Without orAux a read the fast path does not prove
// fails at once with errFastPathOnly, and no auxiliary watch is opened.
func (p *apiserverProver) prove(ctx context.Context, r uint64, orAux bool) (uint64, error) {
	res := p.shared
	fast, cancel := context.WithTimeout(ctx, res.api.cfg.FastWait)
	_, _, err := p.cfg.Store.WaitFor(fast, r)
	cancel()
	if err == nil {
		res.api.metrics.proof(res.resource, pathFast)
		return r, nil
	}
	if ctx.Err() != nil {
		res.api.metrics.proof(res.resource, pathTimeout)
		return 0, ctx.Err()
	}
	if !orAux {
		res.api.metrics.proof(res.resource, pathDirectCheaper)
		return 0, errFastPathOnly
	}
	for range 2 {
		aux, noBookmarks := res.runningAux(p.cfg.Store, r)
		if noBookmarks {
			res.api.metrics.proof(res.resource, pathNoBookmarks)
			return 0, errNoBookmarks
		}
		if aux == nil {
			break // the store is not synced: nothing to start from
		}
		last, covered, ok := aux.lastChange(ctx, r)
		if ok {
			res.api.metrics.proof(res.resource, pathAux)
			res.api.metrics.auxLead.Observe(float64(covered - r))
			return last, nil
		}
		if ctx.Err() != nil {
			res.api.metrics.proof(res.resource, pathTimeout)
			return 0, ctx.Err()
		}
	}
	res.api.metrics.proof(res.resource, pathInconclusive)
	return 0, errInconclusive
}

// Unchanged runs an auxiliary watch of its own from from and reports
// whether it showed no event at or before to.
func (p *apiserverProver) Unchanged(ctx context.Context, from, to uint64) bool {
	if from >= to {
		return from == to
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	res := p.shared
	aux := newAuxWatch(from)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		result := res.watch(wctx, aux)
		if wctx.Err() == nil {
			res.api.metrics.auxWatch(res.resource, result)
		}
		aux.end()
	}()
	last, _, ok := aux.lastChange(ctx, to)
	return ok && last == from
}

// At: the store's own feed or an auxiliary watch tells the last change
// at or before rv (proveAndWait).
func (p *apiserverProver) At(ctx context.Context, rv uint64) (*snapshot.Snapshot, error) {
	return p.at(ctx, rv, func(ctx context.Context, rv uint64) (uint64, error) {
		_, _, last, err := p.proveAndWait(ctx, rv, true)
		return last, err
	})
}

func (p *apiserverProver) Holds(ctx context.Context, rv uint64) bool {
	return p.holds(ctx, rv, p.holdsRevision)
}

// holdsRevision is Holds within the proof's bounds. It is enough that rv
// is at or below the resource's revision — a revision a probe of the
// resource showed (the one that proved the read whose resourceVersion rv
// is), or one sent now — provided the store's feed is live (a bookmark, a
// change or a relist within liveFeed): the store's watch then delivers
// every change after rv, in order, and a cursor subscribed at rv skips the
// changes up to rv that arrive later (snapshot.Store.Subscribe). A feed
// silent for longer (a resource without bookmarks, or a watch that may be
// stuck) must reach the last change at or before rv first, as a read at
// rv, so that a stuck store is reported behind rather than given watchers.
func (p *apiserverProver) holdsRevision(ctx context.Context, rv uint64) bool {
	if p.cfg.Store.FedWithin(liveFeed) {
		if rv <= p.shared.reached.Load() {
			return true
		}
		current, _, err := p.shared.probes.current(ctx)
		if err == nil {
			return uint64(current) >= rv
		}
	}
	// A feed silent for longer, or a probe that failed: the store must
	// reach the last change at or before rv, as a read at rv, or be
	// reported behind (its watch restarted when it stays so).
	_, _, _, err := p.proveAndWait(ctx, rv, true)
	return err == nil
}

// Missing: without etcd nothing shows a change the store lacks.
func (*apiserverProver) Missing(context.Context, time.Duration) bool { return false }

func (p *apiserverProver) NotOlderThan(ctx context.Context, minRV uint64, wait time.Duration) (*snapshot.Snapshot, uint64, error) {
	return p.notOlderThan(ctx, minRV, wait, p.notOlderThanProven)
}

// notOlderThanProven is NotOlderThan for a store behind minRV: a small
// store's state probe proves at once the snapshot it shows at R, enough
// when R ≥ minRV (a state-proven read's resourceVersion, which the store's
// progress has not reached); else the store's own feed or an auxiliary
// watch tells the last change at or before minRV, and the read is served
// at minRV.
func (p *apiserverProver) notOlderThanProven(ctx context.Context, minRV uint64) (*snapshot.Snapshot, uint64, error) {
	if p.provableByState() {
		if snap, rv, _, err := p.provenByState(ctx); err == nil && rv >= minRV {
			return snap, rv, nil
		}
	}
	snap, rv, _, err := p.proveAndWait(ctx, minRV, true)
	if err != nil {
		return nil, 0, nil
	}
	return snap, max(rv, minRV), nil
}
