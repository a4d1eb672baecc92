package framework_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/listproxy/listproxy/test/framework"
)

func TestScrapeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	lists := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lists_total"}, []string{"resource", "source"})
	objects := prometheus.NewGauge(prometheus.GaugeOpts{Name: "objects"})
	waits := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "wait_seconds", Buckets: []float64{0.5, 2}}, []string{"outcome"})
	reg.MustRegister(lists, objects, waits)
	lists.WithLabelValues("pods", "snapshot").Add(3)
	lists.WithLabelValues("pods", "apiserver").Add(2)
	lists.WithLabelValues(`a "quoted", odd=value`, "snapshot").Inc()
	objects.Set(40)
	waits.WithLabelValues("served").Observe(0.1)
	waits.WithLabelValues("served").Observe(1)
	waits.WithLabelValues("served").Observe(5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	m, err := framework.ScrapeMetrics(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		pairs []string
		want  float64
	}{
		{name: "lists_total", want: 6},
		{name: "lists_total", pairs: []string{`resource="pods"`}, want: 5},
		{name: "lists_total", pairs: []string{`resource="pods"`, `source="snapshot"`}, want: 3},
		{name: "lists_total", pairs: []string{`resource="a \"quoted\", odd=value"`}, want: 1},
		{name: "lists_total", pairs: []string{`resource="nodes"`}, want: 0},
		{name: "objects", want: 40},
		{name: "wait_seconds_count", pairs: []string{`outcome="served"`}, want: 3},
		{name: "wait_seconds_sum", want: 6.1},
		{name: "wait_seconds_bucket", pairs: []string{`le="0.5"`}, want: 1},
		{name: "wait_seconds_bucket", pairs: []string{`le="2"`}, want: 2},
		{name: "wait_seconds_bucket", pairs: []string{`le="+Inf"`}, want: 3},
		{name: "missing_total", want: 0},
	}
	for _, tc := range tests {
		if got := m.Sum(tc.name, tc.pairs...); got != tc.want {
			t.Errorf("Sum(%s, %q) = %v, want %v", tc.name, tc.pairs, got, tc.want)
		}
		if got, want := m.Has(tc.name, tc.pairs...), tc.want != 0; got != want {
			t.Errorf("Has(%s, %q) = %v, want %v", tc.name, tc.pairs, got, want)
		}
	}
	if _, err := framework.ScrapeMetrics(context.Background(), srv.Client(), srv.URL+"/missing\x7f"); err == nil {
		t.Error("scraping a bad URL succeeded")
	}
}
