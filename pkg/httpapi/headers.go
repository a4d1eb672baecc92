package httpapi

import (
	"net/http"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// HeaderAuditID is the header the apiserver echoes (or mints) to identify a
// request in its audit log (k8s.io/apiserver/pkg/endpoints/filters
// WithAuditInit).
const HeaderAuditID = "Audit-Id"

// SetAPIServerHeaders sets on h the headers the apiserver sends with every
// answer to r, LISTs and watches alike: Audit-Id (the caller's, or a new
// one) and one Warning per deprecation text of the resource's version. The
// priority-and-fairness X-Kubernetes-Pf-* headers are not set: an answer
// from a snapshot is not classified or queued by the apiserver.
func SetAPIServerHeaders(h http.Header, r *http.Request, warnings []string) {
	id := r.Header.Get(HeaderAuditID)
	if id == "" {
		id = string(uuid.NewUUID())
	}
	h.Set(HeaderAuditID, id)
	for _, text := range warnings {
		if v, err := utilnet.NewWarningHeader(299, "", text); err == nil {
			h.Add("Warning", v)
		}
	}
}

// UnsetAPIServerHeaders removes what SetAPIServerHeaders set, for a request
// that passes through: the apiserver's own answer carries them.
func UnsetAPIServerHeaders(h http.Header) {
	h.Del(HeaderAuditID)
	h.Del("Warning")
}
