package e2e

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// TestMetricsCatalogue keeps docs/metrics.md and the Grafana dashboard
// honest: after traffic through listproxy, every listproxy_* metric on
// /metrics is documented, and every metric a dashboard panel queries is
// exported. A second listproxy without etcd exports the metrics of proofs
// through the apiserver.
func TestMetricsCatalogue(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 30, 0, 2)
	// Service mode, so that authorization metrics are exported too.
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint, "--authentication=delegated", "--client-ca-file="+cp.CAFile)
	lpc := newRawClient(t, lp.UserConfig(framework.UserAdmin))
	ctx := context.Background()

	// Traffic: a synced store, a consistent read, a paginated walk, a pass-through, watches.
	warmUp(ctx, t, lpc, []target{{path: "/api/v1/pods"}})
	for _, q := range []url.Values{{}, {"limit": {"7"}}, {"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"7"}}} {
		_, _, body, err := lpc.get(ctx, "/api/v1/pods", q, acceptJSON)
		if err != nil {
			t.Fatal(err)
		}
		p, err := decodePage(wire.JSON, body)
		if err != nil {
			t.Fatal(err)
		}
		if c := p.env.ListMeta.Continue; c != "" {
			if _, _, _, err := lpc.get(ctx, "/api/v1/pods", url.Values{"continue": {c}, "limit": {"7"}}, acceptJSON); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, _, err := lpc.get(ctx, "/api/v1/namespaces/default", nil, acceptJSON); err != nil {
		t.Fatal(err)
	}
	// Watches: a watch-list served from the store that ends at its
	// timeout, and a re-watch from a resourceVersion older than the
	// store's recent changes, which passes through.
	served := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"1"}}
	if code, h, _, err := lpc.get(ctx, "/api/v1/pods", served, acceptJSON); err != nil || code != http.StatusOK || h.Get("X-Listproxy-Served-From") != "snapshot" {
		t.Fatalf("watch-list: %d, served from %q, %v", code, h.Get("X-Listproxy-Served-From"), err)
	}
	// A served watch that carries a live event (the fan-out histogram).
	wctx, stopWatch := context.WithCancel(ctx)
	r, _ := openWatch(wctx, t, lpc, "/api/v1/namespaces/ns-0/pods", url.Values{"watch": {"1"}, "sendInitialEvents": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"}}, wire.JSON)
	initialFrames(t, r)
	if _, err := cp.Clientset(framework.UserAdmin).CoreV1().Pods("ns-0").Patch(ctx, "pod-0", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"touched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nextEvents(r, 1); err != nil {
		t.Fatalf("live event: %v", err)
	}
	stopWatch()
	old := url.Values{"watch": {"1"}, "resourceVersion": {"1"}, "timeoutSeconds": {"1"}}
	if code, h, _, err := lpc.get(ctx, "/api/v1/pods", old, acceptJSON); err != nil || h.Get("X-Listproxy-Served-From") == "snapshot" {
		t.Fatalf("watch from resourceVersion 1: %d, served from %q, %v; want it passed through", code, h.Get("X-Listproxy-Served-From"), err)
	}

	_, _, page, err := lpc.get(ctx, "/metrics", nil, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	exported := metricNames(t, page)
	for name := range apiserverProofMetricNames(ctx, t, cp) {
		exported[name] = true
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	documented := namesIn(t, filepath.Join(root, "docs", "metrics.md"), regexp.MustCompile("`(listproxy_[a-z_]+)`"))
	for _, name := range sortedKeys(exported) {
		if strings.HasPrefix(name, "listproxy_") && !documented[name] {
			t.Errorf("metric %s is exported but not in docs/metrics.md", name)
		}
	}
	dashboard := namesIn(t, filepath.Join(root, "charts", "listproxy", "dashboards", "listproxy.json"), regexp.MustCompile(`((?:listproxy|process|go)_[a-z_]+)`))
	for _, name := range sortedKeys(dashboard) {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !exported[family] {
			t.Errorf("dashboard queries %s, which listproxy does not export", name)
		}
	}
	t.Logf("%d metric families exported, %d documented, %d used by the dashboard", len(exported), len(documented), len(dashboard))
}

// apiserverProofMetricNames starts a listproxy without etcd, so that it
// proves freshness through the apiserver, sends it consistent LISTs of the
// quiet pods (each a probe, then an auxiliary watch) until the proof
// metrics are on its /metrics, and returns the metric names there.
func apiserverProofMetricNames(ctx context.Context, t *testing.T, cp *framework.ControlPlane) map[string]bool {
	t.Helper()
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile)
	lpc := newRawClient(t, lp.UserConfig(framework.UserAdmin))
	warmUp(ctx, t, lpc, []target{{path: "/api/v1/pods"}})
	want := []string{
		"listproxy_freshness_apiserver_probe_duration_seconds",
		"listproxy_freshness_apiserver_proofs_total",
		"listproxy_freshness_aux_watches_total",
	}
	var names map[string]bool
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, _, _, err := lpc.get(ctx, "/api/v1/pods", nil, acceptJSON); err != nil {
			return false, err
		}
		_, _, page, err := lpc.get(ctx, "/metrics", nil, "text/plain")
		if err != nil {
			return false, err
		}
		names = metricNames(t, page)
		missing = missing[:0]
		for _, name := range want {
			if !names[name] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("listproxy without etcd: %v; missing %v", err, missing)
	}
	return names
}

// metricNames returns the metric family names on a /metrics page.
func metricNames(t *testing.T, page []byte) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func namesIn(t *testing.T, path string, re *regexp.Regexp) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range re.FindAllSubmatch(data, -1) {
		names[string(bytes.TrimSpace(m[1]))] = true
	}
	return names
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
