package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"

	"github.com/listproxy/listproxy/pkg/table"
)

// objectsPerType is how many filled objects each printed type renders;
// the types with clock cells beyond Age render more.
const (
	objectsPerType = 40
	objectsSlotted = 1500
)

// objectVersions are the versions the Object feeds are read in, by the
// resource of the printed type; the rest are fed metadata only.
var objectVersions = map[schema.GroupResource][]schema.GroupVersion{
	{Resource: "pods"}:                     {{Version: "v1"}},
	{Group: "batch", Resource: "jobs"}:     {{Group: "batch", Version: "v1"}},
	{Group: "batch", Resource: "cronjobs"}: {{Group: "batch", Version: "v1"}},
	{Resource: "events"}:                   {{Version: "v1"}, {Group: "events.k8s.io", Version: "v1"}},
}

// notResources are printed kinds that are no resource of their group.
var notResources = map[string]bool{"Status": true, "Scale": true}

// recorder collects the types AddHandlers registers.
type recorder struct{ types []reflect.Type }

func (r *recorder) TableHandler(_ []metav1.TableColumnDefinition, printFunc interface{}) error {
	r.types = append(r.types, reflect.TypeOf(printFunc).In(0).Elem())
	return nil
}

// resourceOf is the group and resource of a printed internal type.
func resourceOf(t *testing.T, obj runtime.Object) schema.GroupResource {
	gvks, _, err := legacyscheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvks[0])
	if gvks[0].Kind == "Endpoints" {
		plural.Resource = "endpoints"
	}
	return schema.GroupResource{Group: gvks[0].Group, Resource: plural.Resource}
}

// rendered is one upstream row: rendered within [from, to], as the
// apiserver writes it with includeObject=Object (feed) and
// includeObject=Metadata (want).
type rendered struct {
	from, to   time.Time
	feed, want []byte
}

