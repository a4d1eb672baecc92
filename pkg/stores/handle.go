package stores

import (
	"context"
	"errors"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Handle is a request's hold on one store (Registry.Acquire): a store
// held is never dropped as idle. Release it when the request ends; a watch
// holds it until the watch ends.
type Handle struct {
	reg *Registry
	e   *storeEntry
}

// Acquire returns a handle on the store of res in format, starting the
// store on first demand if admitted for the caller of ctx (admission.go).
// The store may not have synced yet (AwaitSynced). Without a store it
// returns why (ReasonNotStarted before Run, ReasonStoreNotAuthorized,
// ReasonStoreOverBudget) and ok false. existingOnly starts no store (a
// peer's list is served from a running store or declined).
func (reg *Registry) Acquire(ctx context.Context, res *catalog.Resource, format wire.Format, existingOnly bool) (h *Handle, reason string, ok bool) {
	var e *storeEntry
	if format == wire.Table && reg.tablesRefused(res.GVR) {
		return nil, ReasonTableRefused, false
	}
	// The store is held from its lookup on (holdLocked), so the idle loop
	// cannot drop it before the handle holds it.
	if existingOnly {
		if e = reg.heldStore(res, format); e == nil {
			return nil, ReasonNotStarted, false
		}
	} else if e, reason, ok = reg.storeFor(ctx, res, format, false); !ok {
		return nil, reason, false
	}
	if reg.acquireHook != nil {
		reg.acquireHook()
	}
	return &Handle{reg: reg, e: e}, "", true
}

// Release ends the hold; the store's idle time starts again.
func (h *Handle) Release() { h.reg.releaseHold(h.e) }

// Store is the snapshot store.
func (h *Handle) Store() *snapshot.Store { return h.e.store }

// Prover proves what the store must hold for consistent, exact and
// not-older-than reads: with etcd, through the apiserver, or not at all.
func (h *Handle) Prover() freshness.Prover { return h.e.prover }

// Envelope is the envelope of the apiserver's last list of the store's
// resource (apiVersion, kind, representation); nil before the first.
func (h *Handle) Envelope() *wire.ListEnvelope { return h.e.source.envelope.Load() }

// Watching reports whether the store follows the apiserver now (its watch
// is open).
func (h *Handle) Watching() bool { return h.e.feeder != nil && h.e.feeder.Watching() }

// StateAt returns the snapshot holding the state at rv: a retained one,
// or, for an rv newer than the store has seen, the state at the last change
// before it as etcd proves (Prover.At). Compaction known to the Checker is
// applied first, so a compacted rv yields snapshot.ErrCompacted.
func (h *Handle) StateAt(ctx context.Context, rv uint64) (*snapshot.Snapshot, error) {
	h.reg.applyCompaction(h.e.store)
	snap, err := h.e.store.At(rv)
	if errors.Is(err, snapshot.ErrNotRetained) && rv > h.e.store.Progress() {
		snap, err = h.e.prover.At(ctx, rv)
	}
	return snap, err
}
