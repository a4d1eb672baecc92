package stores

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listproxy/listproxy/pkg/table"
)

// Metrics count the stores the registry did not start, and the Table rows
// its Table stores did not take.
type Metrics struct {
	refusedTotal       *prometheus.CounterVec
	tableMismatchTotal *prometheus.CounterVec
	tableClockAhead    prometheus.Histogram
}

// The reasons of listproxy_stores_table_mismatches_total.
const (
	// tableRejectClockSkew: a clock cell follows its rule only for an
	// instant beyond the tolerated skew, within a minute of it
	// (table.ErrClockSkew).
	tableRejectClockSkew = "clock_skew"
	// tableRejectRule: a cell is not what its rule gives (table.ErrMismatch).
	tableRejectRule = "rule"
	// tableRejectMalformed: the row could not be read.
	tableRejectMalformed = "malformed"
)

// NewMetrics registers the registry's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "listproxy", Subsystem: "stores", Name: "refused_total",
		Help: "Requests for which a snapshot store that was not running was not started, by resource and reason (not_authorized: the caller may not list the resource cluster-wide; over_budget: the stores hold --max-store-bytes); they pass through.",
	}, []string{"resource", "reason"}),
		tableMismatchTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy", Subsystem: "stores", Name: "table_mismatches_total",
			Help: "Table rows not stored because a cell was not what listproxy's rule gives for the time they were received, by resource and reason (clock_skew: only for an instant beyond the tolerated clock skew; rule; malformed); the store lists again, and 3 within an hour refuse the resource's Tables for 10 minutes.",
		}, []string{"resource", "reason"}),
		tableClockAhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "listproxy", Subsystem: "stores", Name: "table_clock_ahead_seconds",
			Help:    "Table rows taken whose clock cells show the apiserver's clock ahead of listproxy's: by how much at least (rows up to 2 s ahead are taken).",
			Buckets: []float64{0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, table.MaxClockSkew.Seconds()},
		}),
	}
	for _, c := range []prometheus.Collector{m.refusedTotal, m.tableMismatchTotal, m.tableClockAhead} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register store metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) tableMismatch(resource, reason string) {
	if m != nil {
		m.tableMismatchTotal.WithLabelValues(resource, reason).Inc()
	}
}

// tableAhead observes a row taken whose clock cells show the apiserver
// ahead of listproxy by at least ahead (more than 0).
func (m *Metrics) tableAhead(ahead time.Duration) {
	if m != nil {
		m.tableClockAhead.Observe(ahead.Seconds())
	}
}

func (m *Metrics) refused(resource, reason string) {
	if m != nil {
		m.refusedTotal.WithLabelValues(resource, reason).Inc()
	}
}
