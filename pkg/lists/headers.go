package lists

import (
	"net/http"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// headerAuditID is the header the apiserver echoes (or mints) to identify a
// request in its audit log (k8s.io/apiserver/pkg/endpoints/filters
// WithAuditInit).
const headerAuditID = "Audit-Id"

// setAPIServerHeaders sets on h the headers the apiserver sends with every
// answer to r for a resource of info: Audit-Id (the caller's, or a new one)
// and the deprecation Warnings of the resource's version. The
// priority-and-fairness X-Kubernetes-Pf-* headers are not set: an answer
// from a snapshot is not classified or queued by the apiserver.
func setAPIServerHeaders(h http.Header, r *http.Request, info *resourceInfo) {
	id := r.Header.Get(headerAuditID)
	if id == "" {
		id = string(uuid.NewUUID())
	}
	h.Set(headerAuditID, id)
	for _, text := range info.Warnings {
		if v, err := utilnet.NewWarningHeader(299, "", text); err == nil {
			h.Add("Warning", v)
		}
	}
}

// unsetAPIServerHeaders removes what setAPIServerHeaders set, for a request
// that passes through: the apiserver's own answer carries them.
func unsetAPIServerHeaders(h http.Header) {
	h.Del(headerAuditID)
	h.Del("Warning")
}
