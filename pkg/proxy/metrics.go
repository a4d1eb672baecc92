package proxy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP edge's Prometheus metrics.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	sharded  *prometheus.CounterVec
}

// durationBuckets span the apiserver's apiserver_request_duration_seconds
// range (5ms to 60s), coarser. Not yet measured for listproxy. Watches and
// other long-running requests observe their whole lifetime; read them by verb.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "http",
			Name:      "requests_total",
			Help:      "API requests by Kubernetes verb, HTTP status code and source (apiserver: passed through; snapshot: served by listproxy). Code 499: the client left before an answer.",
		}, []string{"verb", "code", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "listproxy",
			Subsystem: "http",
			Name:      "request_duration_seconds",
			Help:      "API request duration by Kubernetes verb and source, until the response is complete (watches: their lifetime).",
			Buckets:   durationBuckets,
		}, []string{"verb", "source"}),
		sharded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listproxy",
			Subsystem: "http",
			Name:      "sharded_requests_total",
			Help:      "API requests with a shardSelector (sharded list and watch) by Kubernetes verb and source, counted in requests_total too.",
		}, []string{"verb", "source"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.sharded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts one API request; sharded says it had a shardSelector.
func (m *metrics) observe(verb, source string, code int, d time.Duration, sharded bool) {
	m.requests.WithLabelValues(verb, strconv.Itoa(code), source).Inc()
	m.duration.WithLabelValues(verb, source).Observe(d.Seconds())
	if sharded {
		m.sharded.WithLabelValues(verb, source).Inc()
	}
}
