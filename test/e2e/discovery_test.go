package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

var gizmoGVR = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "gizmos"}

const gizmoPath = "/apis/demo.listproxy.io/v1/gizmos"

func gizmoCRD(selectable string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.demo.listproxy.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "demo.listproxy.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Singular: "gizmo", Kind: "Gizmo", ListKind: "GizmoList"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"shape": {Type: "string"}, "tone": {Type: "string"},
					}}},
				}},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: "." + selectable}},
			}},
		},
	}
}

// TestDiscoveryFollowsCRDs: a CRD created after listproxy started is served
// from snapshots; once deleted, listproxy answers as the apiserver does (404),
// never with stale objects; recreated with another schema, only the new
// objects are served, with the new selectable field.
func TestDiscoveryFollowsCRDs(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp, "--discovery-refresh-interval=1s")
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	crds := apiextensionsclient.NewForConfigOrDie(cp.AdminConfig).ApiextensionsV1().CustomResourceDefinitions()
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	ctx := context.Background()

	createGizmos := func(prefix, field string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "demo.listproxy.io/v1", "kind": "Gizmo",
				"metadata": map[string]any{"name": fmt.Sprintf("%s-%d", prefix, i)},
				"spec":     map[string]any{field: fmt.Sprint("v", i%2)},
			}}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				_, err := dyn.Resource(gizmoGVR).Create(ctx, obj, metav1.CreateOptions{})
				return err == nil, nil // the CRD may not be served yet
			})
			if err != nil {
				t.Fatalf("create gizmo: %v", err)
			}
		}
	}
	// servedEqual polls until listproxy serves q from a snapshot with the
	// apiserver's items at the same resourceVersion.
	servedEqual := func(q url.Values) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			code, hdr, body, err := lpc.get(ctx, gizmoPath, q, acceptJSON)
			if err != nil || code != http.StatusOK || hdr.Get("X-Listproxy-Served-From") != "snapshot" {
				last = fmt.Sprintf("HTTP %d from %q: %v", code, hdr.Get("X-Listproxy-Served-From"), err)
				return false, nil
			}
			lpPage, err := decodePage(wire.JSON, body)
			if err != nil {
				return false, err
			}
			oracle := url.Values{"resourceVersion": {lpPage.env.ListMeta.ResourceVersion}, "resourceVersionMatch": {"Exact"}}
			for k, v := range q {
				if k != "resourceVersion" {
					oracle[k] = v
				}
			}
			_, _, apiBody, err := apic.get(ctx, gizmoPath, oracle, acceptJSON)
			if err != nil {
				return false, err
			}
			apiPage, err := decodePage(wire.JSON, apiBody)
			if err != nil {
				return false, err
			}
			last = comparePages(lpPage, apiPage, false)
			return last == "", nil
		})
		if err != nil {
			t.Fatalf("listproxy never served %v equal to the apiserver: %s", q, last)
		}
	}

	// 1. Created after listproxy started.
	if _, err := crds.Create(ctx, gizmoCRD("spec.shape"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createGizmos("old", "shape", 5)
	servedEqual(url.Values{"resourceVersion": {"0"}})
	servedEqual(url.Values{"resourceVersion": {"0"}, "fieldSelector": {"spec.shape=v1"}})

	// 2. Deleted: once the apiserver says 404, so does listproxy, promptly
	// (within a few discovery refreshes), and never with stale objects. The
	// apiserver deletes every object before the resource goes, so from the
	// moment it says 404 a 200 from listproxy may only be an empty list (a
	// resourceVersion=0 read may be answered from any earlier state); one
	// with objects is stale.
	if err := crds.Delete(ctx, "gizmos.demo.listproxy.io", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const prompt = 5 * time.Second // five --discovery-refresh-interval
	var apiGoneAt time.Time
	var stale []string
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		q := url.Values{"resourceVersion": {"0"}}
		if apiGoneAt.IsZero() {
			code, _, _, err := apic.get(ctx, gizmoPath, q, acceptJSON)
			if err == nil && code == http.StatusNotFound {
				apiGoneAt = time.Now()
			}
		}
		code, hdr, body, err := lpc.get(ctx, gizmoPath, q, acceptJSON)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("HTTP %d from %q: %.200s", code, hdr.Get("X-Listproxy-Served-From"), body)
		switch {
		case apiGoneAt.IsZero():
			return false, nil
		case code == http.StatusNotFound:
			return true, nil
		case code == http.StatusOK && len(stale) < 5:
			p, err := decodePage(wire.JSON, body)
			if err != nil || len(p.items) > 0 {
				stale = append(stale, fmt.Sprintf("%v after the apiserver's 404: %s", time.Since(apiGoneAt).Round(time.Millisecond), last))
			}
		}
		return false, nil
	})
	if apiGoneAt.IsZero() {
		t.Fatalf("apiserver never answered 404 after the CRD was deleted: %v", err)
	}
	if err != nil {
		t.Fatalf("listproxy never answered 404 (last: %s): %v", last, err)
	}
	took := time.Since(apiGoneAt)
	t.Logf("listproxy answered 404 %v after the apiserver", took.Round(time.Millisecond))
	for _, s := range stale {
		t.Errorf("stale answer from listproxy: %s", s)
	}
	if took > prompt {
		t.Errorf("listproxy answered 404 %v after the apiserver, want within %v", took.Round(time.Millisecond), prompt)
	}

	// 3. Recreated with another selectable field: only new objects, and the
	// new field selects.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := crds.Create(ctx, gizmoCRD("spec.tone"), metav1.CreateOptions{})
		return err == nil, nil // the old one may still be terminating
	})
	if err != nil {
		t.Fatalf("recreate CRD: %v", err)
	}
	createGizmos("new", "tone", 4)
	servedEqual(url.Values{"resourceVersion": {"0"}})
	servedEqual(url.Values{"resourceVersion": {"0"}, "fieldSelector": {"spec.tone=v0"}})
}

