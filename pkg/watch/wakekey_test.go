package watch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

func TestWakeKey(t *testing.T) {
	tests := []struct {
		name     string
		selector string
		want     snapshot.FieldValue
	}{
		{name: "none", selector: "", want: snapshot.FieldValue{}},
		{name: "node", selector: "spec.nodeName=node-7", want: snapshot.FieldValue{Field: "spec.nodeName", Value: "node-7"}},
		{name: "double equals", selector: "spec.nodeName==node-7", want: snapshot.FieldValue{Field: "spec.nodeName", Value: "node-7"}},
		{name: "not equals", selector: "spec.nodeName!=node-7", want: snapshot.FieldValue{}},
		{name: "empty value", selector: "spec.nodeName=", want: snapshot.FieldValue{Field: "spec.nodeName", Value: ""}},
		{name: "escaped value", selector: `metadata.name=a\,b`, want: snapshot.FieldValue{Field: "metadata.name", Value: "a,b"}},
		{name: "name over node", selector: "spec.nodeName=node-7,metadata.name=p1", want: snapshot.FieldValue{Field: "metadata.name", Value: "p1"}},
		{name: "node over namespace", selector: "metadata.namespace=a,spec.nodeName=node-7", want: snapshot.FieldValue{Field: "spec.nodeName", Value: "node-7"}},
		{name: "namespace", selector: "metadata.namespace=a,status.phase!=Running", want: snapshot.FieldValue{Field: "metadata.namespace", Value: "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := fields.ParseSelector(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, wakeKey(sel)); diff != "" {
				t.Errorf("wakeKey(%q) (-want +got):\n%s", tc.selector, diff)
			}
		})
	}
}
