package freshness

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Watch restart reasons, the values of the reason label of
// listproxy_freshness_watch_restarts_total.
const (
	// restartCompacted: the revision the watch (re)started from was compacted.
	restartCompacted = "compacted"
	// restartError: etcd cancelled the watch with an error (e.g. no leader).
	restartError = "error"
	// restartClosed: the watch channel closed without a response (e.g. the
	// client was closed).
	restartClosed = "closed"
)

// Probe results, the values of the result label of
// listproxy_freshness_probes_total.
const (
	probeOK    = "ok"
	probeError = "error"
)

// metrics are the freshness package's Prometheus metrics. A nil *metrics is
// not valid; newMetrics(nil) builds unregistered ones.
type metrics struct {
	probeDuration     prometheus.Histogram
	probes            *prometheus.CounterVec
	probeWaiters      prometheus.Counter
	progressRequests  prometheus.Counter
	watchRestarts     *prometheus.CounterVec
	compactedRevision prometheus.Gauge
}

// newMetrics creates the freshness metrics and registers them with reg (nil
// reg: unregistered).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		probeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "probe_duration_seconds",
			Help:      "Duration of linearizable etcd reads of the current revision.",
			// 0.5ms .. ~4s. Not yet measured against production etcd.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "probes_total",
			Help:      "Linearizable etcd reads of the current revision, by result (ok, error).",
		}, []string{"result"}),
		probeWaiters: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "probe_waiters_total",
			Help:      "Callers answered by a current-revision probe; probes_total / probe_waiters_total is probes per consistent read.",
		}),
		progressRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "progress_requests_total",
			Help:      "etcd watch RequestProgress calls sent on the trackers' watch stream.",
		}),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "watch_restarts_total",
			Help:      "Tracker watches re-established, by reason (compacted, error, closed).",
		}, []string{"reason"}),
		compactedRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy",
			Subsystem: "freshness",
			Name:      "compacted_revision",
			Help:      "Last known etcd compacted revision (0 if none).",
		}),
	}
	// Export every label value from the start, so rates work before the first.
	for _, r := range []string{probeOK, probeError} {
		m.probes.WithLabelValues(r)
	}
	for _, r := range []string{restartCompacted, restartError, restartClosed} {
		m.watchRestarts.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.probeDuration, m.probes, m.probeWaiters, m.progressRequests, m.watchRestarts, m.compactedRevision} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register freshness metrics: %w", err)
			}
		}
	}
	return m, nil
}

// unregisteredMetrics are metrics registered nowhere (which cannot fail).
func unregisteredMetrics() *metrics {
	m, _ := newMetrics(nil)
	return m
}

func (m *metrics) observeProbe(d time.Duration, err error) {
	m.probeDuration.Observe(d.Seconds())
	if err != nil {
		m.probes.WithLabelValues(probeError).Inc()
		return
	}
	m.probes.WithLabelValues(probeOK).Inc()
}
