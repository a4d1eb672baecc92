// Package httpapi holds what listproxy's HTTP edge and the servers behind it
// (lists) both use on the wire: Kubernetes Status errors, the header that
// names who answered, and the header that marks a peer replica's list. It
// must not import any other listproxy package.
package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

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

// HeaderServedFrom is set on every API response and names who answered it:
// SourceAPIServer, SourceSnapshot or SourceListproxy.
const HeaderServedFrom = "X-Listproxy-Served-From"

// Values of HeaderServedFrom and of the "source" metric label.
const (
	SourceAPIServer = "apiserver"
	SourceSnapshot  = "snapshot"
	// SourceListproxy: listproxy refused the request itself (401, 403 in
	// service mode) without reading a snapshot or the apiserver.
	SourceListproxy = "listproxy"
)
