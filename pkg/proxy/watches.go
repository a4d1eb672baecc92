package proxy

import "net/http"

// WatchServer answers cacheable WATCH requests from snapshots (pkg/watch).
// ServeWatch returns false, having written nothing, when the request must
// pass through. Cacheable reports, without side effects, whether r could be
// served at all; in service mode only such watches are authorized by
// listproxy.
type WatchServer interface {
	ServeWatch(w http.ResponseWriter, r *http.Request) bool
	Cacheable(r *http.Request) bool
}
