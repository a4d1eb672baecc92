package collection

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/wire"
)

// TestSelect: how a request's objects are found, as the apiserver's watch
// cache finds them: a cluster-wide request whose field selector pins a
// (valid) namespace scans it, metadata.name in a known namespace (or of a
// cluster-scoped resource) reads one key, spec.nodeName of a pods store
// whose objects carry their fields reads its index, with the selectors
// still applied unless the index alone selects exactly; a continuation
// page keeps its token's scope and the index only.
func TestSelect(t *testing.T) {
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	nodes := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false, false)
	widgets := catalog.NewResource(schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "widgets"}, "Widget", true, true)
	type want struct {
		namespace string
		single    bool
		key       string
		index     string // "" for none
		match     bool
	}
	for _, tc := range []struct {
		name          string
		res           *catalog.Resource
		format        wire.Format // JSON when unset
		namespace     string
		labels, field string
		continuation  bool
		want          want
	}{
		{name: "all", res: pods},
		{name: "namespace", res: pods, namespace: "ns1", want: want{namespace: "ns1"}},
		{name: "label", res: pods, labels: "app=a", want: want{match: true}},
		{name: "node", res: pods, field: "spec.nodeName=n1", want: want{index: "n1"}},
		{name: "node_double_equals", res: pods, field: "spec.nodeName==n1", want: want{index: "n1"}},
		{name: "node_in_namespace", res: pods, namespace: "ns1", field: "spec.nodeName=n1", want: want{namespace: "ns1", index: "n1"}},
		{name: "node_not", res: pods, field: "spec.nodeName!=n1", want: want{match: true}},
		{name: "node_and_label", res: pods, labels: "app=a", field: "spec.nodeName=n1", want: want{index: "n1", match: true}},
		{name: "node_and_phase", res: pods, field: "spec.nodeName=n1,status.phase=Running", want: want{index: "n1", match: true}},
		{name: "node_of_metadata", res: pods, format: wire.MetaJSON, field: "spec.nodeName=n1", want: want{match: true}},
		{name: "node_of_custom", res: widgets, field: "spec.nodeName=n1", want: want{match: true}},
		{name: "node_continuation", res: pods, field: "spec.nodeName=n1", continuation: true, want: want{index: "n1"}},
		{name: "pinned_namespace", res: pods, field: "metadata.namespace=ns1", want: want{namespace: "ns1", match: true}},
		{name: "pinned_invalid_namespace", res: pods, field: "metadata.namespace=Not_A_Namespace", want: want{match: true}},
		{name: "pinned_namespace_continuation", res: pods, field: "metadata.namespace=ns1", continuation: true, want: want{match: true}},
		{name: "name_in_namespace", res: pods, namespace: "ns1", field: "metadata.name=p1", want: want{namespace: "ns1", single: true, key: "ns1/p1", match: true}},
		{name: "name_pinned_namespace", res: pods, field: "metadata.name=p1,metadata.namespace=ns1", want: want{namespace: "ns1", single: true, key: "ns1/p1", match: true}},
		{name: "name_any_namespace", res: pods, field: "metadata.name=p1", want: want{match: true}},
		{name: "name_and_node", res: pods, namespace: "ns1", field: "metadata.name=p1,spec.nodeName=n1", want: want{namespace: "ns1", single: true, key: "ns1/p1", match: true}},
		{name: "name_continuation", res: pods, namespace: "ns1", field: "metadata.name=p1", continuation: true, want: want{namespace: "ns1", match: true}},
		{name: "name_cluster_scoped", res: nodes, field: "metadata.name=n1", want: want{single: true, key: "n1", match: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := labels.Parse(tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := fields.ParseSelector(tc.field)
			if err != nil {
				t.Fatal(err)
			}
			req := Request{Path: Path{GVR: tc.res.GVR, Namespace: tc.namespace}, Resource: tc.res, Format: tc.format, Labels: ls, Fields: fs,
				Selective: !ls.Empty() || !fs.Empty()}
			sel := req.Select(!tc.continuation)
			got := want{namespace: sel.Namespace, single: sel.Single, key: sel.Key, match: sel.Match != nil}
			if sel.IndexValue != nil {
				got.index = *sel.IndexValue
			}
			if got != tc.want {
				t.Errorf("selection %+v, want %+v", got, tc.want)
			}
		})
	}
}
