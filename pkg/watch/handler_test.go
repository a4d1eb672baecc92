package watch

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// stores resolves every watch to nothing, with or without a rejection.
type stores struct{ reject func(http.ResponseWriter) }

func (stores) Cacheable(*http.Request, string, string) bool { return true }

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
