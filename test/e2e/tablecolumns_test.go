package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/test/framework"
)

// TestTableCRDColumnsChange: when a CRD's printer columns change, no
// Table answer mixes rows rendered under the old columns with the new
// ones (every row has one cell per column, and the columns are either
// set), while gadgets are written throughout; and answers under the new
// columns are served from a snapshot again once the store has relisted.
func TestTableCRDColumnsChange(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installTableCRDs(ctx, t, cp, tableCRDs)
	const ns = "columns"
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	create := func(i int) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gadgetGVR.GroupVersion().String(), "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("gadget-%d", i)},
			"spec":     map[string]any{"color": "red", "size": int64(i), "note": "n"},
		}}
		if _, err := dyn.Resource(gadgetGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		create(i)
	}
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint, "--discovery-refresh-interval=1s")
	lpc := newRawClient(t, lp.Config())
	path := "/apis/demo.listproxy.io/v1/namespaces/" + ns + "/gadgets"
	if err := framework.WarmTable(ctx, lpc.client, lpc.base, path); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		Columns []struct {
			Name string `json:"name"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells []json.RawMessage `json:"cells"`
		} `json:"rows"`
	}
	// check reads one Table through listproxy: it returns the column
	// names and who answered, and fails on a row whose cells do not
	// match the columns.
	check := func() (columns string, from string) {
		t.Helper()
		code, hdr, body, err := lpc.get(ctx, path, nil, kubectlTableAccept)
		if err != nil || code != http.StatusOK {
			t.Fatalf("Table LIST: %d, %v: %.300s", code, err, body)
		}
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatal(err)
		}
		for _, c := range a.Columns {
			columns += c.Name + ","
		}
		for i, r := range a.Rows {
			if len(r.Cells) != len(a.Columns) {
				t.Fatalf("row %d has %d cells under %d columns (%s), served from %s:\n%s", i, len(r.Cells), len(a.Columns), columns, hdr.Get(httpapi.HeaderServedFrom), body)
			}
		}
		return columns, hdr.Get(httpapi.HeaderServedFrom)
	}
	const oldColumns = "Name,Color,Size,Note,Created,"
	if columns, from := check(); columns != oldColumns || from != httpapi.SourceSnapshot {
		t.Fatalf("before the change: columns %s from %s, want %s from a snapshot", columns, from, oldColumns)
	}

	client := apiextensionsclient.NewForConfigOrDie(cp.AdminConfig)
	crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "gadgets.demo.listproxy.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd.Spec.Versions[0].AdditionalPrinterColumns = []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
		{Name: "Created", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const newColumns = "Name,Size,Created,"
	next := 5
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		create(next) // a write under whichever columns the apiserver has now
		next++
		columns, from := check()
		if columns != oldColumns && columns != newColumns {
			t.Fatalf("columns %s, want %s or %s", columns, oldColumns, newColumns)
		}
		return columns == newColumns && from == httpapi.SourceSnapshot, nil
	})
	if err != nil {
		t.Fatalf("the new columns were not served from a snapshot in time: %v", err)
	}
}
