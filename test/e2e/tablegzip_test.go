package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/test/framework"
)

// The Table gzip fixtures: tableGzipObjects gadgets in tableGzipNS whose
// Note cell and annotation are tableGzipNote, so that above the
// apiserver's gzip threshold (128 KiB) are a page of all of them with
// includeObject=None (147 KB, 0.7 KiB a row) and one of 80 with the
// object's metadata (160 KB, 2 KiB a row).
const (
	tableGzipNS      = "tbl-gzip"
	tableGzipObjects = 200
	// tableGzipChanged is the gadget changed before the last pass: the
	// middle row of the first page of 80.
	tableGzipChanged = 40
)

// tableGzipNote is 672 bytes once the apiserver's encoder escaped it.
var tableGzipNote = strings.Repeat("<note> & ✓ ", 24)

func tableGzipName(i int) string { return fmt.Sprintf("gadget-%03d", i) }

// seedTableGzip creates the Table gzip fixtures, concurrently.
func seedTableGzip(ctx context.Context, t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	if err := cp.CreateNamespace(ctx, tableGzipNS, nil); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	err := framework.Parallel(ctx, 16, tableGzipObjects, func(ctx context.Context, i int) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gadgetGVR.GroupVersion().String(), "kind": tableCRDKinds[gadgetGVR.Resource],
			"metadata": map[string]any{"name": tableGzipName(i), "labels": map[string]any{"gzip": "yes"}, "annotations": map[string]any{"note": tableGzipNote}},
			"spec":     map[string]any{"color": colors[i%len(colors)], "size": int64(i), "note": tableGzipNote},
		}}
		_, err := dyn.Resource(gadgetGVR).Namespace(tableGzipNS).Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("seeding: %v", err)
	}
}

// checkTableGzip: Table pages above the gzip threshold, asked with
// Accept-Encoding: gzip, are gzipped by both listproxy and the apiserver
// and equal once inflated, through a continue walk (whose last page,
// under the threshold, neither gzips), with includeObject=None and
// Metadata, both Table group versions and a label selector (a page
// compressed per response): when the rows are first compressed, again
// from the row chunks cached then, and after one object in the middle of
// a page changed (its row, and the next, compressed again). The passes
// after the first repeat only the pages stitched from cached row chunks.
func checkTableGzip(ctx context.Context, t *testing.T, cp *framework.ControlPlane, lpc, apic rawClient, stats *pairStats) {
	seedTableGzip(ctx, t, cp)
	tg := tableTarget{path: "/apis/" + gadgetGVR.GroupVersion().String() + "/namespaces/" + tableGzipNS + "/gadgets"}
	cases := []struct {
		name string
		req  tableRequest
		// gzipped is how many pages of the walk both sides gzip.
		gzipped int
		// first: in the first pass only.
		first bool
	}{
		{name: "unpaginated", req: tableRequest{accept: acceptTableKubectl}, gzipped: 1, first: true},
		{name: "limit_500", req: tableRequest{accept: acceptTableKubectl, include: "Metadata", limit: 500}, gzipped: 1},
		{name: "limit_500_none", req: tableRequest{accept: acceptTableKubectl, include: "None", limit: 500}, gzipped: 1},
		{name: "limit_80", req: tableRequest{accept: acceptTableKubectl, limit: 80}, gzipped: 2},
		{name: "v1beta1_selected", req: tableRequest{accept: acceptTableV1beta1, include: "Metadata", limit: 500, label: "gzip=yes"}, gzipped: 1, first: true},
	}
	pass := func(t *testing.T, first bool) {
		for _, tc := range cases {
			if tc.first && !first {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				req := tc.req
				req.mode, req.gzip = rvConsistent, true
				before := stats.gzipped
				if _, failure := checkTableRequest(ctx, lpc, apic, tg, req, "snapshot", stats); failure != "" {
					t.Fatalf("%s %s: %s", tg.path, req, failure)
				}
				if got := stats.gzipped - before; got != tc.gzipped {
					t.Errorf("%s %s: %d pages gzipped by both, want %d", tg.path, req, got, tc.gzipped)
				}
			})
		}
	}
	t.Run("cold", func(t *testing.T) { pass(t, true) })
	t.Run("cached", func(t *testing.T) { pass(t, false) })
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"note":"changed"}},"spec":{"size":%d}}`, 1000+tableGzipChanged)
	if _, err := dynamic.NewForConfigOrDie(cp.AdminConfig).Resource(gadgetGVR).Namespace(tableGzipNS).Patch(ctx, tableGzipName(tableGzipChanged), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("changed", func(t *testing.T) { pass(t, false) })
}
