package lists

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
