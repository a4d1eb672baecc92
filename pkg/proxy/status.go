package proxy

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
