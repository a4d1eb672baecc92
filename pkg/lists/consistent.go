package lists

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// freshTracker is one store's etcd progress tracker and whether its key
// prefix was verified against the snapshot.
type freshTracker struct {
	tracker *freshness.Tracker
	// verified is false when the prefix's object count disagreed with the
	// snapshot: consistent reads of this resource then pass through.
	verified bool
}

// consistent serves a consistent read (resourceVersion unset) from entry's
// store, following docs/design.md "Freshness": probe etcd's current revision E,
// learn the last change L ≤ E under the resource's prefix, wait for the
// snapshot to hold L, and serve at max(snapshot RV, E). A nil snapshot means
// freshness was not proven; reason says why.
func (l *Lists) consistent(ctx context.Context, entry *storeEntry) (*snapshot.Snapshot, uint64, string) {
	start := time.Now()
	resource := entry.info.GVR.GroupResource().String()
	// The timeout bounds the whole proof, including a first verification
	// of the prefix (an etcd read that blocks while etcd is unreachable).
	ctx, cancel := context.WithTimeout(ctx, l.consistentReadTimeout())
	defer cancel()
	ft := l.freshFor(ctx, entry)
	switch {
	case ft == nil:
		// etcd could not be read to verify the prefix (yet): a failed probe.
		l.cfg.FreshnessMetrics.observe(resource, "probe_failed", time.Since(start))
		return nil, 0, "probe_failed"
	case !ft.verified:
		l.cfg.FreshnessMetrics.observe(resource, "prefix_unverified", time.Since(start))
		return nil, 0, "prefix_unverified"
	}
	etcdRev, err := l.cfg.Freshness.CurrentRevision(ctx)
	if err != nil {
		l.cfg.FreshnessMetrics.observe(resource, "probe_failed", time.Since(start))
		return nil, 0, "probe_failed"
	}
	last, err := ft.tracker.LastChangeAtOrBefore(ctx, etcdRev)
	if err != nil {
		l.cfg.FreshnessMetrics.observe(resource, "progress_timeout", time.Since(start))
		return nil, 0, "progress_timeout"
	}
	proven := time.Now()
	snap, rv, err := entry.store.WaitFor(ctx, uint64(last))
	if err != nil {
		l.checkLag(entry, uint64(last), proven)
		l.cfg.FreshnessMetrics.observe(resource, "snapshot_timeout", time.Since(start))
		return nil, 0, "snapshot_timeout"
	}
	l.cfg.FreshnessMetrics.observe(resource, "served", time.Since(start))
	return snap, max(rv, uint64(etcdRev)), "consistent"
}

// consistentReadTimeout bounds proving the freshness of one read.
func (l *Lists) consistentReadTimeout() time.Duration {
	if l.cfg.ConsistentReadTimeout <= 0 {
		return 3 * time.Second
	}
	return l.cfg.ConsistentReadTimeout
}

// freshFor starts entry's tracker on first use and verifies its prefix: the
// number of keys under it at the snapshot's resourceVersion must equal the
// snapshot's object count, else the prefix is wrong and consistent reads of
// the resource would be unprovable. It returns nil while the prefix could
// not be verified (no etcd configured, etcd unreachable within ctx, or the
// snapshot's revision compacted), and a tracker that is not verified for a wrong prefix. Callers
// bound ctx: other callers wait on freshMu meanwhile.
func (l *Lists) freshFor(ctx context.Context, entry *storeEntry) *freshTracker {
	if l.cfg.Freshness == nil {
		return nil // no etcd: nothing can be proven
	}
	entry.freshMu.Lock()
	defer entry.freshMu.Unlock()
	if entry.fresh != nil || time.Since(entry.freshTried) < freshRetryInterval {
		return entry.fresh
	}
	entry.freshTried = time.Now()
	snap, rv, err := entry.store.Latest()
	if err != nil {
		return nil
	}
	prefix := l.cfg.EtcdPrefix(entry.info.GVR.GroupResource(), entry.info.Custom)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	count, err := l.cfg.Freshness.Count(cctx, prefix, int64(rv))
	switch {
	case err != nil:
		// Transient, or the snapshot's revision is already compacted: try
		// again later with a newer snapshot.
		klog.InfoS("Cannot verify etcd prefix yet", "resource", entry.info.GVR.String(), "prefix", prefix, "revision", rv, "err", err)
		return nil
	case count != int64(snap.Len()):
		klog.ErrorS(nil, "etcd prefix does not match the resource; its consistent reads pass through (see --etcd-resource-prefix)",
			"resource", entry.info.GVR.String(), "prefix", prefix, "etcdKeys", count, "snapshotObjects", snap.Len())
		l.cfg.FreshnessMetrics.prefixMismatch(entry.info.GVR.GroupResource().String())
		entry.fresh = &freshTracker{}
		return entry.fresh
	}
	ft := &freshTracker{verified: true, tracker: l.cfg.Freshness.Track(prefix, int64(rv))}
	context.AfterFunc(entry.ctx, ft.tracker.Stop)
	entry.fresh = ft
	return ft
}

