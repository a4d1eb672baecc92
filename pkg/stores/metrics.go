package stores

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the stores the registry did not start.
type Metrics struct {
	refusedTotal       *prometheus.CounterVec
	tableMismatchTotal *prometheus.CounterVec
}

// NewMetrics registers the registry's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "listproxy", Subsystem: "stores", Name: "refused_total",
		Help: "Requests for which a snapshot store that was not running was not started, by resource and reason (not_authorized: the caller may not list the resource cluster-wide; over_budget: the stores hold --max-store-bytes); they pass through.",
	}, []string{"resource", "reason"}),
		tableMismatchTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "stores", Name: "table_mismatches_total",
			Help: "Table rows whose clock-relative cells were not what listproxy's rule gives for the time they were received, by resource; that resource's Tables then pass through for 10 minutes.",
		}, []string{"resource"}),
	}
	for _, c := range []prometheus.Collector{m.refusedTotal, m.tableMismatchTotal} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register store metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) tableMismatch(resource string) {
	if m != nil {
		m.tableMismatchTotal.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) refused(resource, reason string) {
	if m != nil {
		m.refusedTotal.WithLabelValues(resource, reason).Inc()
	}
}
