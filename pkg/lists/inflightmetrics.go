package lists

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

// InflightMetrics observe the admission of snapshot-served LIST responses
// (InflightConfig).
type InflightMetrics struct {
	inflight      prometheus.Gauge
	inflightBytes prometheus.Gauge
	queued        prometheus.Gauge
	rejections    *prometheus.CounterVec
	queueWait     prometheus.Histogram
	writeTimeouts prometheus.Counter
}

// NewInflightMetrics registers the admission metrics with reg.
func NewInflightMetrics(reg prometheus.Registerer) (*InflightMetrics, error) {
	m := &InflightMetrics{
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "inflight",
			Help: "LIST responses being written from snapshots.",
		}),
		inflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "inflight_bytes",
			Help: "Weight of the LIST responses being written from snapshots: their items' encoded bytes (estimated from the mean object size for pages without selectors), each capped at the byte bound.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "queued",
			Help: "LIST responses waiting for room to be written.",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "rejected_total",
			Help: "LISTs answered 429 for lack of room to write them, by reason (timeout: none within --list-queue-wait; cancelled: the client left while queued).",
		}, []string{"reason"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "queue_wait_seconds",
			Help:    "Time LIST responses waited for room to be written, admitted or not (only those that waited).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		writeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "write_timeouts_total",
			Help: "LIST responses cut short by their write deadline (HTTP/1.1 connection closed, HTTP/2 stream reset).",
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

func (m *InflightMetrics) setInflight(lists int, bytes int64) {
	if m != nil {
		m.inflight.Set(float64(lists))
		m.inflightBytes.Set(float64(bytes))
	}
}

func (m *InflightMetrics) setQueued(n int) {
	if m != nil {
		m.queued.Set(float64(n))
	}
}

func (m *InflightMetrics) rejected(reason string) {
	if m != nil {
		m.rejections.WithLabelValues(reason).Inc()
	}
}

func (m *InflightMetrics) waited(d time.Duration) {
	if m != nil {
		m.queueWait.Observe(d.Seconds())
	}
}

func (m *InflightMetrics) writeTimedOut() {
	if m != nil {
		m.writeTimeouts.Inc()
	}
}
