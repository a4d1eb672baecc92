package freshness

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric of the package is declared and registered here, in three
// sets: the Checker's (etcd), the proofs through the apiserver's (one set
// per APIServer), and the consistent reads' of every Prover (ReadMetrics).
// Each set registers through register.

// register registers cs with reg, or nothing when reg is nil; what names
// the set in the error.
func register(reg prometheus.Registerer, what string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register %s metrics: %w", what, err)
		}
	}
	return nil
}

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

// metrics are the Checker's (etcd) metrics. A nil *metrics is not valid;
// newMetrics(nil) builds unregistered ones.
type metrics struct {
	probeDuration     prometheus.Histogram
	probes            *prometheus.CounterVec
	probeWaiters      prometheus.Counter
	progressRequests  prometheus.Counter
	watchRestarts     *prometheus.CounterVec
	compactedRevision prometheus.Gauge
}

// newMetrics creates the Checker's metrics and registers them with reg (nil
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
	if err := register(reg, "freshness", m.probeDuration, m.probes, m.probeWaiters, m.progressRequests, m.watchRestarts, m.compactedRevision); err != nil {
		return nil, err
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

// Proof paths and auxiliary watch results: metric label values.
const (
	pathFast         = "fast"
	pathAux          = "aux"
	pathNoBookmarks  = "no_bookmarks"
	pathInconclusive = "inconclusive"
	pathTimeout      = "timeout"
	// pathDirectCheaper: the fast path did not prove a small read, which
	// passes through instead of waiting for an auxiliary watch.
	pathDirectCheaper = "direct_cheaper"
	// pathState: a state probe showed the store's snapshot.
	pathState = "state"

	auxBookmark = "bookmark"
	// auxNoBookmark: no bookmark, and none in the stores' feeds lately.
	auxNoBookmark = "no_bookmark"
	// auxMissedBookmark: no bookmark, though the stores' feeds see them:
	// the instance that answered was behind, or dropped it.
	auxMissedBookmark = "missed_bookmark"
	auxExpired        = "expired"
	auxError          = "error"
)

// apiserverMetrics are an APIServer's metrics, shared by its resources.
type apiserverMetrics struct {
	probeDuration *prometheus.HistogramVec
	proofs        *prometheus.CounterVec
	auxWatches    *prometheus.CounterVec
	auxLead       prometheus.Histogram
	noBookmarks   *prometheus.GaugeVec
}

// newAPIServerMetrics creates the metrics of the proofs through the
// apiserver and registers them with reg (nil reg: unregistered).
func newAPIServerMetrics(reg prometheus.Registerer) (*apiserverMetrics, error) {
	m := &apiserverMetrics{
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "apiserver_probe_duration_seconds",
			Help:    "Duration of the name-scoped consistent LISTs that read a resource's current revision through the apiserver, by result (ok, error).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 13),
		}, []string{"result"}),
		proofs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "apiserver_proofs_total",
			Help: "Proofs through the apiserver by resource and path: fast (the store's own feed), aux (an auxiliary watch), no_bookmarks (the resource's watches carry none), inconclusive (auxiliary watches fell short), timeout (the read's proof budget ran out first), direct_cheaper (the fast path did not prove a small read, which passed through without an auxiliary watch).",
		}, []string{"resource", "path"}),
		auxWatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "aux_watches_total",
			Help: "Auxiliary watches by resource and how they ended: bookmark; no_bookmark (at their deadline, and the resource's feeds saw no bookmark lately either); missed_bookmark (at their deadline, though the feeds see bookmarks: the instance that answered was behind, or dropped it); expired; error.",
		}, []string{"resource", "result"}),
		noBookmarks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "apiserver_no_bookmarks",
			Help: "1 while a resource is taken to have no watch bookmarks (several auxiliary watches in a row ended without one, and its feeds saw none): its consistent reads are proven only by its own feed's events, else pass through; 0 otherwise.",
		}, []string{"resource"}),
		auxLead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "aux_bookmark_lead_revisions",
			Help:    "For reads proven by an auxiliary watch: by how many revisions the watch's bookmark (or event) passed the probed revision (B − R); near 0, the bookmark came just in time.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
	}
	for _, r := range []string{probeOK, probeError} {
		m.probeDuration.WithLabelValues(r)
	}
	if err := register(reg, "apiserver proof", m.probeDuration, m.proofs, m.auxWatches, m.auxLead, m.noBookmarks); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *apiserverMetrics) observeProbe(d time.Duration, err error) {
	result := probeOK
	if err != nil {
		result = probeError
	}
	m.probeDuration.WithLabelValues(result).Observe(d.Seconds())
}

// exportResource exports every path and result of resource from the start,
// so that rates work before the first of each.
func (m *apiserverMetrics) exportResource(resource string) {
	for _, path := range []string{pathFast, pathAux, pathNoBookmarks, pathInconclusive, pathTimeout, pathDirectCheaper, pathState} {
		m.proofs.WithLabelValues(resource, path)
	}
	for _, result := range []string{auxBookmark, auxNoBookmark, auxMissedBookmark, auxExpired, auxError} {
		m.auxWatches.WithLabelValues(resource, result)
	}
	m.noBookmarks.WithLabelValues(resource)
}

func (m *apiserverMetrics) proof(resource, path string) {
	m.proofs.WithLabelValues(resource, path).Inc()
}

func (m *apiserverMetrics) auxWatch(resource, result string) {
	m.auxWatches.WithLabelValues(resource, result).Inc()
}

// ReadMetrics count consistent reads by outcome.
type ReadMetrics struct {
	outcomes         *prometheus.CounterVec
	wait             *prometheus.HistogramVec
	prefixMismatches *prometheus.CounterVec
}

// NewReadMetrics registers the consistent-read metrics with reg (nil reg:
// unregistered). A nil *ReadMetrics records nothing.
func NewReadMetrics(reg prometheus.Registerer) (*ReadMetrics, error) {
	m := &ReadMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "freshness", Name: "consistent_reads_total",
			Help: "Consistent LISTs by resource and outcome (served, or why freshness was not proven: probe_failed, progress_timeout, snapshot_timeout, prefix_unverified, no_bookmarks, direct_cheaper).",
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
	if err := register(reg, "consistent-read", m.outcomes, m.wait, m.prefixMismatches); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *ReadMetrics) observe(resource string, outcome Outcome, d time.Duration) {
	if m != nil {
		m.outcomes.WithLabelValues(resource, string(outcome)).Inc()
		m.wait.WithLabelValues(string(outcome)).Observe(d.Seconds())
	}
}

func (m *ReadMetrics) prefixMismatch(resource string) {
	if m != nil {
		m.prefixMismatches.WithLabelValues(resource).Inc()
	}
}
