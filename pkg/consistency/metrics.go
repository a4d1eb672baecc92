package consistency

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the results of comparing snapshots with the
// apiserver.
type Metrics struct {
	checks   *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewMetrics registers the consistency-check metrics with reg. A nil
// *Metrics records nothing.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "consistency", Name: "checks_total",
			Help: "Snapshots compared with the apiserver at the same resourceVersion, by resource, format and result (match, mismatch: the resource's stores were dropped to resync, error: inconclusive).",
		}, []string{"resource", "format", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "consistency", Name: "list_duration_seconds",
			Help:    "Time to list one resource's keys and resourceVersions from the apiserver for a consistency check.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	for _, c := range []prometheus.Collector{m.checks, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register consistency metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(resource, format, result string) {
	if m != nil {
		m.checks.WithLabelValues(resource, format, result).Inc()
	}
}

func (m *Metrics) observeList(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}
