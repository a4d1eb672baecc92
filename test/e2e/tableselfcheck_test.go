package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/test/framework"
)

// kubectlTableAccept is what kubectl get asks for.
const kubectlTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// TestTableSelfCheck: a Table rule that does not hold for the apiserver
// (here configmaps given the rules of certificatesigningrequests, whose
// AGE is cell 1, where a configmap's row has its DATA count) is caught as
// the rows arrive: configmaps' Tables pass through with the apiserver's
// answer, the mismatches are counted, the resource is refused once its
// lists failed the check three times (within a second: the feeder retries
// a failed list at once), and other resources' Tables are still served
// from snapshots.
func TestTableSelfCheck(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	const ns = "selfcheck"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configmaps := schema.GroupResource{Resource: "configmaps"}
	wrongRules := func(minor int, gr schema.GroupResource) (table.Rules, bool) {
		if gr == configmaps {
			return table.For(minor, schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"})
		}
		return table.For(minor, gr)
	}
	lp := framework.StartListproxyAdjusted(t, cp, func(cfg *app.Config) { cfg.TableRules = wrongRules }, "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())

	for _, tc := range []struct {
		name, path string
		want       string
	}{
		{"wrong_rule_passes_through", "/api/v1/namespaces/" + ns + "/configmaps", httpapi.SourceAPIServer},
		{"other_resources_served", "/api/v1/namespaces/" + ns + "/serviceaccounts", httpapi.SourceSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == httpapi.SourceSnapshot {
				if err := framework.WarmTable(ctx, lpc.client, lpc.base, tc.path); err != nil {
					t.Fatal(err)
				}
			}
			code, hdr, body, err := lpc.get(ctx, tc.path, nil, kubectlTableAccept)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != tc.want {
				t.Fatalf("Table LIST %s: %d served from %q, want 200 from %q:\n%.300s", tc.path, code, hdr.Get(httpapi.HeaderServedFrom), tc.want, body)
			}
		})
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_stores_table_mismatches_total", `resource="configmaps"`, `reason="rule"`); got < 1 {
		t.Errorf("listproxy_stores_table_mismatches_total{resource=configmaps,reason=rule} = %v, want at least 1", got)
	}
	// Once refused, the resource's Tables pass through up front; until
	// then, while its list fails, they pass through as not synced.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, hdr, _, err := lpc.get(ctx, "/api/v1/namespaces/"+ns+"/configmaps", nil, kubectlTableAccept)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer {
			return false, fmt.Errorf("Table LIST of configmaps: %d from %q, want 200 from the apiserver", code, hdr.Get(httpapi.HeaderServedFrom))
		}
		m, err := framework.ScrapeMetrics(ctx, nil, lp.URL+"/metrics")
		if err != nil {
			return false, err
		}
		return m.Sum("listproxy_lists_total", `resource="configmaps"`, `reason="table_refused"`) >= 1, nil
	})
	if err != nil {
		t.Fatalf("configmaps' Tables not refused: %v", err)
	}
	m = framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_stores_table_mismatches_total", `resource="configmaps"`); got < 3 {
		t.Errorf("listproxy_stores_table_mismatches_total{resource=configmaps} = %v, want at least 3 before the refusal", got)
	}
}
