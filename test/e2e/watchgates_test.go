package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/binaries"
)

// kubeRelease returns the release of the control plane under test
// (KUBE_VERSION, e.g. "1.37.2") and its minor version.
func kubeRelease(t *testing.T) (string, int) {
	t.Helper()
	v, err := binaries.KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.Split(v, ".")[1])
	if err != nil {
		t.Fatalf("release %q: %v", v, err)
	}
	return v, minor
}

// releaseGates are the defaults of the watch feature gates in release
// 1.minor (k8s.io/apiserver/pkg/features). has says whether the release
// knows WatchListCompression.
func releaseGates(minor int) (watchList, compression, has bool) {
	return minor == 32 || minor >= 34, minor >= 37, minor >= 37
}

// TestWatchFollowsFeatureGates: an apiserver whose watch feature gates
// differ from its release's defaults is answered as that apiserver answers,
// because listproxy reads the gates from the apiserver's /metrics. Each gate
// is turned to the opposite of its default in turn. With WatchList off, a
// watch from resourceVersion "" is a plain watch and passes through; with
// it on, it is a watch-list served from the snapshot (an explicit
// watch-list is served either way). A watch-list is gzipped exactly when
// WatchListCompression is on.
func TestWatchFollowsFeatureGates(t *testing.T) {
	_, minor := kubeRelease(t)
	watchList, compression, hasCompression := releaseGates(minor)
	type gates struct{ watchList, compression bool }
	cases := []gates{{!watchList, compression}}
	if hasCompression {
		cases = append(cases, gates{watchList, !compression})
	}
	for _, g := range cases {
		flags := fmt.Sprintf("WatchList=%v", g.watchList)
		if hasCompression {
			flags += fmt.Sprintf(",WatchListCompression=%v", g.compression)
		}
		t.Run(flags, func(t *testing.T) {
			cp := framework.Start(t, framework.ControlPlaneConfig{ExtraAPIServerArgs: []string{"--feature-gates=" + flags}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const ns = "gates"
			createNamespaceWithPods(ctx, t, cp, ns, 3)
			lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods")
			lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
			podsPath := "/api/v1/namespaces/" + ns + "/pods"
			warmUp(ctx, t, lpc, []target{{path: podsPath}})

			plain := url.Values{"watch": {"1"}, "resourceVersion": {""}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}
			_, hdr := openWatch(ctx, t, lpc, podsPath, plain, wire.JSON)
			wantFrom := map[bool]string{true: httpapi.SourceSnapshot, false: httpapi.SourceAPIServer}[g.watchList]
			if got := hdr.Get(httpapi.HeaderServedFrom); got != wantFrom {
				t.Errorf("watch from resourceVersion \"\": served from %q, want %q", got, wantFrom)
			}

			list := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
				"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}
			lpr, lpHdr := openWatch(ctx, t, lpc, podsPath, list, wire.JSON)
			if got := lpHdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceSnapshot {
				t.Fatalf("watch-list: served from %q, want %q", got, httpapi.SourceSnapshot)
			}
			if added := initialFrames(t, lpr); len(added) != 3 {
				t.Errorf("watch-list: %d initial objects, want 3", len(added))
			}
			wantEncoding := map[bool]string{true: "gzip", false: ""}[g.compression]
			if got := lpHdr.Get("Content-Encoding"); got != wantEncoding {
				t.Errorf("watch-list: Content-Encoding %q, want %q", got, wantEncoding)
			}
			// Where the apiserver serves the watch-list, its encoding is the
			// oracle; without WatchList it refuses it.
			apir, apiHdr, refusal := openWatchOrRefusal(ctx, t, apic, podsPath, list, wire.JSON)
			switch {
			case apir != nil && !g.watchList:
				t.Errorf("apiserver with WatchList off served a watch-list")
			case apir != nil:
				if got, want := lpHdr.Get("Content-Encoding"), apiHdr.Get("Content-Encoding"); got != want {
					t.Errorf("watch-list: Content-Encoding %q, apiserver %q", got, want)
				}
			case g.watchList || !strings.HasPrefix(refusal, strconv.Itoa(http.StatusUnprocessableEntity)+" "):
				t.Errorf("apiserver with %s answered the watch-list with %s", flags, refusal)
			}
		})
	}
}
