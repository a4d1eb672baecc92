package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// unavailableRetryAfterSeconds is sent as Retry-After with 503s listproxy
// makes itself, so that client-go retries them (it retries 5xx only with
// Retry-After). Not measured: one second is the apiserver's own choice for
// its 429s.
const unavailableRetryAfterSeconds = 1

// WriteStatus writes err as the apiserver writes an error: a JSON
// metav1.Status (kind Status, apiVersion v1) with the status code err
// carries, Retry-After when err's details ask for it, and the headers the
// apiserver sets on every response. A Status without Status is a Failure; a
// Failure without Code is a 500, as in the apiserver's ErrorToAPIStatus.
//
// Unlike the apiserver, WriteStatus does not negotiate the content type:
// clients of every media type decode a JSON Status.
func WriteStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	if status.Status == "" {
		status.Status = metav1.StatusFailure
	}
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
		if status.Status == metav1.StatusSuccess {
			status.Code = http.StatusOK
		}
	}
	status.Kind = "Status"
	status.APIVersion = "v1"

	hdr := w.Header()
	// Set by the apiserver's WithCacheControl filter on every response.
	hdr.Set("Cache-Control", "no-cache, private")
	if status.Details != nil && status.Details.RetryAfterSeconds > 0 {
		hdr.Set("Retry-After", strconv.Itoa(int(status.Details.RetryAfterSeconds)))
	}
	if status.Code == http.StatusNoContent {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Del("Content-Length")
	w.WriteHeader(int(status.Code))
	// json.Encoder ends the body with a newline, as the apiserver's encoder does.
	if err := json.NewEncoder(w).Encode(&status); err != nil {
		klog.V(2).InfoS("Writing Status failed", "err", err)
	}
}

// unavailableError is the 503 for a request the apiserver did not answer.
func unavailableError(cause error) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(fmt.Sprintf("listproxy: the apiserver is unavailable: %v", cause))
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: unavailableRetryAfterSeconds}
	return err
}

// shuttingDownError is the 503 for a long-running request cut short by
// Handler.Shutdown.
func shuttingDownError() *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(errShuttingDown.Error())
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: unavailableRetryAfterSeconds}
	return err
}

// notFoundError is the apiserver's 404 for a path it does not serve.
func notFoundError() *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{},
	}}
}
