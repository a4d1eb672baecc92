package proxy

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// unavailableRetryAfterSeconds is sent as Retry-After with 503s listproxy
// makes itself, so that client-go retries them (it retries 5xx only with
// Retry-After). Not measured: one second is the apiserver's own choice for
// its 429s.
const unavailableRetryAfterSeconds = 1

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

// refuse answers err as listproxy's own refusal.
func refuse(w http.ResponseWriter, err *apierrors.StatusError) {
	w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceListproxy)
	httpapi.WriteStatus(w, err)
}

// forbiddenError is a 403 Status with message, reason Forbidden.
func forbiddenError(message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: message,
	}}
}

// sidecarImpersonationError is the 403 for a request with Impersonate-*
// headers in sidecar mode, where every request runs as listproxy.
func sidecarImpersonationError() *apierrors.StatusError {
	return forbiddenError("listproxy without authentication (--authentication=none) sends every request with its own identity and cannot act as the user in the Impersonate-* headers; send requests that impersonate to the apiserver directly, or use listproxy with --authentication=delegated")
}
