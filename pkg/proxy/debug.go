package proxy

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	rpprof "runtime/pprof"
	"strings"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// listproxy's own debug paths. Everything under DebugPathPrefix is
// listproxy's (404 when unknown); the apiserver's other /debug paths pass
// through.
const (
	// DebugPathPrefix+NAME is served by Config.Debug[NAME].
	DebugPathPrefix = "/debug/listproxy/"
	// pathPprof serves Go's pprof profiles when Config.Profiling is set:
	// pathPprof alone lists them, pathPprof+NAME serves one (profile, trace,
	// heap, goroutine, ...).
	pathPprof = DebugPathPrefix + "pprof/"
)

// isDebugPath reports whether path is one of listproxy's debug paths.
func isDebugPath(path string) bool {
	return path == strings.TrimSuffix(DebugPathPrefix, "/") || strings.HasPrefix(path, DebugPathPrefix)
}

// serveDebug serves listproxy's debug paths. In service mode the caller must
// be authenticated and authorized for the path and verb (a non-resource
// SubjectAccessReview, as for /metrics).
func (h *Handler) serveDebug(w http.ResponseWriter, r *http.Request) {
	if h.auth != nil {
		var ok bool
		if r, ok = h.auth.Authenticate(w, r); !ok || !h.auth.AuthorizeNonResource(w, r) {
			return
		}
	}
	if h.profiling && strings.HasPrefix(r.URL.Path, pathPprof) {
		servePprof(w, r, strings.TrimPrefix(r.URL.Path, pathPprof))
		return
	}
	handler, ok := h.debug[strings.TrimPrefix(r.URL.Path, DebugPathPrefix)]
	if !ok {
		httpapi.WriteStatus(w, notFoundError())
		return
	}
	handler.ServeHTTP(w, r)
}

// servePprof serves the pprof profile name ("" lists them). net/http/pprof's
// Index only knows its own /debug/pprof/ prefix, so the names are dispatched
// here.
func servePprof(w http.ResponseWriter, r *http.Request, name string) {
	switch name {
	case "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, p := range rpprof.Profiles() {
			fmt.Fprintf(w, "%s%s (%d)\n", pathPprof, p.Name(), p.Count())
		}
		for _, n := range []string{"profile", "trace", "cmdline", "symbol"} {
			fmt.Fprintf(w, "%s%s\n", pathPprof, n)
		}
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	default:
		if rpprof.Lookup(name) == nil {
			httpapi.WriteStatus(w, notFoundError())
			return
		}
		pprof.Handler(name).ServeHTTP(w, r)
	}
}
