package wire

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
)

// TestTypedFieldMatchesConverter checks typedField against what it stands
// for: for every scalar path up to five fields deep in the kinds whose
// fields listproxy selects on (and a Deployment), on random objects, a
// planned path reads what ToUnstructured and NestedFieldNoCopy read.
func TestTypedFieldMatchesConverter(t *testing.T) {
	kinds := []runtime.Object{
		&corev1.Pod{}, &corev1.Node{}, &corev1.Namespace{}, &corev1.Secret{}, &corev1.Service{},
		&corev1.ReplicationController{}, &corev1.Event{}, &appsv1.Deployment{},
		&certificatesv1.CertificateSigningRequest{}, &certificatesv1beta1.ClusterTrustBundle{},
	}
	// The selectable fields listproxy reads must all be planned.
	mustPlan := map[reflect.Type][]string{
		reflect.TypeFor[corev1.Pod](): {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
			"spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName", "spec.terminationGracePeriodSeconds"},
		reflect.TypeFor[corev1.Node]():                  {"spec.unschedulable"},
		reflect.TypeFor[corev1.Secret]():                {"type"},
		reflect.TypeFor[corev1.Service]():               {"spec.clusterIP", "spec.type"},
		reflect.TypeFor[corev1.ReplicationController](): {"status.replicas"},
		reflect.TypeFor[corev1.Event](): {"involvedObject.kind", "involvedObject.uid", "involvedObject.fieldPath",
			"reason", "reportingComponent", "source.component", "type"},
	}
	fill := randfill.New().NilChance(0.3).NumElements(0, 2).MaxDepth(12).RandSource(rand.NewSource(1))
	planned, converted := 0, 0
	for _, kind := range kinds {
		typ := reflect.TypeOf(kind).Elem()
		paths := scalarPaths(typ, "", 5)
		for _, p := range mustPlan[typ] {
			if typedFieldOf(typ, p) == nil {
				t.Errorf("%v %s: not planned", typ, p)
			}
		}
		objects := []runtime.Object{reflect.New(typ).Interface().(runtime.Object)} // the zero object
		objects = append(objects, selfConverting[typ]...)
		for range 60 {
			obj := reflect.New(typ).Interface().(runtime.Object)
			fill.Fill(obj)
			objects = append(objects, obj)
		}
		for i, obj := range objects {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				continue // random bytes where a Quantity or a Time should parse
			}
			converted++
			for _, p := range paths {
				plan := typedFieldOf(typ, p)
				if plan == nil {
					continue
				}
				if i == 0 {
					planned++
				}
				want, wantFound := converterField(m, p)
				got, found := plan.read(reflect.ValueOf(obj))
				if got != want || found != wantFound {
					t.Fatalf("%v %s: typed read (%q, %v), converter (%q, %v)", typ, p, got, found, want, wantFound)
				}
			}
		}
	}
	if converted < 300 {
		t.Errorf("only %d random objects converted; the comparison covers too little", converted)
	}
	if planned < 200 {
		t.Errorf("only %d paths planned; the comparison covers too little", planned)
	}
}

// selfConverting holds objects whose paths cross types that convert
// themselves (IntOrString), which random filling rarely reaches.
var selfConverting = map[reflect.Type][]runtime.Object{
	reflect.TypeFor[appsv1.Deployment](): {&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Strategy: appsv1.DeploymentStrategy{
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptrTo(intstr.FromInt32(2)), MaxSurge: ptrTo(intstr.FromString("25%"))},
	}}}},
}

func ptrTo[T any](v T) *T { return &v }

// TestTypedFieldLeavesTheRestToTheConverter lists paths a plan must not
// take: types that convert themselves, maps and slices on the way,
// non-scalar leaves, unknown names.
func TestTypedFieldLeavesTheRestToTheConverter(t *testing.T) {
	pod := reflect.TypeFor[corev1.Pod]()
	for _, p := range []string{
		"metadata.creationTimestamp",     // metav1.Time marshals itself
		"metadata.labels.app",            // a map on the way
		"spec.containers.name",           // a slice on the way
		"spec.securityContext",           // a struct leaf
		"spec.overhead",                  // a map leaf
		"spec.nodename",                  // names are exact
		"kind",                           // inlined from TypeMeta
		"status.startTime",               // *metav1.Time
		"spec.containers",                // a slice leaf
		"spec.affinity.nodeAffinity.foo", // no such field
	} {
		if typedFieldOf(pod, p) != nil {
			t.Errorf("%s: planned, want it left to the converter", p)
		}
	}
	// An inlined struct's field of the same name shares its key in the
	// converter's map.
	type inner struct {
		Name string `json:"name"`
	}
	type shadowed struct {
		inner `json:",inline"`
		Name  string `json:"name"`
	}
	if typedFieldOf(reflect.TypeFor[shadowed](), "name") != nil {
		t.Errorf("a name an inlined struct holds too: planned, want it left to the converter")
	}
}

// scalarPaths lists the dotted json paths of t's string, bool and integer
// fields (through structs and pointers) up to depth fields deep.
func scalarPaths(t reflect.Type, prefix string, depth int) []string {
	t = derefType(t)
	if depth == 0 || t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := jsonName(f)
		if inline || name == "-" || !f.IsExported() {
			continue
		}
		p := prefix + name
		switch derefType(f.Type).Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			out = append(out, p)
		case reflect.Struct:
			out = append(out, scalarPaths(f.Type, p+".", depth-1)...)
		}
	}
	return out
}

// converterField is what protoFields read through the converter before
// plans: the value at path rendered as ExtractFields renders it, and
// whether it is there.
func converterField(m map[string]any, path string) (string, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(m, strings.Split(path, ".")...)
	if err != nil || !found || v == nil {
		return "", false
	}
	return fmt.Sprint(v), true
}
