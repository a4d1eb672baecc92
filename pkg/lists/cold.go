package lists

import (
	"context"
	"math"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// Reads of a store that has not synced (cold: not preloaded, or a
// representation nobody asked for yet). The first request starts the
// store's list; every request, that one included, then waits up to
// Config.ColdStoreWait for that one list instead of passing through beside
// it, so that a storm on a cold replica costs the apiserver one list. Past
// the wait a request gets what the apiserver's own watch cache answers
// while it is not ready (k8s.io/apiserver/pkg/storage/cacher, with
// ResilientWatchCacheInitialization, GA in 1.34: delegator.go GetList and
// shouldDelegateListOnNotReadyCache, cacher.go Watch and GetList):
//
//   - a LIST with a limit and no label or field selector is read from etcd:
//     listproxy passes it through (continue tokens become the apiserver's
//     own, handOff);
//   - every other LIST, and every watch, gets 429 TooManyRequests "storage
//     is (re)initializing" with Retry-After growing with the time the store
//     has been unready (calculateRetryAfterForUnreadyCache).
//
// A store whose list keeps failing (snapshot.Feeder.ListFailing: for
// example listproxy may not list the resource) is not waited for: its
// requests pass through, as before the wait existed.

// ReasonStoreNotReady is the reason of a 429 for a read whose store did not
// sync within Config.ColdStoreWait.
const ReasonStoreNotReady Reason = "store_not_ready"

// storeNotReadyMessage is the apiserver's message for an unready watch
// cache (cacher ready.go).
const storeNotReadyMessage = "storage is (re)initializing"

// readyStore returns the request's store, starting it on first demand if
// admitted (admission.go), and whether it has synced, having waited for its
// first list up to Config.ColdStoreWait (ctx permitting). Without an entry
// it returns why: the store was refused, or ReasonNotSynced before Run.
// A peer's list neither starts a store nor waits: it is served from a
// synced one or declined.
func (l *Lists) readyStore(ctx context.Context, req listRequest) (*storeEntry, Reason, bool) {
	if req.peer {
		entry := l.existingStore(req.info, req.format)
		return entry, "", entry != nil && entry.store.Synced()
	}
	entry, reason, ok := l.storeFor(ctx, req.info, req.format, false)
	if !ok {
		return nil, reason, false
	}
	return entry, "", awaitSynced(ctx, entry, l.cfg.ColdStoreWait)
}

// awaitSynced waits until entry's store has synced, for at most wait, and
// reports whether it has. It does not wait for a store whose list is
// failing, and gives up when ctx or the store ends.
func awaitSynced(ctx context.Context, entry *storeEntry, wait time.Duration) bool {
	if entry.store.Synced() {
		return true
	}
	if wait <= 0 || listFailing(entry) {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		changed := entry.store.Changed()
		if entry.store.Synced() {
			return true
		}
		if listFailing(entry) {
			return false
		}
		select {
		case <-changed:
		case <-t.C:
			return entry.store.Synced()
		case <-ctx.Done():
			return false
		case <-entry.ctx.Done():
			return false
		}
	}
}

// listFailing reports whether entry's feeder is backing off after a failed
// list.
func listFailing(entry *storeEntry) bool {
	return entry.feeder != nil && entry.feeder.ListFailing()
}

// notReady answers a LIST whose store did not sync in time (see above), or
// was not started for it (refused, from readyStore).
func (l *Lists) notReady(req listRequest, entry *storeEntry, refused Reason) verdict {
	if refused != "" {
		return pass(refused)
	}
	if entry == nil || listFailing(entry) || req.query.limit > 0 && !req.selectors {
		return pass(ReasonNotSynced)
	}
	return reject(ReasonStoreNotReady, storeNotReadyError(entry))
}

// storeNotReadyError is the apiserver's 429 for an unready watch cache.
func storeNotReadyError(entry *storeEntry) *apierrors.StatusError {
	return apierrors.NewTooManyRequests(storeNotReadyMessage, retryAfterUnready(time.Since(entry.started)))
}

// retryAfterUnready is the apiserver's Retry-After, in seconds, for a watch
// cache unready for downtime: e^(0.06·seconds), between 1 and 30.
func retryAfterUnready(downtime time.Duration) int {
	return int(math.Min(30, math.Max(1, math.Exp(0.06*downtime.Seconds()))))
}

// writeNotReady writes the 429 of a watch whose store did not sync in time.
func writeNotReady(entry *storeEntry) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, storeNotReadyError(entry))
	}
}
