package collection

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/listproxy/listproxy/pkg/wire"
)

// FuzzNegotiateFormat checks that negotiateFormat never panics for any
// Accept header, User-Agent and query, is deterministic, and never offers a
// representation listproxy cannot serve for the request.
func FuzzNegotiateFormat(f *testing.F) {
	for _, s := range []struct {
		accept, ua, query string
		custom            bool
	}{
		{"application/json", "kubectl/v1.36.3", "", false},
		{"application/vnd.kubernetes.protobuf", "client-go", "", false},
		{"application/vnd.kubernetes.protobuf", "client-go", "", true},
		{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "", "", true},
		{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", "", "", false},
		{"application/json;as=Table;v=v1;g=meta.k8s.io", "kubectl", "", false},
		{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v9", "", "", false},
		{"application/json", "curl/8.0", "", false},
		{"application/json", "kubectl", "pretty=1", false},
		{"application/x-bogus", "", "", false},
		{";;;", "", "", false},
		{"*/*;q=0.1, application/yaml;q=0.9", "", "", false},
		{"application/json;stream=watch", "", "%zz", false},
	} {
		f.Add(s.accept, s.ua, s.query, s.custom)
	}
	f.Fuzz(func(t *testing.T, accept, ua, rawQuery string, custom bool) {
		r := &http.Request{
			Method: http.MethodGet,
			URL:    &url.URL{Path: "/api/v1/pods", RawQuery: rawQuery},
			Header: http.Header{"Accept": {accept}, "User-Agent": {ua}},
		}
		format, ok := negotiate(r, custom, false)
		again, okAgain := negotiate(r, custom, false)
		if format != again || ok != okAgain {
			t.Fatalf("negotiateFormat(%q) = %v, %v then %v, %v", accept, format, ok, again, okAgain)
		}
		if !ok {
			return
		}
		if !format.Valid() {
			t.Fatalf("negotiateFormat(%q) = invalid %v", accept, format)
		}
		if custom && format == wire.Protobuf {
			t.Fatalf("negotiateFormat(%q) = protobuf for a custom resource", accept)
		}
		if (format == wire.JSON || format == wire.MetaJSON) && prettyByRequest(r) {
			t.Fatalf("negotiateFormat(%q, User-Agent %q, query %q) = %v, but the apiserver pretty-prints", accept, ua, rawQuery, format)
		}
	})
}
