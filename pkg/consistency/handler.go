package consistency

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// Handler serves a Checker over HTTP (cmd mounts it on the edge at
// /debug/listproxy/consistency): POST runs a check now and answers its
// Report; GET answers the last report (404 before any).
func Handler(checker interface {
	Check(ctx context.Context) Report
	Last() (Report, bool)
}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			writeJSON(w, checker.Check(r.Context()))
		case http.MethodGet, http.MethodHead:
			report, ok := checker.Last()
			if !ok {
				httpapi.WriteStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
					Status:  metav1.StatusFailure,
					Code:    http.StatusNotFound,
					Reason:  metav1.StatusReasonNotFound,
					Message: "no consistency check has run yet; POST to " + r.URL.Path + " runs one",
					Details: &metav1.StatusDetails{},
				}})
				return
			}
			writeJSON(w, report)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			httpapi.WriteStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusMethodNotAllowed,
				Reason:  metav1.StatusReasonMethodNotAllowed,
				Message: fmt.Sprintf("%s is not allowed on %s; use GET or POST", r.Method, r.URL.Path),
			}})
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		klog.V(2).InfoS("Writing debug response failed", "err", err)
	}
}
