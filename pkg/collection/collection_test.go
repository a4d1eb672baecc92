package collection

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/wire"
)

func TestParseCollection(t *testing.T) {
	tests := []struct {
		name   string
		target string
		want   Path
		wantOK bool
	}{
		{name: "core_cluster_wide", target: "/api/v1/pods", want: Path{GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}}, wantOK: true},
		{name: "core_namespaced", target: "/api/v1/namespaces/ns1/pods", want: Path{GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "ns1"}, wantOK: true},
		{name: "namespaces_collection", target: "/api/v1/namespaces", want: Path{GVR: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}}, wantOK: true},
		{name: "group", target: "/apis/apps/v1/deployments", want: Path{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}}, wantOK: true},
		{name: "group_namespaced", target: "/apis/demo.listproxy.io/v1/namespaces/a/widgets?limit=5", want: Path{GVR: schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "widgets"}, Namespace: "a"}, wantOK: true},
		{name: "named_object", target: "/api/v1/namespaces/ns1"},
		{name: "named_pod", target: "/api/v1/namespaces/ns1/pods/p1"},
		{name: "subresource", target: "/api/v1/namespaces/ns1/pods/p1/log"},
		{name: "trailing_slash", target: "/api/v1/pods/"},
		{name: "double_slash", target: "/api/v1//pods"},
		{name: "other_core_version", target: "/api/v2/pods"},
		{name: "group_without_resource", target: "/apis/apps/v1"},
		{name: "not_namespaces", target: "/api/v1/nodes/n1/pods"},
		{name: "dot_dot", target: "/api/v1/namespaces/../pods"},
		{name: "escaped", target: "/api/v1/namespaces/a%2Fb/pods"},
		{name: "percent_name", target: "/api/v1/namespaces/a%25b/pods"},
		{name: "root", target: "/"},
		{name: "discovery", target: "/api"},
		{name: "version", target: "/version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParsePath(httptest.NewRequest(http.MethodGet, tc.target, nil))
			if ok != tc.wantOK {
				t.Fatalf("ParsePath(%q) ok = %v, want %v", tc.target, ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); ok && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseCollection(f *testing.F) {
	for _, s := range []string{"/api/v1/pods", "/apis/apps/v1/namespaces/x/deployments", "/api/v1/namespaces/%2e%2e/pods", "/apis//v1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, err := http.NewRequest(http.MethodGet, "http://h"+path, nil)
		if err != nil {
			return
		}
		col, ok := ParsePath(r)
		if !ok {
			return
		}
		// Whatever is accepted must rebuild to the same path.
		prefix := "/apis/" + col.GVR.Group + "/" + col.GVR.Version
		if col.GVR.Group == "" {
			prefix = "/api/" + col.GVR.Version
		}
		want := prefix + "/" + col.GVR.Resource
		if col.Namespace != "" {
			want = prefix + "/namespaces/" + col.Namespace + "/" + col.GVR.Resource
		}
		if r.URL.Path != want {
			t.Errorf("ParsePath(%q) = %+v, which is path %q", r.URL.Path, col, want)
		}
	})
}

func TestNegotiateFormat(t *testing.T) {
	const (
		metaJSON  = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
		metaProto = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	)
	tests := []struct {
		name   string
		accept string
		ua     string
		custom bool
		want   wire.Format
		wantOK bool
	}{
		{name: "none_is_json", accept: "", want: wire.JSON, wantOK: true},
		{name: "json", accept: "application/json", want: wire.JSON, wantOK: true},
		{name: "any", accept: "*/*", want: wire.JSON, wantOK: true},
		{name: "client_go_protobuf", accept: "application/vnd.kubernetes.protobuf, application/json", want: wire.Protobuf, wantOK: true},
		{name: "protobuf_for_custom_falls_to_json", accept: "application/vnd.kubernetes.protobuf, application/json", custom: true, want: wire.JSON, wantOK: true},
		{name: "metadata_informer", accept: metaProto + "," + metaJSON + ",application/json", want: wire.MetaProtobuf, wantOK: true},
		{name: "metadata_json", accept: metaJSON, want: wire.MetaJSON, wantOK: true},
		{name: "metadata_protobuf_for_custom", accept: metaProto, custom: true, want: wire.MetaProtobuf, wantOK: true},
		{name: "kubectl_table", accept: "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", want: wire.Table, wantOK: true},
		{name: "table_v1beta1", accept: "application/json;as=Table;v=v1beta1;g=meta.k8s.io", want: wire.Table, wantOK: true},
		{name: "table_custom", accept: "application/json;as=Table;v=v1;g=meta.k8s.io", custom: true, want: wire.Table, wantOK: true},
		{name: "table_yaml", accept: "application/yaml;as=Table;v=v1;g=meta.k8s.io"},
		{name: "table_protobuf", accept: "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"},
		{name: "table_v2", accept: "application/json;as=Table;v=v2;g=meta.k8s.io"},
		{name: "table_curl_pretty", accept: "application/json;as=Table;v=v1;g=meta.k8s.io", ua: "curl/8.0"},
		{name: "metadata_v1beta1", accept: "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"},
		{name: "yaml", accept: "application/yaml"},
		{name: "cbor_then_json", accept: "application/cbor, application/json", want: wire.JSON, wantOK: true},
		{name: "html", accept: "text/html"},
		{name: "curl_pretty", accept: "application/json", ua: "curl/8.0", wantOK: false},
		{name: "curl_protobuf_not_pretty", accept: "application/vnd.kubernetes.protobuf", ua: "curl/8.0", want: wire.Protobuf, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
			if tc.accept != "" {
				r.Header.Set("Accept", tc.accept)
			}
			r.Header.Set("User-Agent", tc.ua)
			got, ok := negotiate(r, tc.custom, false)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Errorf("negotiate(%q) = %v, %v; want %v, %v", tc.accept, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
