package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// apiserverEncode encodes status with the JSON serializer the apiserver uses.
func apiserverEncode(t *testing.T, status *metav1.Status) []byte {
	t.Helper()
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	var buf bytes.Buffer
	if err := s.Encode(status, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteStatus(t *testing.T) {
	tests := []struct {
		name       string
		err        *apierrors.StatusError
		wantCode   int
		wantHeader http.Header
		wantStatus *metav1.Status // nil: no body
	}{
		{
			name: "service_unavailable",
			err: &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Message: "listproxy: the apiserver is unavailable: dial tcp 127.0.0.1:6443: connect: connection refused",
				Reason:  metav1.StatusReasonServiceUnavailable,
				Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
				Code:    http.StatusServiceUnavailable,
			}},
			wantCode: http.StatusServiceUnavailable,
			wantHeader: http.Header{
				"Content-Type":  {"application/json"},
				"Cache-Control": {"no-cache, private"},
				"Retry-After":   {"1"},
			},
			wantStatus: &metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure,
				Message:  "listproxy: the apiserver is unavailable: dial tcp 127.0.0.1:6443: connect: connection refused",
				Reason:   metav1.StatusReasonServiceUnavailable,
				Details:  &metav1.StatusDetails{RetryAfterSeconds: 1},
				Code:     http.StatusServiceUnavailable,
			},
		},
		{
			name:     "gone_with_details",
			err:      apierrors.NewResourceExpired("too old resource version: 1 (5)"),
			wantCode: http.StatusGone,
			wantHeader: http.Header{
				"Content-Type":  {"application/json"},
				"Cache-Control": {"no-cache, private"},
			},
			wantStatus: &metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure,
				Message:  "too old resource version: 1 (5)",
				Reason:   metav1.StatusReasonExpired,
				Code:     http.StatusGone,
			},
		},
		{
			name:     "failure_without_code_is_500",
			err:      &apierrors.StatusError{ErrStatus: metav1.Status{Message: "boom"}},
			wantCode: http.StatusInternalServerError,
			wantHeader: http.Header{
				"Content-Type":  {"application/json"},
				"Cache-Control": {"no-cache, private"},
			},
			wantStatus: &metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure,
				Message:  "boom",
				Code:     http.StatusInternalServerError,
			},
		},
		{
			name:       "no_content",
			err:        &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusNoContent}},
			wantCode:   http.StatusNoContent,
			wantHeader: http.Header{"Cache-Control": {"no-cache, private"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteStatus(rec, tc.err)
			if rec.Code != tc.wantCode {
				t.Errorf("code = %d, want %d", rec.Code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantHeader, rec.Header()); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			var want []byte
			if tc.wantStatus != nil {
				want = apiserverEncode(t, tc.wantStatus)
			}
			if diff := cmp.Diff(string(want), rec.Body.String()); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}
