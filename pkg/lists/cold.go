package lists

import (
	"context"

	"github.com/listproxy/listproxy/pkg/stores"
)

// A LIST whose store has not synced waits for its first list
// (stores.Handle.AwaitSynced), then gets what the apiserver's unready watch
// cache answers: a LIST with a limit and no selector is read from etcd
// (passed through, continue tokens handed over), every other one gets 429
// (stores.Handle.NotReady).
//
// The wait is for a list of the whole resource, which a storm of informers
// shares. A namespace's first page does not wait for it: it passes through
// at once (ReasonStoreSyncing), and costs the apiserver that namespace,
// what it costs without listproxy; the store syncs meanwhile for the reads
// after it. A namespace controller deleting a namespace lists each of some
// forty resources in it, most of them never read through listproxy before.

// ReasonStoreNotReady is the reason of a 429 for a read whose store did not
// sync within the registry's ColdStoreWait.
const ReasonStoreNotReady Reason = "store_not_ready"

// ReasonStoreSyncing is the reason a namespace's first page passed through
// without waiting for its store's first list.
const ReasonStoreSyncing Reason = "store_syncing"

// Reasons a read passes through because its store is not running and was
// not started for it.
const (
	ReasonStoreNotAuthorized Reason = stores.ReasonStoreNotAuthorized
	ReasonStoreOverBudget    Reason = stores.ReasonStoreOverBudget
)

// readyStore returns a handle on the request's store, starting the store on
// first demand if admitted, and whether it has synced, having waited for
// its first list (ctx permitting) unless the request is a namespace's first
// page. When it is not ready it returns why it passes through instead: the
// store was refused, ReasonNotSynced before the registry runs, or
// ReasonStoreSyncing. A peer's list neither starts a store nor waits: it is
// served from a synced one or declined.
func (l *Lists) readyStore(ctx context.Context, req listRequest) (*stores.Handle, Reason, bool) {
	if req.peer {
		h, _, ok := l.stores.Acquire(ctx, req.Resource, req.Format, true)
		return h, "", ok && h.Store().Synced()
	}
	h, reason, ok := l.stores.Acquire(ctx, req.Resource, req.Format, false)
	if !ok {
		return nil, Reason(reason), false
	}
	if !h.Store().Synced() && req.Namespace != "" && req.query.continueToken == "" {
		return h, ReasonStoreSyncing, false
	}
	return h, "", h.AwaitSynced(ctx)
}

// notReady answers a LIST whose store did not sync in time (see above), or
// that passes through without waiting (passReason, from readyStore: its
// store refused, or a namespace's page of a store still syncing).
func (l *Lists) notReady(req listRequest, h *stores.Handle, passReason Reason) verdict {
	if passReason != "" {
		return pass(passReason)
	}
	// The watch cache delegates a limited list without label and field
	// selectors to etcd, a shard selector or not
	// (shouldDelegateListOnNotReadyCache).
	if h == nil || req.query.limit > 0 && req.Labels.Empty() && req.Fields.Empty() {
		return pass(ReasonNotSynced)
	}
	status := h.NotReady()
	if status == nil {
		return pass(ReasonNotSynced)
	}
	return reject(ReasonStoreNotReady, status)
}
