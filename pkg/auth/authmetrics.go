package auth

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the "decision" label of listproxy_proxy_authz_decisions_total.
const (
	decisionAllowed = "allowed"
	decisionDenied  = "denied"
	decisionError   = "error"
)

// authMetrics count service mode's authorization decisions.
type authMetrics struct {
	decisions *prometheus.CounterVec
}

func newAuthMetrics(reg prometheus.Registerer) (*authMetrics, error) {
	m := &authMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "proxy",
			Name:      "authz_decisions_total",
			Help:      "Authorization decisions for callers (service mode) by decision (allowed, denied, error) and cache (hit: answered by the decision cache; miss: a SubjectAccessReview was sent).",
		}, []string{"decision", "cache"}),
	}
	if err := reg.Register(m.decisions); err != nil {
		return nil, fmt.Errorf("register authorization metrics: %w", err)
	}
	return m, nil
}

func (m *authMetrics) observe(decision string, missed bool) {
	cache := "hit"
	if missed {
		cache = "miss"
	}
	m.decisions.WithLabelValues(decision, cache).Inc()
}
