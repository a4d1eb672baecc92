package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// TestStoreStartPolicy runs service mode with real RBAC: alice, who may
// read pods only in namespace a, LISTs and watches them in all four
// representations, and no store is started for her: every request passes
// through and is answered by the apiserver as if she had asked it, counted
// with why. The admin, who may list pods in every namespace, starts the
// JSON store, which then serves alice's LISTs of her namespace.
func TestStoreStartPolicy(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	admin := cp.Clientset(framework.UserAdmin)
	createNamespaceWithPods(ctx, t, cp, "a", 3)
	createNamespaceWithPods(ctx, t, cp, "b", 2)
	if _, err := admin.RbacV1().Roles("a").Create(ctx, authPodReader("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("a").Create(ctx, authBinding("a", authSubjectAlice), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile, "--resources=pods")
	alice, aliceDirect := newRawClient(t, lp.UserConfig(framework.UserAlice)), newRawClient(t, cp.UserConfig(framework.UserAlice))
	scrape := tenantScraper(t, lp)
	const podsInA = "/api/v1/namespaces/a/pods"
	formats := []wire.Format{wire.JSON, wire.Protobuf, wire.MetaJSON, wire.MetaProtobuf}

	t.Run("namespace_reader_starts_no_store", func(t *testing.T) {
		for i, f := range formats {
			// A LIST: the apiserver's answer, item for item.
			q := url.Values{"resourceVersion": {"0"}}
			code, hdr, body, err := alice.get(ctx, podsInA, q, formatAccept[f])
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer {
				t.Errorf("LIST %v: HTTP %d from %q, want 200 from the apiserver: %.300s", f, code, hdr.Get(httpapi.HeaderServedFrom), body)
			}
			_, _, directBody, err := aliceDirect.get(ctx, podsInA, q, formatAccept[f])
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodePage(f, body)
			if err != nil {
				t.Fatalf("LIST %v: %v", f, err)
			}
			want, err := decodePage(f, directBody)
			if err != nil {
				t.Fatalf("LIST %v from the apiserver: %v", f, err)
			}
			if len(got.items) != len(want.items) || got.env.Kind != want.env.Kind {
				t.Errorf("LIST %v: %d items of %s, the apiserver %d of %s", f, len(got.items), got.env.Kind, len(want.items), want.env.Kind)
			}

			// A watch from that list's resourceVersion: the apiserver's
			// stream, which sends the pod created after it opened.
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			wq := url.Values{"watch": {"1"}, "resourceVersion": {got.env.ListMeta.ResourceVersion}, "timeoutSeconds": {"20"}}
			r, whdr := openWatch(wctx, t, alice, podsInA, wq, f)
			if got := whdr.Get(httpapi.HeaderServedFrom); got != httpapi.SourceAPIServer {
				t.Errorf("watch %v served from %q, want %q", f, got, httpapi.SourceAPIServer)
			}
			name := fmt.Sprintf("after-watch-%d", i)
			if _, err := admin.CoreV1().Pods("a").Create(ctx, newPod("a", name, 100+i), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			fr, err := r.next()
			if err != nil || fr.typ != wire.Added || !bytes.Contains(fr.raw, []byte(name)) {
				t.Errorf("watch %v: first event %s %.200s (err %v), want ADDED %s", f, fr.typ, fr.raw, err, name)
			}
			cancel()
		}
		m := scrape()
		if m.Has("listproxy_snapshot_objects", `resource="pods"`) {
			t.Errorf("a store of pods was started for alice: %v", m["listproxy_snapshot_objects"])
		}
		if got := m.Sum("listproxy_stores_refused_total", `resource="pods"`, `reason="not_authorized"`); got != 8 {
			t.Errorf("listproxy_stores_refused_total{reason=not_authorized} = %v, want 8 (4 LISTs, 4 watches)", got)
		}
		if got := m.Sum("listproxy_lists_total", `resource="pods"`, `source="apiserver"`, `reason="store_not_authorized"`); got != 4 {
			t.Errorf("listproxy_lists_total{reason=store_not_authorized} = %v, want 4", got)
		}
		if got := m.Sum("listproxy_watch_passed_through_total", `resource="pods"`, `reason="store_not_authorized"`); got != 4 {
			t.Errorf("listproxy_watch_passed_through_total{reason=store_not_authorized} = %v, want 4", got)
		}
	})

	t.Run("cluster_reader_starts_store", func(t *testing.T) {
		adminRaw := newRawClient(t, lp.UserConfig(framework.UserAdmin))
		tenantAwaitSnapshot(t, adminRaw, "/api/v1/pods", acceptJSON)
		m := scrape()
		if !m.Has("listproxy_snapshot_objects", `resource="pods"`, `format="json"`) {
			t.Fatalf("no JSON store of pods after the admin's LIST: %v", m["listproxy_snapshot_objects"])
		}
		if m.Has("listproxy_snapshot_objects", `resource="pods"`, `format="protobuf"`) {
			t.Errorf("a protobuf store of pods runs; only JSON was asked for")
		}
		// The running store serves alice's own namespace.
		code, hdr, body, err := alice.get(ctx, podsInA, url.Values{"resourceVersion": {"0"}}, acceptJSON)
		if err != nil {
			t.Fatal(err)
		}
		p, err := decodePage(wire.JSON, body)
		if code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot || err != nil || len(p.items) != 3+len(formats) {
			t.Errorf("alice's LIST: HTTP %d from %q, %d items (err %v); want 200 from the snapshot with %d pods", code, hdr.Get(httpapi.HeaderServedFrom), len(p.items), err, 3+len(formats))
		}
		// Protobuf still has no store, and alice still starts none.
		if code, hdr, _, err := alice.get(ctx, podsInA, url.Values{"resourceVersion": {"0"}}, acceptProtobuf); err != nil || code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer {
			t.Errorf("alice's protobuf LIST: HTTP %d from %q (err %v), want 200 from the apiserver", code, hdr.Get(httpapi.HeaderServedFrom), err)
		}
	})
}

// TestStoreBudget: with --max-store-bytes smaller than one store, the first
// store starts (nothing is held yet) and the next one does not: its LISTs
// pass through, counted as over budget.
func TestStoreBudget(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	createNamespaceWithPods(ctx, t, cp, "a", 3)
	seedConfigMaps(t, cp.Clientset(framework.UserAdmin), "a", "cm", 3)
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile,
		"--resources=pods,configmaps", "--max-store-bytes=1")
	admin := newRawClient(t, lp.UserConfig(framework.UserAdmin))
	scrape := tenantScraper(t, lp)

	tenantAwaitSnapshot(t, admin, "/api/v1/pods", acceptJSON)
	if got := scrape().Sum("listproxy_snapshot_bytes", `resource="pods"`); got < 1 {
		t.Fatalf("listproxy_snapshot_bytes{resource=pods} = %v after the store synced, want > 0", got)
	}
	code, hdr, body, err := admin.get(ctx, "/api/v1/configmaps", url.Values{"resourceVersion": {"0"}}, acceptJSON)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceAPIServer {
		t.Errorf("LIST configmaps over budget: HTTP %d from %q, want 200 from the apiserver: %.300s", code, hdr.Get(httpapi.HeaderServedFrom), body)
	}
	m := scrape()
	if m.Has("listproxy_snapshot_objects", `resource="configmaps"`) {
		t.Errorf("a store of configmaps was started over budget")
	}
	if got := m.Sum("listproxy_stores_refused_total", `resource="configmaps"`, `reason="over_budget"`); got != 1 {
		t.Errorf("listproxy_stores_refused_total{resource=configmaps,reason=over_budget} = %v, want 1", got)
	}
	if got := m.Sum("listproxy_lists_total", `resource="configmaps"`, `reason="store_over_budget"`); got != 1 {
		t.Errorf("listproxy_lists_total{resource=configmaps,reason=store_over_budget} = %v, want 1", got)
	}
	// The running store is not dropped for the budget.
	if code, hdr, _, err := admin.get(ctx, "/api/v1/pods", url.Values{"resourceVersion": {"0"}}, acceptJSON); err != nil || code != http.StatusOK || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
		t.Errorf("LIST pods: HTTP %d from %q (err %v), want 200 from the snapshot", code, hdr.Get(httpapi.HeaderServedFrom), err)
	}
}

// tenantScraper returns a function scraping lp's /metrics as the admin.
func tenantScraper(t *testing.T, lp *framework.Listproxy) func() framework.Metrics {
	t.Helper()
	client, err := rest.HTTPClientFor(lp.UserConfig(framework.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	return func() framework.Metrics { return framework.Scrape(t, client, lp.URL+"/metrics") }
}

// tenantAwaitSnapshot polls a LIST at resourceVersion 0 until a snapshot
// answers it.
func tenantAwaitSnapshot(t *testing.T, c rawClient, path, accept string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, hdr, _, err := c.get(ctx, path, url.Values{"resourceVersion": {"0"}}, accept)
		if err != nil {
			return false, err
		}
		return code == http.StatusOK && hdr.Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot, nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LIST %s: %v", path, err)
	} else if err != nil {
		t.Fatalf("LIST %s never served from a snapshot", path)
	}
}
