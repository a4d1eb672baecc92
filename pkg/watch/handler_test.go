package watch

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fixedStores says every watch is of a resource it cannot serve.
type fixedStores struct{ resource, reason string }

func (s fixedStores) Cacheable(*http.Request, string, string) (string, string, bool) {
	return s.resource, s.reason, false
}

func (s fixedStores) Resolve(*http.Request, string, string) (Target, func(), string, bool) {
	return Target{Resource: s.resource}, func() {}, s.reason, false
}

// TestHandlerPassedThrough: a watch the edge passes through unoffered is
// counted with the edge's reason, or with the reason Cacheable had.
func TestHandlerPassedThrough(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewServer(Config{Metrics: m}), fixedStores{resource: "pods", reason: "media_type"})
	tests := []struct {
		query, reason           string
		wantResource, wantLabel string
	}{
		{query: "watch=1", reason: "impersonation", wantLabel: "impersonation"},
		{query: "watch=1", wantResource: "pods", wantLabel: "media_type"},
		{query: "watch=1&bogus=1", wantLabel: "query"},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?"+tc.query, nil)
		if h.Cacheable(r) {
			t.Fatalf("%s: cacheable", tc.query)
		}
		h.PassedThrough(r, tc.reason)
		if got := testutil.ToFloat64(m.passThrough.WithLabelValues(tc.wantResource, tc.wantLabel)); got != 1 {
			t.Errorf("%s %q: passed_through_total{resource=%q,reason=%q} = %v, want 1", tc.query, tc.reason, tc.wantResource, tc.wantLabel, got)
		}
	}
}

// stores resolves every watch to nothing, with or without a rejection.
type stores struct{ reject func(http.ResponseWriter) }

func (stores) Cacheable(*http.Request, string, string) (string, string, bool) {
	return "pods", "", true
}

func (s stores) Resolve(*http.Request, string, string) (Target, func(), string, bool) {
	return Target{Resource: "pods", Reject: s.reject}, func() {}, "not_synced", false
}

// A watch Stores declines passes through, unless Stores rejects it: then
// the rejection is the answer.
func TestHandlerRejectOrPassThrough(t *testing.T) {
	tests := []struct {
		name       string
		reject     func(http.ResponseWriter)
		wantServed bool
		wantCode   int
	}{
		{name: "pass_through", wantServed: false, wantCode: http.StatusOK},
		{name: "rejected", reject: func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }, wantServed: true, wantCode: http.StatusTooManyRequests},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler(NewServer(Config{}), stores{reject: tc.reject})
			rec := httptest.NewRecorder()
			served := h.ServeWatch(rec, httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1", nil))
			if served != tc.wantServed || rec.Code != tc.wantCode {
				t.Errorf("ServeWatch = %v with HTTP %d, want %v with %d", served, rec.Code, tc.wantServed, tc.wantCode)
			}
		})
	}
}
