package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a /metrics page: sample name → samples. A
// histogram's samples are under NAME_bucket (with an "le" label), NAME_sum
// and NAME_count, a summary's under NAME (with "quantile"), NAME_sum and
// NAME_count, as the text exposition writes them.
type Metrics map[string][]Sample

// Sample is one sample of a scrape.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Matches reports whether s has every label pair, each written as in the
// exposition format: key="value".
func (s Sample) Matches(pairs ...string) bool {
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return false
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		if have, ok := s.Labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// Sum adds up the samples of name that have every label pair (key="value").
func (m Metrics) Sum(name string, pairs ...string) float64 {
	total := 0.0
	for _, s := range m[name] {
		if s.Matches(pairs...) {
			total += s.Value
		}
	}
	return total
}

// ByLabel adds up the samples of name that have every label pair, by the
// value of label key; values that sum to 0 are left out.
func (m Metrics) ByLabel(name, key string, pairs ...string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[name] {
		if s.Matches(pairs...) && s.Value != 0 {
			out[s.Labels[key]] += s.Value
		}
	}
	return out
}

// Has reports whether name has a sample with every label pair.
func (m Metrics) Has(name string, pairs ...string) bool {
	for _, s := range m[name] {
		if s.Matches(pairs...) {
			return true
		}
	}
	return false
}

// ScrapeMetrics reads and parses the /metrics page at url with client (nil:
// http.DefaultClient).
func ScrapeMetrics(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("scrape %s: %s: %s", url, resp.Status, body)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return m, nil
}

// ParseMetrics parses a Prometheus text exposition.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	m := Metrics{}
	for name, f := range families {
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range metric.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(name string, labels map[string]string, v float64) {
				m[name] = append(m[name], Sample{Labels: labels, Value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, labels, metric.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, labels, metric.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := metric.GetHistogram()
				for _, b := range h.GetBucket() {
					count := float64(b.GetCumulativeCount())
					if b.CumulativeCountFloat != nil {
						count = b.GetCumulativeCountFloat()
					}
					add(name+"_bucket", withLabel(labels, "le", b.GetUpperBound()), count)
				}
				count := float64(h.GetSampleCount())
				if h.SampleCountFloat != nil {
					count = h.GetSampleCountFloat()
				}
				add(name+"_sum", labels, h.GetSampleSum())
				add(name+"_count", labels, count)
			case dto.MetricType_SUMMARY:
				s := metric.GetSummary()
				for _, q := range s.GetQuantile() {
					add(name, withLabel(labels, "quantile", q.GetQuantile()), q.GetValue())
				}
				add(name+"_sum", labels, s.GetSampleSum())
				add(name+"_count", labels, float64(s.GetSampleCount()))
			default:
				add(name, labels, metric.GetUntyped().GetValue())
			}
		}
	}
	return m, nil
}

// withLabel returns labels and key with the bound or quantile v, written as
// the text exposition writes it ("0.5", "+Inf").
func withLabel(labels map[string]string, key string, v float64) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		out[k] = v
	}
	out[key] = strconv.FormatFloat(v, 'g', -1, 64)
	return out
}