// render renders obj as the apiserver does for a Table in meta.k8s.io/v1.
func render(t *testing.T, convert func(metav1.Object) (*metav1.Table, error), obj metav1.Object, feed []byte) rendered {
	t.Helper()
	from := time.Now()
	tbl, err := convert(obj)
	to := time.Now()
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	if len(tbl.Rows) != 1 {
		t.Fatalf("%T: %d rows", obj, len(tbl.Rows))
	}
	partial := meta.AsPartialObjectMetadata(obj)
	partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"))
	metadata, err := json.Marshal(partial)
	if err != nil {
		t.Fatal(err)
	}
	if feed == nil {
		feed = metadata
	}
	row := func(object []byte) []byte {
		r := tbl.Rows[0]
		r.Object = runtime.RawExtension{Raw: object}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return rendered{from: from, to: to, feed: row(feed), want: row(metadata)}
}

// cells are the JSON cells of a row.
func cells(t *testing.T, row []byte) []json.RawMessage {
	var r struct{ Cells []json.RawMessage }
	if err := json.Unmarshal(row, &r); err != nil {
		t.Fatalf("%s: %v", row, err)
	}
	return r.Cells
}

// changed adds to set the cells that differ between rows a and b.
func changed(t *testing.T, set map[int]bool, a, b []byte) {
	ca, cb := cells(t, a), cells(t, b)
	for i := range ca {
		if string(ca[i]) != string(cb[i]) {
			set[i] = true
		}
	}
}

// appendedWithin reports whether our row for some instant of r's render
// (from its start to its end, in steps under a second, the finest unit of
// a clock cell) is the apiserver's, and returns ours for its end. A render
// that a stalled machine stretched over more than a second is a window,
// not two instants.
func appendedWithin(row *table.Row, stored []byte, r rendered) ([]byte, bool) {
	for at := r.from; at.Before(r.to); at = at.Add(250 * time.Millisecond) {
		if string(row.Append(nil, stored, at, table.IncludeMetadata, "v1")) == string(r.want) {
			return nil, true
		}
	}
	to := row.Append(nil, stored, r.to, table.IncludeMetadata, "v1")
	return to, string(to) == string(r.want)
}

func sortedKeys(set map[int]bool) []int {
	var keys []int
	for k := range set {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// pending is a case's objects, what is fed of them (nil: their
// metadata), and how the apiserver converts them to a Table.
type pending struct {
	c    *oracleCase
	objs []metav1.Object
	feed [][]byte
	conv func(metav1.Object) (*metav1.Table, error)
}

// oracleCase is one resource's rows, rendered twice more than a second
// apart.
type oracleCase struct {
	name  string
	rules table.Rules
	a, b  []rendered
}

// check requires of c: (a) the cells that change between the two renders
// are those that change between two instants in ours; (b) every row
// parses, and ours for an instant of the render equals it.
func (c *oracleCase) check(t *testing.T) {
	upstream, ours := map[int]bool{}, map[int]bool{}
	for i := range c.a {
		a, b := c.a[i], c.b[i]
		changed(t, upstream, a.want, b.want)
		stored, _, row, err := c.rules.Parse(a.feed, a.to)
		if err != nil {
			t.Errorf("%s: Parse(%s): %v", c.name, a.feed, err)
			continue
		}
		for _, r := range []rendered{a, b} {
			if to, ok := appendedWithin(row, stored, r); !ok {
				t.Errorf("%s: Append differs from the apiserver's row (-want +got):\n%s", c.name, cmp.Diff(string(r.want), string(to)))
			}
		}
		changed(t, ours, row.Append(nil, stored, a.to, table.IncludeMetadata, "v1"),
			row.Append(nil, stored, b.from, table.IncludeMetadata, "v1"))
	}
	if diff := cmp.Diff(sortedKeys(upstream), sortedKeys(ours)); diff != "" {
		t.Errorf("%s: the cells that change between two instants (-apiserver +ours):\n%s", c.name, diff)
	}
	t.Logf("%s: %d rows, clock cells %v", c.name, len(c.a), sortedKeys(ours))
}

func TestOracle(t *testing.T) {
	rec := &recorder{}
	printersinternal.AddHandlers(rec)
	gen := printers.NewTableGenerator().With(printersinternal.AddHandlers)
	printed := func(obj metav1.Object) (*metav1.Table, error) {
		return gen.GenerateTable(obj.(runtime.Object), printers.GenerateOptions{Wide: true})
	}
	f := &filler{r: rand.New(rand.NewSource(int64(minor))), base: time.Now()}

	// Render every served type's filled objects, then render them again
	// once the clock has moved on by more than a second.
	var all []*pending
	served := map[schema.GroupResource]bool{}
	for _, typ := range rec.types {
		if strings.HasSuffix(typ.Name(), "List") || notResources[typ.Name()] {
			continue
		}
		gr := resourceOf(t, reflect.New(typ).Interface().(runtime.Object))
		versions := objectVersions[gr]
		if versions == nil {
			versions = []schema.GroupVersion{{}}
		}
		for _, gv := range versions {
			if gv.Group != "" {
				gr.Group = gv.Group
			}
			rules, ok := table.For(minor, gr)
			if !ok {
				t.Logf("%s %v: not served", typ, gr)
				continue
			}
			served[gr] = true
			if rules.Object != (gv.Version != "") {
				t.Errorf("%v: Rules.Object = %v", gr, rules.Object)
			}
			p := &pending{c: &oracleCase{name: gr.String(), rules: rules}, conv: printed}
			n := objectsPerType
			if gv.Version != "" {
				n = objectsSlotted
			}
			for range n {
				o := reflect.New(typ)
				f.fill(o.Elem(), 0)
				obj := o.Interface().(metav1.Object)
				if pod, ok := obj.(*api.Pod); ok {
					shapePod(f, pod)
				}
				var feed []byte
				if gv.Version != "" {
					ext, err := legacyscheme.Scheme.ConvertToVersion(o.Interface().(runtime.Object), gv)
					if err != nil {
						t.Fatalf("%s: %v", gr, err)
					}
					if feed, err = json.Marshal(ext); err != nil {
						t.Fatal(err)
					}
					// The apiserver prints what it decoded: read the
					// object back from its JSON (a zero time is null).
					back := reflect.New(reflect.TypeOf(ext).Elem()).Interface().(runtime.Object)
					if err := json.Unmarshal(feed, back); err != nil {
						t.Fatal(err)
					}
					if feed, err = json.Marshal(back); err != nil {
						t.Fatal(err)
					}
					internal, err := legacyscheme.Scheme.ConvertToVersion(back, schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal})
					if err != nil {
						t.Fatalf("%s: %v", gr, err)
					}
					obj = internal.(metav1.Object)
				}
				p.objs = append(p.objs, obj)
				p.feed = append(p.feed, feed)
			}
			all = append(all, p)
		}
	}
	all = append(all, customCases(t, f)...)
	all = append(all, defaultCases(t, f)...)
	for _, p := range all {
		for i, obj := range p.objs {
			p.c.a = append(p.c.a, render(t, p.conv, obj, p.feed[i]))
		}
	}
	time.Sleep(1100 * time.Millisecond)
	for _, p := range all {
		for i, obj := range p.objs {
			p.c.b = append(p.c.b, render(t, p.conv, obj, p.feed[i]))
		}
		p.c.check(t)
	}

}

// customCases are custom resources' rows: the apiextensions convertor
// with the default columns, and with a date column among others.
func customCases(t *testing.T, f *filler) []*pending {
	columnSets := [][]apiextensionsv1.CustomResourceColumnDefinition{
		{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}},
		{
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
			{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
			{Name: "Created", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Missing", Type: "date", JSONPath: ".metadata.creationTimestamp", Priority: 1},
		},
	}
	var ps []*pending
	for i, columns := range columnSets {
		convertor, err := tableconvertor.New(columns)
		if err != nil {
			t.Fatal(err)
		}
		var cols []table.Column
		if i > 0 {
			for _, c := range columns {
				cols = append(cols, table.Column{Type: c.Type, JSONPath: c.JSONPath})
			}
		}
		rules, ok := table.ForCustom(cols)
		if !ok {
			t.Fatalf("custom columns %v: not served", cols)
		}
		p := &pending{c: &oracleCase{name: fmt.Sprintf("custom resource, columns %d", i), rules: rules}}
		p.conv = func(obj metav1.Object) (*metav1.Table, error) {
			return convertor.ConvertToTable(context.Background(), obj.(runtime.Object), nil)
		}
		for range objectsPerType {
			var m metav1.ObjectMeta
			f.fill(reflect.ValueOf(&m).Elem(), 0)
			u := &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "example.com/v1", "kind": "Widget",
				"spec":   map[string]interface{}{"size": int64(f.r.Intn(3))},
				"status": map[string]interface{}{"phase": words[f.r.Intn(len(words))]},
			}}
			meta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m)
			if err != nil {
				t.Fatal(err)
			}
			u.Object["metadata"] = meta
			p.objs = append(p.objs, u)
			p.feed = append(p.feed, nil)
		}
		ps = append(ps, p)
	}
	return ps
}

