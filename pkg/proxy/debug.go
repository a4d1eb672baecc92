package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	rpprof "runtime/pprof"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// listproxy's own debug paths. Everything under pathDebugPrefix is
// listproxy's (404 when unknown); the apiserver's other /debug paths pass
// through.
const (
	pathDebugPrefix = "/debug/listproxy/"
	// pathConsistency: POST runs a consistency check now and answers its
	// ConsistencyReport; GET answers the last report.
	pathConsistency = pathDebugPrefix + "consistency"
	// pathPprof serves Go's pprof profiles when Config.Profiling is set:
	// pathPprof alone lists them, pathPprof+NAME serves one (profile, trace,
	// heap, goroutine, ...).
	pathPprof = pathDebugPrefix + "pprof/"
)

// ConsistencyChecker may be implemented by a ListServer (*Lists does) to
// serve pathConsistency.
type ConsistencyChecker interface {
	// CheckConsistency compares every synced snapshot with the apiserver.
	CheckConsistency(ctx context.Context) ConsistencyReport
	// LastConsistencyReport returns the last check's report, false if none ran.
	LastConsistencyReport() (ConsistencyReport, bool)
}

var _ ConsistencyChecker = (*Lists)(nil)

// isDebugPath reports whether path is one of listproxy's debug paths.
func isDebugPath(path string) bool {
	return path == strings.TrimSuffix(pathDebugPrefix, "/") || strings.HasPrefix(path, pathDebugPrefix)
}

// serveDebug serves listproxy's debug paths. In service mode the caller must
// be authenticated and authorized for the path and verb (a non-resource
// SubjectAccessReview, as for /metrics).
func (h *Handler) serveDebug(w http.ResponseWriter, r *http.Request) {
	if h.auth != nil {
		var ok bool
		if r, ok = h.auth.authenticate(w, r); !ok || !h.auth.authorizeNonResource(w, r) {
			return
		}
	}
	if h.profiling && strings.HasPrefix(r.URL.Path, pathPprof) {
		servePprof(w, r, strings.TrimPrefix(r.URL.Path, pathPprof))
		return
	}
	checker, ok := h.lists.(ConsistencyChecker)
	if r.URL.Path != pathConsistency || !ok {
		WriteStatus(w, notFoundError())
		return
	}
	switch r.Method {
	case http.MethodPost:
		writeJSON(w, checker.CheckConsistency(r.Context()))
	case http.MethodGet, http.MethodHead:
		report, ok := checker.LastConsistencyReport()
		if !ok {
			err := notFoundError()
			err.ErrStatus.Message = "no consistency check has run yet; POST to " + pathConsistency + " runs one"
			WriteStatus(w, err)
			return
		}
		writeJSON(w, report)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		WriteStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusMethodNotAllowed,
			Reason:  metav1.StatusReasonMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed on %s; use GET or POST", r.Method, r.URL.Path),
		}})
	}
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
			WriteStatus(w, notFoundError())
			return
		}
		pprof.Handler(name).ServeHTTP(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		klog.V(2).InfoS("Writing debug response failed", "err", err)
	}
}
