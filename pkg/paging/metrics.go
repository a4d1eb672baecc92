package paging

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// ContinueOutcome is what became of a request carrying our continue token.
type ContinueOutcome string

// Continue outcomes, the values of the outcome label.
const (
	// ContinueServed: the page was served from a snapshot.
	ContinueServed ContinueOutcome = "served"
	// ContinueDelegated: the rest of the list went to the apiserver with a
	// native token.
	ContinueDelegated ContinueOutcome = "delegated"
	// ContinueExpired: the token's RV was compacted; 410 Expired.
	ContinueExpired ContinueOutcome = "expired"
	// ContinueInvalid: the token failed to open or did not match; 400.
	ContinueInvalid ContinueOutcome = "invalid"
)

// Metrics are the paging package's Prometheus metrics.
type Metrics struct {
	continueTokens *prometheus.CounterVec
}

// NewMetrics creates the paging metrics and registers them with reg (nil
// reg: unregistered). A nil *Metrics records nothing.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		continueTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "paging",
			Name:      "continue_tokens_total",
			Help:      "Requests carrying a listproxy continue token, by outcome (served, delegated, expired, invalid).",
		}, []string{"outcome"}),
	}
	// Export every outcome from the start, so rates work before the first.
	for _, o := range []ContinueOutcome{ContinueServed, ContinueDelegated, ContinueExpired, ContinueInvalid} {
		m.continueTokens.WithLabelValues(string(o))
	}
	if reg != nil {
		if err := reg.Register(m.continueTokens); err != nil {
			return nil, fmt.Errorf("register paging metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveContinue counts one request with our continue token. A nil
// *Metrics counts nothing.
func (m *Metrics) ObserveContinue(o ContinueOutcome) {
	if m == nil {
		return
	}
	m.continueTokens.WithLabelValues(string(o)).Inc()
}
