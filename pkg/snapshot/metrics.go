package snapshot

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the snapshot stores' Prometheus metrics, labelled by resource
// (group/resource) and format (representation).
type Metrics struct {
	objects       *prometheus.GaugeVec
	bytes         *prometheus.GaugeVec
	historyDepth  *prometheus.GaugeVec
	historyBytes  *prometheus.GaugeVec
	historyMax    *prometheus.GaugeVec
	feedBytes     *prometheus.GaugeVec
	feedMax       *prometheus.GaugeVec
	gzipBytes     *prometheus.GaugeVec
	rv            *prometheus.GaugeVec
	relists       *prometheus.CounterVec
	peerLists     *prometheus.CounterVec
	watchRestarts *prometheus.CounterVec
	watchHealthy  *prometheus.GaugeVec
	lastProgress  *prometheus.GaugeVec
}

// NewMetrics registers the store metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"resource", "format"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "listproxy", Subsystem: "snapshot", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		objects:      gauge("objects", "Objects in the latest snapshot."),
		bytes:        gauge("bytes", "Encoded bytes of the objects in the latest snapshot."),
		historyDepth: gauge("history_depth", "Superseded snapshots retained for exact and continued reads."),
		historyBytes: gauge("history_bytes", "Encoded bytes held only by retained history snapshots."),
		historyMax:   gauge("history_max_bytes", "The bound on history_bytes now: the tighter of the byte and ratio bounds; 0 is none."),
		feedBytes:    gauge("feed_bytes", "Bytes held only by the feed of recent changes for watchers: superseded objects no history snapshot holds, deleted objects, shared watch frames."),
		feedMax:      gauge("feed_max_bytes", "The bound on feed_bytes now (the history's bound); 0 is none."),
		gzipBytes:    gauge("gzip_bytes", "Compressed bytes of the gzip chunks cached on the objects of the latest snapshot."),
		rv:           gauge("resource_version", "resourceVersion up to which the store has every change."),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "listproxy", Subsystem: "snapshot", Name: "relists_total",
			Help: "Complete lists that (re)filled a store."}, labels),
		peerLists: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "listproxy", Subsystem: "snapshot", Name: "peer_lists_total",
			Help: "First lists of a store read from a peer replica (--warm-from), by result: ok (the store was filled from it), failed (no list from the peer) or rejected (the peer's list was not shown to be the apiserver's); after failed and rejected the store was listed from the apiserver."}, append(labels, "result")),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "listproxy", Subsystem: "snapshot", Name: "watch_restarts_total",
			Help: "Watches that ended and were re-established, by reason (closed, error, gone, stalled, lagging)."}, append(labels, "reason")),
		watchHealthy: gauge("watch_healthy", "1 while the store's watch is open (the store follows the apiserver), 0 while it lists, relists or reconnects."),
		lastProgress: gauge("last_progress_timestamp_seconds", "Unix time of the store's last complete list, watch event or bookmark."),
	}
	for _, c := range []prometheus.Collector{m.objects, m.bytes, m.historyDepth, m.historyBytes, m.historyMax, m.feedBytes, m.feedMax, m.gzipBytes, m.rv, m.relists, m.peerLists, m.watchRestarts, m.watchHealthy, m.lastProgress} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register snapshot metrics: %w", err)
		}
	}
	return m, nil
}

// StoreObservers are the hooks one store and its feeder report through.
type StoreObservers struct {
	OnPublish      func(Stats)
	OnRelist       func()
	OnWarm         func(err error)
	OnWatchRestart func(reason string)
	OnWatching     func(open bool)
	OnProgress     func(at time.Time)
}

// For returns the observers of one store; a nil *Metrics observes nothing.
func (m *Metrics) For(resource, format string) StoreObservers {
	if m == nil {
		return StoreObservers{}
	}
	objects, bytes := m.objects.WithLabelValues(resource, format), m.bytes.WithLabelValues(resource, format)
	depth, hbytes := m.historyDepth.WithLabelValues(resource, format), m.historyBytes.WithLabelValues(resource, format)
	hmax := m.historyMax.WithLabelValues(resource, format)
	fbytes, fmax := m.feedBytes.WithLabelValues(resource, format), m.feedMax.WithLabelValues(resource, format)
	gzbytes := m.gzipBytes.WithLabelValues(resource, format)
	rv, relists := m.rv.WithLabelValues(resource, format), m.relists.WithLabelValues(resource, format)
	for _, reason := range RestartReasons {
		m.watchRestarts.WithLabelValues(resource, format, reason) // export zeros, so rates start at 0
	}
	healthy, progress := m.watchHealthy.WithLabelValues(resource, format), m.lastProgress.WithLabelValues(resource, format)
	healthy.Set(0)
	return StoreObservers{
		OnPublish: func(s Stats) {
			objects.Set(float64(s.Objects))
			bytes.Set(float64(s.Bytes))
			depth.Set(float64(s.HistoryDepth))
			hbytes.Set(float64(s.HistoryBytes))
			hmax.Set(float64(s.HistoryMaxBytes))
			fbytes.Set(float64(s.FeedBytes))
			fmax.Set(float64(s.FeedMaxBytes))
			gzbytes.Set(float64(s.GzipBytes))
			rv.Set(float64(s.RV))
		},
		OnRelist: relists.Inc,
		OnWarm: func(err error) {
			result := "ok"
			switch {
			case errors.Is(err, ErrWarmRejected):
				result = "rejected"
			case err != nil:
				result = "failed"
			}
			m.peerLists.WithLabelValues(resource, format, result).Inc()
		},
		OnWatchRestart: func(reason string) { m.watchRestarts.WithLabelValues(resource, format, reason).Inc() },
		OnWatching: func(open bool) {
			if open {
				healthy.Set(1)
			} else {
				healthy.Set(0)
			}
		},
		OnProgress: func(at time.Time) { progress.Set(float64(at.UnixNano()) / 1e9) },
	}
}

// Forget removes a dropped store's series.
func (m *Metrics) Forget(resource, format string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.objects, m.bytes, m.historyDepth, m.historyBytes, m.historyMax, m.feedBytes, m.feedMax, m.gzipBytes, m.rv, m.watchHealthy, m.lastProgress} {
		v.DeleteLabelValues(resource, format)
	}
}
