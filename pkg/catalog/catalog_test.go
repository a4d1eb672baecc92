package catalog

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// TestReleaseFeatures: the gates' defaults by release. WatchList makes a
// watch from resourceVersion "" or "0" a watch-list; WatchListCompression
// gzips watch-list responses.
func TestReleaseFeatures(t *testing.T) {
	tests := []struct {
		major, minor int
		want         apiserverFeatures
	}{
		{0, 0, apiserverFeatures{}}, // unknown: pass through
		{1, 31, apiserverFeatures{}},
		{1, 32, apiserverFeatures{WatchList: true}},
		{1, 33, apiserverFeatures{}}, // WatchList switched back off for one release
		{1, 34, apiserverFeatures{WatchList: true}},
		{1, 36, apiserverFeatures{WatchList: true}},
		{1, 37, apiserverFeatures{WatchList: true, WatchListCompression: true}},
	}
	for _, tt := range tests {
		if got := releaseFeatures(tt.major, tt.minor); got != tt.want {
			t.Errorf("releaseFeatures(%d, %d) = %+v, want %+v", tt.major, tt.minor, got, tt.want)
		}
	}
}

// TestReadFeatures: the apiserver's kubernetes_feature_enabled gauge
// overrides the release's defaults gate by gate; a gate it does not report
// keeps its default; an unreadable /metrics is an error and leaves the
// defaults.
func TestReadFeatures(t *testing.T) {
	const gates = `# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="AllAlpha",stage="ALPHA"} 0
kubernetes_feature_enabled{name="WatchList",stage="BETA"} 0
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 7
`
	defaults := apiserverFeatures{WatchList: true, WatchListCompression: true}
	tests := []struct {
		name    string
		status  int
		body    string
		want    apiserverFeatures
		wantErr bool
	}{
		{"gate turned off, other gate unreported", http.StatusOK, gates, apiserverFeatures{WatchListCompression: true}, false},
		{"after a line longer than the read buffer and a family of a longer name", http.StatusOK,
			"apiserver_long{path=\"" + strings.Repeat("x", 200<<10) + "\"} 1\nkubernetes_feature_enabled_other{name=\"WatchList\"} 1\n" + gates,
			apiserverFeatures{WatchListCompression: true}, false},
		{"forbidden", http.StatusForbidden, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`, defaults, true},
		{"no gauge", http.StatusOK, "# TYPE up gauge\nup 1\n", defaults, true},
		{"not metrics", http.StatusOK, "<html>", defaults, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			client := discovery.NewDiscoveryClientForConfigOrDie(&rest.Config{Host: srv.URL}).RESTClient()
			got, err := readFeatures(context.Background(), client, defaults)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("readFeatures = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDeprecationWarnings(t *testing.T) {
	v := func(name string, served, deprecated bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Deprecated: deprecated}
	}
	custom := "widgets v1alpha1 go away"
	withWarning := v("v1alpha1", true, true)
	withWarning.DeprecationWarning = &custom
	spec := func(versions ...apiextensionsv1.CustomResourceDefinitionVersion) apiextensionsv1.CustomResourceDefinitionSpec {
		return apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget"}, Versions: versions}
	}
	crdTests := []struct {
		name string
		spec apiextensionsv1.CustomResourceDefinitionSpec
		v    apiextensionsv1.CustomResourceDefinitionVersion
		want string
	}{
		{name: "own_warning", spec: spec(withWarning, v("v1", true, false)), v: withWarning, want: custom},
		{name: "newest_served_replacement", spec: spec(v("v1beta1", true, true), v("v1", true, false), v("v2", true, false), v("v3", false, false)), v: v("v1beta1", true, true),
			want: "example.com/v1beta1 Widget is deprecated; use example.com/v2 Widget"},
		{name: "no_replacement", spec: spec(v("v1", true, true), v("v1beta1", true, false)), v: v("v1", true, true),
			want: "example.com/v1 Widget is deprecated"},
	}
	for _, tc := range crdTests {
		t.Run(tc.name, func(t *testing.T) {
			if got := crdDeprecationWarning(tc.spec, tc.v); got != tc.want {
				t.Errorf("crdDeprecationWarning() = %q, want %q", got, tc.want)
			}
		})
	}

	fs := schema.GroupVersionKind{Group: "flowcontrol.apiserver.k8s.io", Version: "v1beta3", Kind: "FlowSchema"}
	builtinTests := []struct {
		name         string
		gvk          schema.GroupVersionKind
		major, minor int
		want         []string
	}{
		{name: "deprecated_in_release", gvk: fs, major: 1, minor: 36,
			want: []string{"flowcontrol.apiserver.k8s.io/v1beta3 FlowSchema is deprecated in v1.29+, unavailable in v1.32+; use flowcontrol.apiserver.k8s.io/v1 FlowSchema"}},
		{name: "not_yet_deprecated", gvk: fs, major: 1, minor: 28},
		{name: "ga", gvk: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, major: 1, minor: 36},
		{name: "unknown_kind", gvk: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, major: 1, minor: 36},
	}
	for _, tc := range builtinTests {
		t.Run(tc.name, func(t *testing.T) {
			if got := builtinDeprecation(tc.gvk, tc.major, tc.minor); !slices.Equal(got, tc.want) {
				t.Errorf("builtinDeprecation(%v) = %q, want %q", tc.gvk, got, tc.want)
			}
		})
	}
}

// TestCustomColumnNames: a custom resource's Table columns are Name and
// its CRD's printer columns, or Name and Age without any.
func TestCustomColumnNames(t *testing.T) {
	for _, tc := range []struct {
		names, want []string
	}{
		{names: []string{"Size", "Created"}, want: []string{"Name", "Size", "Created"}},
		{names: []string{"Size"}, want: []string{"Name", "Size"}},
		{want: []string{"Name", "Age"}},
	} {
		if got := (crdVersion{names: tc.names}).columnNames(); !slices.Equal(got, tc.want) {
			t.Errorf("columnNames(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}
