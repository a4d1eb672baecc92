package admission

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the "reason" label of listproxy_lists_rejected_total.
const (
	rejectedTimeout   = "timeout"   // no room within the queue wait
	rejectedCancelled = "cancelled" // the client left while queued
)

// Metrics observe the admission of snapshot-served responses (Config): LIST
// responses and watch-lists' initial events. They keep the names they had
// when only LISTs were admitted (listproxy_lists_*); their help says what
// they count. A nil *Metrics records nothing.
type Metrics struct {
	inflight      prometheus.Gauge
	inflightBytes prometheus.Gauge
	queued        prometheus.Gauge
	rejections    *prometheus.CounterVec
	queueWait     prometheus.Histogram
	writeTimeouts prometheus.Counter
}

// NewMetrics registers the admission metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "inflight",
			Help: "LIST responses, and watch-lists' initial events, being written from snapshots.",
		}),
		inflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "inflight_bytes",
			Help: "Weight of the LIST responses and watch-lists' initial events being written from snapshots: their items' encoded bytes (estimated from the mean object size for pages without selectors), each capped at the byte bound.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "queued",
			Help: "LIST responses and watch-lists waiting for room to be written.",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "rejected_total",
			Help: "LISTs and watch-lists answered 429 for lack of room to write them, by reason (timeout: none within --list-queue-wait; cancelled: the client left while queued).",
		}, []string{"reason"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "queue_wait_seconds",
			Help:    "Time LIST responses and watch-lists waited for room to be written, admitted or not (only those that waited).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		writeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "write_timeouts_total",
			Help: "LIST responses cut short by their write deadline (HTTP/1.1 connection closed, HTTP/2 stream reset); a watch-list cut short counts in listproxy_watch_ended_total as too_slow.",
		}),
	}
	for _, c := range []prometheus.Collector{m.inflight, m.inflightBytes, m.queued, m.rejections, m.queueWait, m.writeTimeouts} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register in-flight list metrics: %w", err)
		}
	}
	for _, reason := range []string{rejectedTimeout, rejectedCancelled} {
		m.rejections.WithLabelValues(reason)
	}
	return m, nil
}

func (m *Metrics) setInflight(lists int, bytes int64) {
	if m != nil {
		m.inflight.Set(float64(lists))
		m.inflightBytes.Set(float64(bytes))
	}
}

func (m *Metrics) setQueued(n int) {
	if m != nil {
		m.queued.Set(float64(n))
	}
}

func (m *Metrics) rejected(reason string) {
	if m != nil {
		m.rejections.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) waited(d time.Duration) {
	if m != nil {
		m.queueWait.Observe(d.Seconds())
	}
}

func (m *Metrics) writeTimedOut() {
	if m != nil {
		m.writeTimeouts.Inc()
	}
}
