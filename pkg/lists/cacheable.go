package lists

import (
	"net/http"

	"github.com/listproxy/listproxy/pkg/paging"
)

// Cacheable reports whether r is a LIST that Lists could answer from a
// snapshot (a known cached resource, a supported query and media type), or
// one carrying a listproxy continue token, which only Lists can hand to the
// apiserver. It has no side effects.
func (l *Lists) Cacheable(r *http.Request) bool {
	if _, _, ok := l.parse(r); ok {
		return true
	}
	return paging.IsListproxyToken(r.URL.Query().Get("continue"))
}
