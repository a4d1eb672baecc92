package lists

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// ListMetrics count how cacheable LISTs were answered.
type ListMetrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	stale     *prometheus.CounterVec
}

// NewListMetrics registers the list metrics with reg.
func NewListMetrics(reg prometheus.Registerer) (*ListMetrics, error) {
	m := &ListMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "total",
			Help: "LIST requests by resource, who answered (snapshot, apiserver) and why (a fixed set of reasons).",
		}, []string{"resource", "source", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "lists", Name: "snapshot_duration_seconds",
			Help:    "Time to answer a LIST from a snapshot, by resource, including any wait for freshness.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"resource"}),
	}
	m.stale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "listproxy", Subsystem: "lists", Name: "served_stale_total",
		Help: "LISTs answered from the latest snapshot (resourceVersion=0, or a NotOlderThan already met) while the store's watch was down, so possibly behind the apiserver.",
	}, []string{"resource"})
	for _, c := range []prometheus.Collector{m.decisions, m.duration, m.stale} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register list metrics: %w", err)
		}
	}
	return m, nil
}

func (m *ListMetrics) passThrough(resource string, reason Reason) {
	if m != nil {
		m.decisions.WithLabelValues(resource, httpapi.SourceAPIServer, string(reason)).Inc()
	}
}

func (m *ListMetrics) served(resource string, reason Reason, d time.Duration) {
	if m != nil {
		m.decisions.WithLabelValues(resource, httpapi.SourceSnapshot, string(reason)).Inc()
		m.duration.WithLabelValues(resource).Observe(d.Seconds())
	}
}

func (m *ListMetrics) servedStale(resource string) {
	if m != nil {
		m.stale.WithLabelValues(resource).Inc()
	}
}
