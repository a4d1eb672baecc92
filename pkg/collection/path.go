package collection

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Path is a parsed resource-collection path.
type Path struct {
	GVR schema.GroupVersionResource
	// Namespace is set for /namespaces/NS/RES paths.
	Namespace string
}

// ParsePath recognises the paths of a LIST or WATCH of a collection:
//
//	/api/v1/RES, /api/v1/namespaces/NS/RES,
//	/apis/G/V/RES, /apis/G/V/namespaces/NS/RES.
//
// Anything else (a name, a subresource, an escaped or irregular path) is not a
// collection and passes through.
func ParsePath(r *http.Request) (Path, bool) {
	if r.URL.RawPath != "" {
		return Path{}, false
	}
	p := r.URL.Path
	var gv schema.GroupVersion
	var rest []string
	switch {
	case strings.HasPrefix(p, "/api/"):
		parts := strings.Split(p[len("/api/"):], "/")
		if len(parts) < 2 || parts[0] != "v1" {
			return Path{}, false
		}
		gv, rest = schema.GroupVersion{Version: "v1"}, parts[1:]
	case strings.HasPrefix(p, "/apis/"):
		parts := strings.Split(p[len("/apis/"):], "/")
		if len(parts) < 3 || !validSegment(parts[0]) {
			return Path{}, false
		}
		gv, rest = schema.GroupVersion{Group: parts[0], Version: parts[1]}, parts[2:]
	default:
		return Path{}, false
	}
	for _, s := range append([]string{gv.Version}, rest...) {
		if !validSegment(s) {
			return Path{}, false
		}
	}
	switch len(rest) {
	case 1:
		return Path{GVR: gv.WithResource(rest[0])}, true
	case 3:
		if rest[0] != "namespaces" {
			return Path{}, false
		}
		return Path{GVR: gv.WithResource(rest[2]), Namespace: rest[1]}, true
	}
	return Path{}, false
}

// validSegment rejects empty segments and names the apiserver would refuse in
// a path, so that such requests reach the apiserver for its own answer.
func validSegment(s string) bool {
	return s != "" && len(s) <= 253 && len(content.IsPathSegmentName(s)) == 0
}