// TestIdleStoresAreDropped: a store nobody lists for --idle-resource-ttl is
// dropped (its metrics series go away), and the next LIST starts it again.
func TestIdleStoresAreDropped(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp, "--idle-resource-ttl=2s")
	lpc := newRawClient(t, lp.Config())
	ctx := context.Background()
	tg := []target{{path: "/api/v1/namespaces/default/configmaps"}}
	const series = `listproxy_snapshot_objects{format="json",resource="configmaps"}`
	hasSeries := func() bool {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Has("listproxy_snapshot_objects", `format="json"`, `resource="configmaps"`)
	}

	warmUp(ctx, t, lpc, tg) // starts the json store and waits until it serves
	if !hasSeries() {
		t.Fatalf("no %s after a LIST", series)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, false, func(context.Context) (bool, error) {
		return !hasSeries(), nil
	})
	if err != nil {
		t.Fatalf("store still present after the idle TTL: %v", err)
	}
	warmUp(ctx, t, lpc, tg) // a new LIST starts it again
	if !hasSeries() {
		t.Fatalf("no %s after the store restarted", series)
	}
}

// A LIST of a deprecated CRD version answered from a snapshot carries the
// same deprecation Warning headers as the apiserver's answer, and an
// Audit-Id.
func TestDeprecatedCRDVersionWarnings(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := t.Context()
	schemaProps := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}
	custom := "demo.listproxy.io/v1alpha1 Doohickey is going away; migrate"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "doohickeys.demo.listproxy.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "demo.listproxy.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "doohickeys", Singular: "doohickey", Kind: "Doohickey", ListKind: "DoohickeyList"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1alpha1", Served: true, Deprecated: true, DeprecationWarning: &custom, Schema: schemaProps},
				{Name: "v1beta1", Served: true, Deprecated: true, Schema: schemaProps},
				{Name: "v1", Served: true, Storage: true, Schema: schemaProps},
			},
		},
	}
	if _, err := apiextensionsclient.NewForConfigOrDie(cp.AdminConfig).ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lpc, apic := newRawClient(t, framework.StartListproxy(t, cp).Config()), newRawClient(t, cp.AdminConfig)
	for _, version := range []string{"v1alpha1", "v1beta1", "v1"} {
		t.Run(version, func(t *testing.T) {
			path := "/apis/demo.listproxy.io/" + version + "/doohickeys"
			q := url.Values{"resourceVersion": {"0"}}
			var hdr http.Header
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				code, h, _, err := lpc.get(ctx, path, q, acceptJSON)
				hdr = h
				return err == nil && code == http.StatusOK && h.Get("X-Listproxy-Served-From") == "snapshot", nil
			})
			if err != nil {
				t.Fatalf("%s never served from a snapshot: %v", path, err)
			}
			_, apiHdr, _, err := apic.get(ctx, path, q, acceptJSON)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := hdr.Values("Warning"), apiHdr.Values("Warning"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("Warning headers: listproxy %q, apiserver %q", got, want)
			}
			if hdr.Get("Audit-Id") == "" {
				t.Error("no Audit-Id on a snapshot answer")
			}
		})
	}
}
