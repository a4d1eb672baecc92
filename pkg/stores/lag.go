package stores

import (
	"context"
	"errors"
	"math"
	"time"

	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// defaultWatchLagTimeout (DefaultConfig's WatchLagTimeout) is how long a
// store may stay behind a revision etcd proved it must reach before its
// watch is restarted. It exceeds the
// consistent-read timeout (3s), so that a store merely slow to apply a burst
// is left alone, and is far below the stall timeout (3 min), which needs no
// evidence. Not measured.
const defaultWatchLagTimeout = 10 * time.Second

// checkLag is called when a read proved with etcd that entry's store must
// reach rv (a change of its resource at or before a revision etcd reported
// at proven) and the store had not in time. Unless the store reaches rv by
// proven + WatchLagTimeout, the watch open now is restarted (reason
// "lagging"): it is open but not delivering what etcd holds (a stuck
// stream, or an apiserver whose watch cache is stuck). A feeder without an
// open watch is already reconnecting or relisting, and a watch opened later
// gets its own chance. One check runs per store at a time; it ends with the
// store. An rv beyond etcd's int64 revisions proves nothing (it can only be
// a caller's resourceVersion) and is ignored.
func (reg *Registry) checkLag(entry *storeEntry, rv uint64, proven time.Time) {
	timeout := reg.cfg.WatchLagTimeout
	if timeout <= 0 || entry.feeder == nil || rv > math.MaxInt64 {
		return
	}
	watch := entry.feeder.WatchID()
	if watch == 0 || !entry.lagCheck.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer entry.lagCheck.Store(false)
		ctx, cancel := context.WithDeadline(entry.ctx, proven.Add(timeout))
		defer cancel()
		_, _, err := entry.store.WaitFor(ctx, rv)
		if !errors.Is(err, context.DeadlineExceeded) || entry.ctx.Err() != nil {
			return
		}
		if entry.feeder.Restart(watch, snapshot.RestartLagging) {
			klog.InfoS("Snapshot store stayed behind a revision etcd proved; restarting its watch",
				"resource", entry.info.GVR.String(), "revision", rv, "storeProgress", entry.store.Progress(), "behindFor", time.Since(proven).Round(time.Millisecond))
		}
	}()
}

// watchStalled decides whether entry's watch, silent for the stall timeout,
// is broken. Silence alone is not evidence: resources without a watch cache
// get no bookmarks, and a dead connection ends the read by itself (the
// upstream transport's HTTP/2 health check, TCP keepalives). With etcd and
// a verified prefix, the watch is broken when etcd holds a change of the
// resource that the store does not reach within the lag timeout
// (freshness.Prover.Missing); without them, or with no lag timeout,
// nothing shows it is, and it is kept.
func (reg *Registry) watchStalled(ctx context.Context, entry *storeEntry) bool {
	if reg.cfg.Freshness == nil || entry.prover == nil {
		return false
	}
	lag := reg.cfg.WatchLagTimeout
	if lag <= 0 || !entry.prover.Missing(ctx, lag) {
		return false
	}
	klog.InfoS("Silent watch misses changes etcd holds", "resource", entry.info.GVR.String(), "storeProgress", entry.store.Progress())
	return true
}
