package proxy

import "net/http"

// Reasons the edge passes a watch through before offering it (the
// "reason" label of listproxy_watch_passed_through_total).
const (
	// WatchPassImpersonation: the caller impersonates; only the apiserver
	// can check that right.
	WatchPassImpersonation = "impersonation"
	// WatchPassAuthorization: listproxy's review of the caller failed, or
	// denied a watch with selectors; the apiserver decides.
	WatchPassAuthorization = "authorization"
)

// WatchServer answers cacheable WATCH requests from snapshots (pkg/watch).
// ServeWatch returns false, having written nothing, when the request must
// pass through. Cacheable reports, without side effects, whether r could be
// served at all; in service mode only such watches are authorized by
// listproxy. PassedThrough records a watch the edge passes through without
// offering it (in service mode: not cacheable, impersonating, or not
// authorized by listproxy); reason names why, or is "" for a watch
// Cacheable declined, whose reason the WatchServer names itself.
type WatchServer interface {
	ServeWatch(w http.ResponseWriter, r *http.Request) bool
	Cacheable(r *http.Request) bool
	PassedThrough(r *http.Request, reason string)
}
