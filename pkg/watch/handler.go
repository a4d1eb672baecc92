package watch

import (
	"net/http"
)

// Stores resolves watch requests to snapshot stores. The edge's wiring
// implements it over the LIST server, which owns the stores.
type Stores interface {
	// Cacheable reports, without side effects, whether r (with its
	// selectors) is a watch of a resource, in a representation and with
	// selectors that a store could serve; when not, reason says why and
	// resource names the resource when known.
	Cacheable(r *http.Request, labelSelector, fieldSelector string) (resource, reason string, ok bool)
	// Resolve returns the synced store and scope of r, starting the store
	// on first demand, and a release function the caller calls when the
	// watch ends (a store with watchers is never idle). ok false passes the
	// watch through, or, with Target.Reject set, answers it with Reject;
	// reason says why and Target.Resource names the resource when known.
	Resolve(r *http.Request, labelSelector, fieldSelector string) (t Target, release func(), reason string, ok bool)
}

// Handler offers cacheable watches to a Server over Stores. Its methods
// make it the edge's watch server.
type Handler struct {
	srv    *Server
	stores Stores
}

// NewHandler returns a Handler serving watches of stores with srv.
func NewHandler(srv *Server, stores Stores) *Handler {
	return &Handler{srv: srv, stores: stores}
}

// Cacheable reports, without side effects, whether r is a watch listproxy
// could serve (in service mode, only those are authorized by listproxy).
func (h *Handler) Cacheable(r *http.Request) bool {
	d := Decide(r.URL.RawQuery)
	if d.Action == PassThrough {
		return false
	}
	_, _, ok := h.stores.Cacheable(r, d.LabelSelector, d.FieldSelector)
	return ok
}

// PassedThrough counts the watch r that the edge passes through without
// offering it, for reason; "" names the reason Cacheable had.
func (h *Handler) PassedThrough(r *http.Request, reason string) {
	resource := ""
	if reason == "" {
		d := Decide(r.URL.RawQuery)
		reason = d.Reason
		if d.Action != PassThrough {
			resource, reason, _ = h.stores.Cacheable(r, d.LabelSelector, d.FieldSelector)
		}
	}
	h.srv.PassedThrough(resource, reason)
}

// ServeWatch serves r from a snapshot store, or returns false having
// written nothing, in which case r must pass through.
func (h *Handler) ServeWatch(w http.ResponseWriter, r *http.Request) bool {
	d := Decide(r.URL.RawQuery)
	if d.Action == PassThrough {
		h.srv.PassedThrough("", d.Reason)
		return false
	}
	t, release, reason, ok := h.stores.Resolve(r, d.LabelSelector, d.FieldSelector)
	if !ok && t.Reject != nil {
		t.Reject(w)
		return true
	}
	if !ok {
		h.srv.PassedThrough(t.Resource, reason)
		return false
	}
	defer release()
	served, reason := h.srv.Serve(w, r, d, t)
	if !served {
		h.srv.PassedThrough(t.Resource, reason)
	}
	return served
}
