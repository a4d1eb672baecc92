package stores

import (
	"testing"
	"time"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/wire"
)

func TestRetryAfterUnready(t *testing.T) {
	for _, tc := range []struct {
		downtime time.Duration
		want     int
	}{
		{0, 1}, {10 * time.Second, 1}, {20 * time.Second, 3}, {time.Minute, 30}, {time.Hour, 30},
	} {
		if got := retryAfterUnready(tc.downtime); got != tc.want {
			t.Errorf("retryAfterUnready(%v) = %d, want %d", tc.downtime, got, tc.want)
		}
	}
}

func TestParsePreload(t *testing.T) {
	got, err := ParsePreload([]string{"pods", "pods/json", "endpointslices.discovery.k8s.io", "pods", " nodes "})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.String())
	}
	want := []string{"pods", "pods/json", "endpointslices.discovery.k8s.io", "nodes"}
	if len(names) != len(want) {
		t.Fatalf("got %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("got %v, want %v", names, want)
		}
	}
	for _, bad := range []string{"*", "pods/yaml", "/json", "pods/json/x"} {
		if _, err := ParsePreload([]string{bad}); err == nil {
			t.Errorf("ParsePreload(%q): no error", bad)
		}
	}
	// Without a format: what client-go's typed clients ask for.
	for _, tc := range []struct {
		p      Preload
		custom bool
		want   wire.Format
	}{
		{got[0], false, wire.Protobuf},
		{got[0], true, wire.JSON},
		{got[1], false, wire.JSON},
	} {
		if f := tc.p.formatFor(&catalog.Resource{Custom: tc.custom}); f != tc.want {
			t.Errorf("%s (custom %v): format %v, want %v", tc.p, tc.custom, f, tc.want)
		}
	}
}