// freshRetryInterval spaces attempts to verify a store's etcd prefix after
// a transient failure. Not measured.
const freshRetryInterval = 5 * time.Second

// atProven returns the state at rv for a store that has not yet seen rv: etcd
// says which change of the resource was the last at or before rv, and once
// the store holds it, the snapshot at that change is the state at rv.
func (l *Lists) atProven(ctx context.Context, entry *storeEntry, rv uint64) (*snapshot.Snapshot, error) {
	if l.cfg.Freshness == nil {
		return nil, snapshot.ErrNotRetained
	}
	ctx, cancel := context.WithTimeout(ctx, l.consistentReadTimeout())
	defer cancel()
	ft := l.freshFor(ctx, entry)
	if ft == nil || !ft.verified {
		return nil, snapshot.ErrNotRetained
	}
	last, err := ft.tracker.LastChangeAtOrBefore(ctx, int64(rv))
	if err != nil {
		return nil, snapshot.ErrNotRetained
	}
	proven := time.Now()
	if _, _, err := entry.store.WaitFor(ctx, uint64(last)); err != nil {
		l.checkLag(entry, uint64(last), proven)
		return nil, snapshot.ErrNotRetained
	}
	return entry.store.At(uint64(last))
}

// notOlderThan serves a read at resourceVersion ≥ minRV. A store already
// there answers at once. Otherwise, with etcd, the last change of the
// resource at or before minRV is all the store must hold (the read is then
// served at minRV); when etcd itself has not reached minRV in time, the
// answer is the apiserver's 504 "Too large resource version". Without etcd
// the store waits for minRV, and on timeout the request passes through (a
// nil snapshot and status) so the apiserver decides.
func (l *Lists) notOlderThan(ctx context.Context, entry *storeEntry, minRV uint64) (*snapshot.Snapshot, uint64, *apierrors.StatusError) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.NotOlderThanWait)
	defer cancel()
	if snap, rv, err := entry.store.Latest(); err == nil && rv >= minRV {
		return snap, rv, nil
	}
	ft := l.freshFor(ctx, entry)
	if l.cfg.Freshness == nil || ft == nil || !ft.verified {
		snap, rv, err := entry.store.WaitFor(ctx, minRV)
		if err != nil {
			return nil, 0, nil
		}
		return snap, rv, nil
	}
	last, err := ft.tracker.LastChangeAtOrBefore(ctx, int64(minRV))
	if err != nil {
		if ctx.Err() == nil {
			return nil, 0, nil // etcd trouble: let the apiserver answer
		}
		probeCtx, cancelProbe := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancelProbe()
		current, err := l.cfg.Freshness.CurrentRevision(probeCtx)
		if err != nil || uint64(current) >= minRV {
			return nil, 0, nil
		}
		return nil, 0, paging.TooLargeResourceVersionError(minRV, uint64(current))
	}
	proven := time.Now()
	snap, rv, err := entry.store.WaitFor(ctx, uint64(last))
	if err != nil {
		l.checkLag(entry, uint64(last), proven)
		return nil, 0, nil
	}
	return snap, max(rv, minRV), nil
}

// compacted reports whether etcd has compacted revision rv.
func (l *Lists) compacted(ctx context.Context, rv uint64) bool {
	if l.cfg.Freshness == nil {
		return false
	}
	if int64(rv) < l.cfg.Freshness.CompactedRevision() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	compacted, err := l.cfg.Freshness.RefreshCompaction(ctx)
	return err == nil && int64(rv) < compacted
}

// FreshnessMetrics count consistent reads by outcome.
type FreshnessMetrics struct {
	outcomes         *prometheus.CounterVec
	wait             *prometheus.HistogramVec
	prefixMismatches *prometheus.CounterVec
}

// NewFreshnessMetrics registers the consistent-read metrics with reg.
func NewFreshnessMetrics(reg prometheus.Registerer) (*FreshnessMetrics, error) {
	m := &FreshnessMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "consistent_reads_total",
			Help: "Consistent LISTs by resource and outcome (served, or why freshness was not proven: probe_failed, progress_timeout, snapshot_timeout, prefix_unverified).",
		}, []string{"resource", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "wait_duration_seconds",
			Help:    "Time spent proving freshness for a consistent LIST, by outcome.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2, 3, 5},
		}, []string{"outcome"}),
		prefixMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "prefix_mismatches_total",
			Help: "Resources whose etcd key prefix did not match the snapshot; their consistent reads pass through.",
		}, []string{"resource"}),
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.wait, m.prefixMismatches} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *FreshnessMetrics) observe(resource, outcome string, d time.Duration) {
	if m != nil {
		m.outcomes.WithLabelValues(resource, outcome).Inc()
		m.wait.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

func (m *FreshnessMetrics) prefixMismatch(resource string) {
	if m != nil {
		m.prefixMismatches.WithLabelValues(resource).Inc()
	}
}