// defaultCases are the resources the apiserver's default convertor
// renders (a name and an absolute Created At).
func defaultCases(t *testing.T, f *filler) []*pending {
	var ps []*pending
	for _, gr := range []schema.GroupResource{
		{Group: "rbac.authorization.k8s.io", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Resource: "limitranges"},
		{Group: "storage.k8s.io", Resource: "csistoragecapacities"},
	} {
		rules, ok := table.For(minor, gr)
		if !ok {
			t.Errorf("%v: not served", gr)
			continue
		}
		convertor := rest.NewDefaultTableConvertor(gr)
		p := &pending{c: &oracleCase{name: gr.String(), rules: rules}}
		p.conv = func(obj metav1.Object) (*metav1.Table, error) {
			return convertor.ConvertToTable(context.Background(), obj.(runtime.Object), nil)
		}
		for range objectsPerType {
			var m metav1.PartialObjectMetadata
			f.fill(reflect.ValueOf(&m.ObjectMeta).Elem(), 0)
			p.objs = append(p.objs, &m)
			p.feed = append(p.feed, nil)
		}
		ps = append(ps, p)
	}
	return ps
}

// shapePod makes a filled pod's statuses name its containers, so that the
// Restarts rule's branches (restartable init containers, initializing or
// not) are all taken.
func shapePod(f *filler, pod *api.Pod) {
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Name = fmt.Sprintf("init-%d", i)
		if f.r.Intn(2) == 0 {
			always := api.ContainerRestartPolicyAlways
			pod.Spec.InitContainers[i].RestartPolicy = &always
		}
	}
	for i := range pod.Status.InitContainerStatuses {
		if f.r.Intn(4) > 0 {
			pod.Status.InitContainerStatuses[i].Name = fmt.Sprintf("init-%d", f.r.Intn(3))
		}
	}
}
