package watch

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listproxy/listproxy/pkg/wire"
)

// Reasons a served watch ended (the "reason" label of
// listproxy_watch_ended_total).
const (
	// EndTimeout: timeoutSeconds or the randomized deadline passed.
	EndTimeout = "timeout"
	// EndClientGone: the client went away or a write failed.
	EndClientGone = "client_gone"
	// EndTooSlow: a write did not complete within the write timeout (or
	// initial events by their admission's deadline).
	EndTooSlow = "too_slow"
	// EndExpired: the watcher fell further behind than the store's history
	// of changes and was answered, as the apiserver answers a watch from
	// before its history, with a 410 Expired ERROR event.
	EndExpired = "expired"
	// EndStoreReset: the store broke continuity (relist, resource gone,
	// dropped, listproxy stopping).
	EndStoreReset = "store_reset"
	// EndShutdown: listproxy is shutting down.
	EndShutdown = "shutdown"
	// EndError: the watch was answered with one ERROR event, as the
	// apiserver answers a watch-list from a resourceVersion etcd has not
	// reached ("Too large resource version").
	EndError = "error"
)

// Metrics are the watch server's metrics. A nil *Metrics records nothing.
type Metrics struct {
	open          *prometheus.GaugeVec
	served        *prometheus.CounterVec
	events        *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	initialBytes  *prometheus.CounterVec
	endedTotal    *prometheus.CounterVec
	fanoutSeconds *prometheus.HistogramVec
	passThrough   *prometheus.CounterVec
	changesRead   *prometheus.CounterVec
}

// NewMetrics registers the watch metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"resource", "format"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "listproxy", Subsystem: "watch", Name: name, Help: help}, append(append([]string(nil), labels...), extra...))
	}
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "listproxy", Subsystem: "watch", Name: "open",
			Help: "Watches listproxy is serving from snapshot stores."}, labels),
		served: counter("served_total", "Watches listproxy started serving, by how they start (initial_consistent, initial_latest, initial_not_older_than, from).", "start"),
		events: counter("events_total", "Watch events sent (initial ADDED events included), by type.", "type"),
		bytes:  counter("sent_bytes_total", "Bytes of watch events sent."),
		initialBytes: counter("initial_bytes_total",
			"Bytes of the initial events and their end bookmark sent to watch-lists."),
		changesRead: counter("changes_read_total",
			"Changes that watchers read from their store's feed and checked against their selectors, whether or not an event was sent; per change of the store, the fan-out (watchers of one node, namespace or shard read only their own changes)."),
		endedTotal: counter("ended_total", "Served watches that ended, by reason (timeout, client_gone, too_slow, expired, store_reset, shutdown, error).", "reason"),
		passThrough: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "listproxy", Subsystem: "watch", Name: "passed_through_total",
			Help: "Watches passed through to the apiserver, by why listproxy did not serve them."}, []string{"resource", "reason"}),
		fanoutSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "listproxy", Subsystem: "watch", Name: "fanout_delay_seconds",
			Help:    "Time from a change being applied to the store to its event being written to a watcher.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}}, labels),
	}
	for _, c := range []prometheus.Collector{m.open, m.served, m.events, m.bytes, m.initialBytes, m.endedTotal, m.fanoutSeconds, m.passThrough, m.changesRead} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register watch metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) started(labels []string, start Reason) {
	if m == nil {
		return
	}
	m.open.WithLabelValues(labels...).Inc()
	m.served.WithLabelValues(labels[0], labels[1], string(start)).Inc()
}

func (m *Metrics) stopped(labels []string) {
	if m == nil {
		return
	}
	m.open.WithLabelValues(labels...).Dec()
}

func (m *Metrics) event(labels []string, t wire.EventType) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(labels[0], labels[1], string(t)).Inc()
}

// eventN counts n events of type t at once.
func (m *Metrics) eventN(labels []string, t wire.EventType, n int) {
	if m == nil || n == 0 {
		return
	}
	m.events.WithLabelValues(labels[0], labels[1], string(t)).Add(float64(n))
}

func (m *Metrics) sent(labels []string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.bytes.WithLabelValues(labels...).Add(float64(n))
}

func (m *Metrics) initial(labels []string, n int) {
	if m == nil {
		return
	}
	m.initialBytes.WithLabelValues(labels...).Add(float64(n))
}

func (m *Metrics) read(labels []string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.changesRead.WithLabelValues(labels...).Add(float64(n))
}

func (m *Metrics) ended(labels []string, reason string) {
	if m == nil {
		return
	}
	m.endedTotal.WithLabelValues(labels[0], labels[1], reason).Inc()
}

func (m *Metrics) fanout(labels []string, d time.Duration) {
	if m == nil {
		return
	}
	m.fanoutSeconds.WithLabelValues(labels...).Observe(d.Seconds())
}

func (m *Metrics) passedThrough(resource string, reason Reason) {
	if m == nil {
		return
	}
	m.passThrough.WithLabelValues(resource, string(reason)).Inc()
}
