package stores

import (
	"context"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Reads of a store that has not synced (cold: not preloaded, or a
// representation nobody asked for yet). The first request starts the
// store's list; every request, that one included, then waits up to
// Config.ColdStoreWait for that one list instead of passing through beside
// it (Handle.AwaitSynced), so that a storm on a cold replica costs the
// apiserver one list. Past the wait a request gets what the apiserver's own
// watch cache answers while it is not ready
// (k8s.io/apiserver/pkg/storage/cacher, with
// ResilientWatchCacheInitialization, GA in 1.34: delegator.go GetList and
// shouldDelegateListOnNotReadyCache, cacher.go Watch and GetList):
//
//   - a LIST with a limit and no label or field selector is read from etcd:
//     it passes through (continue tokens become the apiserver's own);
//   - every other LIST, and every watch, gets 429 TooManyRequests "storage
//     is (re)initializing" with Retry-After growing with the time the store
//     has been unready (Handle.NotReady).
//
// A store whose list keeps failing (Handle.ListFailing: for example
// listproxy may not list the resource) is not waited for: its requests
// pass through, as before the wait existed.

// storeNotReadyMessage is the apiserver's message for an unready watch
// cache (cacher ready.go).
const storeNotReadyMessage = "storage is (re)initializing"

// AwaitSynced waits until the store has synced, for at most
// Config.ColdStoreWait, and reports whether it has. It does not wait for a
// store whose list is failing, and gives up when ctx or the store ends.
func (h *Handle) AwaitSynced(ctx context.Context) bool {
	e := h.e
	if e.store.Synced() {
		return true
	}
	wait := h.reg.cfg.ColdStoreWait
	if wait <= 0 || h.ListFailing() {
		return false
	}
	t := h.reg.clock.NewTimer(wait)
	defer t.Stop()
	for {
		changed := e.store.Changed()
		if e.store.Synced() {
			return true
		}
		if h.ListFailing() {
			return false
		}
		select {
		case <-changed:
		case <-t.C():
			return e.store.Synced()
		case <-ctx.Done():
			return false
		case <-e.ctx.Done():
			return false
		}
	}
}

// Dropped reports whether the store was stopped while the handle was held
// (discovery changed its resource, or its Table rows were refused): its
// readers pass through.
func (h *Handle) Dropped() bool { return h.e.ctx.Err() != nil }

// ListFailing reports whether the store's feeder is backing off after a
// failed list.
func (h *Handle) ListFailing() bool {
	return h.e.feeder != nil && h.e.feeder.ListFailing()
}

// NotReady is the answer to a read whose store has not synced
// (AwaitSynced false): the apiserver's 429 for an unready watch cache, with
// the Retry-After of a store unready since it started; or nil when the
// read passes through instead, because the store's list is failing or the
// store was dropped. The LIST and watch servers both answer by it; a LIST
// passes through in one more case of its own (see above).
func (h *Handle) NotReady() *apierrors.StatusError {
	if h.ListFailing() || h.Dropped() {
		return nil
	}
	return apierrors.NewTooManyRequests(storeNotReadyMessage, retryAfterUnready(h.reg.clock.Since(h.e.started)))
}

// retryAfterUnready is the apiserver's Retry-After, in seconds, for a watch
// cache unready for downtime: e^(0.06·seconds), between 1 and 30.
func retryAfterUnready(downtime time.Duration) int {
	return int(math.Min(30, math.Max(1, math.Exp(0.06*downtime.Seconds()))))
}
