package snapshot

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// The compact sets must answer every selector exactly as the maps the
// apiserver builds (labels.Set, fields.Set) do.
func TestCompactSetsMatchLikeMaps(t *testing.T) {
	labelMap := map[string]string{"app": "web", "tier": "front", "empty": "", "app.kubernetes.io/name": "shop"}
	names := NewFieldNames("spec.nodeName", "status.phase", "spec.hostNetwork")
	e := NewEntry("team-a", "web-1", 7, labelMap, names, []string{"node-1", "Running", "false"}, []byte(`{}`))

	if e.Key != "team-a/web-1" || e.Namespace() != "team-a" || e.Name() != "web-1" || e.RV != 7 || string(e.Raw) != "{}" {
		t.Fatalf("entry = %+v", e)
	}
	fieldMap := fields.Set{
		"metadata.name": "web-1", "metadata.namespace": "team-a",
		"spec.nodeName": "node-1", "status.phase": "Running", "spec.hostNetwork": "false",
	}
	for _, sel := range []string{
		"", "app=web", "app!=web", "app=db", "tier in (front,back)", "tier notin (front)", "empty=", "empty",
		"!empty", "missing", "!missing", "missing!=x", "app.kubernetes.io/name=shop,tier=front", "app,tier,!db",
	} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatalf("parse %q: %v", sel, err)
		}
		if got, want := s.Matches(e.Labels()), s.Matches(labels.Set(labelMap)); got != want {
			t.Errorf("label selector %q: compact %v, map %v", sel, got, want)
		}
	}
	for _, sel := range []string{
		"", "metadata.name=web-1", "metadata.name!=web-1", "metadata.namespace=team-a", "metadata.namespace=other",
		"spec.nodeName=node-1", "spec.nodeName=", "status.phase!=Pending", "spec.hostNetwork=false",
		"spec.nodeName=node-1,status.phase=Running", "spec.unknown=x", "spec.unknown!=x",
	} {
		s, err := fields.ParseSelector(sel)
		if err != nil {
			t.Fatalf("parse %q: %v", sel, err)
		}
		if got, want := s.Matches(e.Fields()), s.Matches(fieldMap); got != want {
			t.Errorf("field selector %q: compact %v, map %v", sel, got, want)
		}
	}
}

func TestClusterScopedEntryWithoutLabelsOrFields(t *testing.T) {
	e := NewEntry("", "node-1", 3, nil, nil, nil, []byte(`x`))
	if e.Key != "node-1" || e.Name() != "node-1" || e.Namespace() != "" {
		t.Fatalf("entry = %+v", e)
	}
	if e.Labels().Has("a") || !labels.Everything().Matches(e.Labels()) {
		t.Errorf("empty labels misbehave")
	}
	if !e.Fields().Has("metadata.name") || e.Fields().Get("metadata.namespace") != "" || e.Fields().Has("spec.x") {
		t.Errorf("fields misbehave")
	}
}

// Per-object field values, kept with the entry rather than interned,
// answer as interned ones do, whatever their length and position.
func TestPerObjectFields(t *testing.T) {
	long := strings.Repeat("x", 300)     // a length of two uvarint bytes
	longer := strings.Repeat("z", 20000) // three
	names := NewFieldNamesPerObject(
		[]string{"spec.nodeName", "status.podIP", "status.phase", "involvedObject.uid"},
		[]string{"status.podIP", "involvedObject.uid"})
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{name: "set", values: []string{"node-1", "10.0.0.7", "Running", "4b1e2a3c"}},
		{name: "empty", values: []string{"node-1", "", "Pending", ""}},
		{name: "long", values: []string{"", long, "Running", long + "y"}},
		{name: "longer", values: []string{"node-1", longer, "Running", long}},
		{name: "missing_values", values: []string{"node-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEntry("team-a", "web-1", 7, nil, names, tc.values, []byte(`{}`))
			want := map[string]string{"metadata.name": "web-1", "metadata.namespace": "team-a"}
			for i, n := range names.names {
				want[n] = ""
				if i < len(tc.values) {
					want[n] = tc.values[i]
				}
			}
			got := map[string]string{}
			for n := range want {
				if !e.Fields().Has(n) {
					t.Errorf("Has(%q) = false", n)
				}
				got[n] = e.Fields().Get(n)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if e.Fields().Has("spec.unknown") {
				t.Error(`Has("spec.unknown") = true`)
			}
		})
	}
}
