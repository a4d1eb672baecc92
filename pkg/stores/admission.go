package stores

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Store admission (docs/design.md "Service mode", "Who starts a store").
// A store lists and holds a resource's whole collection, whoever asked for
// it, so starting one is decided apart from serving one: a request finds a
// running store of its resource and representation and is served from it
// (its caller's own authorization is the edge's business), or it may start
// the store only when
//
//   - the store is preloaded (Config.Preload), or
//   - Config.AuthorizeStart is nil (sidecar mode: the one client is
//     trusted), or says the request's caller may list the resource in
//     every namespace, as the store's source does,
//
// and, unless preloaded, the running stores hold fewer bytes than
// Config.MaxStoreBytes. A store counts against the budget from the moment
// it is admitted: what it holds is known only once its first list is
// published, so until then it counts a reservation (storeEntry.budgetBytes,
// reservationLocked), and stores admitted together while their lists run
// cannot all slip in below the budget. Otherwise the request passes through
// with ReasonStoreNotAuthorized or ReasonStoreOverBudget, and the refusal is
// counted in listproxy_stores_refused_total.

// Reasons a read passes through because its store is not running and was
// not started for it (listproxy_lists_total and
// listproxy_watch_passed_through_total).
const (
	ReasonNotStarted         = "not_synced"           // Run has not read discovery yet
	ReasonStoreNotAuthorized = "store_not_authorized" // the caller may not list the resource cluster-wide
	ReasonStoreOverBudget    = "store_over_budget"    // the stores hold Config.MaxStoreBytes or more
)

// Values of the "reason" label of listproxy_stores_refused_total.
const (
	refusedNotAuthorized = "not_authorized"
	refusedOverBudget    = "over_budget"
)

// startRequest is what admitStart decides on.
type startRequest struct {
	// preloaded: Config.Preload names the store.
	preloaded bool
	// authorized: the caller may list the resource cluster-wide, or is
	// trusted (sidecar mode).
	authorized bool
	// budget is Config.MaxStoreBytes (0: no bound); used is what the
	// running stores count against it (storeBytesLocked).
	budget, used int64
}

// admitStart decides whether a store that is not running may be started,
// and if not why (a pass-through reason). A preloaded store is always
// started and counts against the budget of later ones. An unauthorized
// caller is refused as such whatever the budget, so that
// listproxy_stores_refused_total{reason="over_budget"} counts only
// callers the budget turned away.
func admitStart(s startRequest) (string, bool) {
	switch {
	case s.preloaded:
		return "", true
	case !s.authorized:
		return ReasonStoreNotAuthorized, false
	case s.budget > 0 && s.used >= s.budget:
		return ReasonStoreOverBudget, false
	}
	return "", true
}

// refusedLabel is the listproxy_stores_refused_total reason of a refusal.
func refusedLabel(reason string) string {
	if reason == ReasonStoreOverBudget {
		return refusedOverBudget
	}
	return refusedNotAuthorized
}

// isPreloaded reports whether Config.Preload names the store of info in
// format (in the resource's preferred version).
func (reg *Registry) isPreloaded(info *catalog.Resource, format wire.Format) bool {
	for _, p := range reg.cfg.Preload {
		if p.Resource != info.GVR.GroupResource() || p.formatFor(info) != format {
			continue
		}
		if preferred, ok := reg.catalog.Preferred(p.Resource); ok && preferred.GVR == info.GVR {
			return true
		}
	}
	return false
}

// listingShare is how many stores in their first list an otherwise empty
// budget admits at once: each reserves at least 1/listingShare of
// Config.MaxStoreBytes until it has listed (reservationLocked). Not
// measured: the share of a 1 GiB budget (64 MiB) is more than most
// resources hold and less than the pods of a large cluster, whose store
// then overshoots its reservation as any store started last may overshoot
// the budget.
const listingShare = 16

// storeBytesLocked is what the running stores count against
// Config.MaxStoreBytes, each its budgetBytes. reg.mu must be held.
func (reg *Registry) storeBytesLocked() int64 {
	var n int64
	for _, e := range reg.stores {
		n += e.budgetBytes()
	}
	return n
}

// reservationLocked is what a store of gvr admitted now counts against
// Config.MaxStoreBytes until its first list is published: its share of
// the budget (1/listingShare, at least one byte), or what the largest
// listed store of the same resource in another representation holds when
// that is more (the best estimate at hand of what this one will hold). 0
// without a budget. reg.mu must be held.
func (reg *Registry) reservationLocked(gvr schema.GroupVersionResource) int64 {
	budget := reg.cfg.MaxStoreBytes
	if budget <= 0 {
		return 0
	}
	reserved := max(budget/listingShare, 1)
	for k, e := range reg.stores {
		if k.gvr == gvr && e.listed.Load() {
			reserved = max(reserved, e.bytes.Load())
		}
	}
	return reserved
}

// budgetBytes is what e counts against Config.MaxStoreBytes: once its first
// list is published, what it holds, live and history, as last published;
// before, its reservation, except while that list is failing (the failed
// list holds nothing, and a store that cannot list must not keep others
// out; Feeder.ListFailing is true until a list succeeds).
func (e *storeEntry) budgetBytes() int64 {
	switch {
	case e.listed.Load():
		return e.bytes.Load()
	case e.feeder != nil && e.feeder.ListFailing():
		return 0
	}
	return e.reserved
}

// authorizedToStart reports whether the caller of ctx may start a store of
// info: always without Config.AuthorizeStart (sidecar mode).
func (reg *Registry) authorizedToStart(ctx context.Context, info *catalog.Resource) bool {
	return reg.cfg.AuthorizeStart == nil || reg.cfg.AuthorizeStart(ctx, info.GVR)
}

// refuseStart counts and logs a store not started for a request; used is
// what the stores counted against the budget (storeBytesLocked).
func (reg *Registry) refuseStart(info *catalog.Resource, format wire.Format, reason string, used int64) {
	reg.cfg.Metrics.refused(info.GVR.GroupResource().String(), refusedLabel(reason))
	klog.V(2).InfoS("Snapshot store not started; the request passes through", "resource", info.GVR.String(), "format", format.String(),
		"reason", reason, "storeBytesWithReservations", used, "maxStoreBytes", reg.cfg.MaxStoreBytes)
}
