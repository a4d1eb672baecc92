package catalog

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/wire"
)

// fieldKind says how the apiserver renders a selectable field's value.
type fieldKind int

const (
	fieldString fieldKind = iota // as is; missing is ""
	fieldBool                    // "true"/"false"; missing is "false"
	fieldInt                     // decimal; missing is "0"
)

// FieldSpec is one field selector label and where its value lives in the
// object's JSON form. The first non-empty path wins.
type FieldSpec struct {
	Label string
	Paths []string
	kind  fieldKind
	// PerObject: the values differ per object (an IP, a UID), so they
	// are not interned (snapshot.NewFieldNamesPerObject).
	PerObject bool
}

// builtinFields lists, per built-in resource, the field selector labels the
// apiserver evaluates beyond metadata.name (and metadata.namespace where the
// type's field-label conversion accepts it). They mirror the apiserver's
// registry strategies (ToSelectableFields / GetAttrs) and the v1 field-label
// conversions; a label not listed here passes through.
var builtinFields = map[schema.GroupResource]struct {
	namespaceLabel bool
	fields         []FieldSpec
}{
	{Resource: "pods"}: {namespaceLabel: true, fields: []FieldSpec{
		{Label: "spec.nodeName", Paths: []string{"spec.nodeName"}},
		{Label: "spec.restartPolicy", Paths: []string{"spec.restartPolicy"}},
		{Label: "spec.schedulerName", Paths: []string{"spec.schedulerName"}},
		{Label: "spec.serviceAccountName", Paths: []string{"spec.serviceAccountName"}},
		{Label: "spec.hostNetwork", Paths: []string{"spec.hostNetwork"}, kind: fieldBool},
		{Label: "status.phase", Paths: []string{"status.phase"}},
		{Label: "status.podIP", Paths: []string{"status.podIP"}, PerObject: true},
		{Label: "status.nominatedNodeName", Paths: []string{"status.nominatedNodeName"}},
	}},
	{Resource: "nodes"}: {fields: []FieldSpec{
		{Label: "spec.unschedulable", Paths: []string{"spec.unschedulable"}, kind: fieldBool},
	}},
	{Resource: "namespaces"}: {fields: []FieldSpec{
		{Label: "status.phase", Paths: []string{"status.phase"}},
	}},
	{Resource: "secrets"}: {namespaceLabel: true, fields: []FieldSpec{
		{Label: "type", Paths: []string{"type"}},
	}},
	{Resource: "services"}: {namespaceLabel: true, fields: []FieldSpec{
		{Label: "spec.clusterIP", Paths: []string{"spec.clusterIP"}, PerObject: true},
		{Label: "spec.type", Paths: []string{"spec.type"}},
	}},
	{Resource: "replicationcontrollers"}: {namespaceLabel: true, fields: []FieldSpec{
		{Label: "status.replicas", Paths: []string{"status.replicas"}, kind: fieldInt},
	}},
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {fields: []FieldSpec{
		{Label: "spec.signerName", Paths: []string{"spec.signerName"}},
	}},
	{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}: {fields: []FieldSpec{
		{Label: "spec.signerName", Paths: []string{"spec.signerName"}},
	}},
	// The PodCertificateRequest field-label conversion does not accept
	// metadata.namespace.
	{Group: "certificates.k8s.io", Resource: "podcertificaterequests"}: {fields: []FieldSpec{
		{Label: "spec.signerName", Paths: []string{"spec.signerName"}},
		{Label: "spec.podName", Paths: []string{"spec.podName"}},
		{Label: "spec.nodeName", Paths: []string{"spec.nodeName"}},
	}},
	{Resource: "events"}: {namespaceLabel: true, fields: []FieldSpec{
		{Label: "involvedObject.kind", Paths: []string{"involvedObject.kind"}},
		{Label: "involvedObject.namespace", Paths: []string{"involvedObject.namespace"}},
		{Label: "involvedObject.name", Paths: []string{"involvedObject.name"}},
		{Label: "involvedObject.uid", Paths: []string{"involvedObject.uid"}, PerObject: true},
		{Label: "involvedObject.apiVersion", Paths: []string{"involvedObject.apiVersion"}},
		{Label: "involvedObject.resourceVersion", Paths: []string{"involvedObject.resourceVersion"}, PerObject: true},
		{Label: "involvedObject.fieldPath", Paths: []string{"involvedObject.fieldPath"}},
		{Label: "reason", Paths: []string{"reason"}},
		{Label: "reportingComponent", Paths: []string{"reportingComponent"}},
		{Label: "source", Paths: []string{"source.component", "reportingComponent"}},
		{Label: "type", Paths: []string{"type"}},
	}},
}

// SelectableFields describes the field selectors listproxy evaluates for one
// resource.
type SelectableFields struct {
	// labels holds every accepted field label.
	labels map[string]bool
	// specs are the non-metadata fields to extract at ingest.
	specs []FieldSpec
	// metaOnly is true when only metadata.* labels are accepted; those can be
	// evaluated on any representation, PartialObjectMetadata included.
	metaOnly bool
}

// fieldsFor returns the field selectors listproxy evaluates for a resource:
// the built-in table, or a custom resource's SelectableFields (metadata.name
// and metadata.namespace are accepted for every custom resource). Other
// built-in resources get metadata.name, and metadata.namespace when
// namespaced, as the apiserver's default field-label conversion accepts.
func fieldsFor(gr schema.GroupResource, custom bool, namespaced bool, crdSelectable []string) SelectableFields {
	sf := SelectableFields{labels: map[string]bool{"metadata.name": true}}
	if custom {
		sf.labels["metadata.namespace"] = true
		for _, p := range crdSelectable {
			sf.labels[p] = true
			sf.specs = append(sf.specs, FieldSpec{Label: p, Paths: []string{p}})
		}
		sf.metaOnly = len(sf.specs) == 0
		return sf
	}
	b, ok := builtinFields[gr]
	if !ok {
		if namespaced {
			sf.labels["metadata.namespace"] = true
		}
		sf.metaOnly = true
		return sf
	}
	if b.namespaceLabel {
		sf.labels["metadata.namespace"] = true
	}
	for _, f := range b.fields {
		sf.labels[f.Label] = true
	}
	sf.specs = b.fields
	sf.metaOnly = len(b.fields) == 0
	return sf
}

// Specs are the fields whose values a store extracts from its objects at
// ingest; the caller must not modify them.
func (sf SelectableFields) Specs() []FieldSpec { return sf.specs }

// Value renders the field as the apiserver's field set does, from the
// values found at its paths.
func (s FieldSpec) Value(found map[string]string) string {
	v := ""
	for _, p := range s.Paths {
		if v = found[p]; v != "" {
			break
		}
	}
	if v != "" {
		return v
	}
	switch s.kind {
	case fieldBool:
		return "false"
	case fieldInt:
		return "0"
	}
	return ""
}

// Accepts reports whether listproxy can evaluate every requirement of sel.
// metaOnlyData is true when objects are held as PartialObjectMetadata, where
// only metadata.* fields are known.
func (sf SelectableFields) Accepts(sel fields.Selector, metaOnlyData bool) bool {
	for _, req := range sel.Requirements() {
		if !sf.labels[req.Field] {
			return false
		}
		if metaOnlyData && req.Field != "metadata.name" && req.Field != "metadata.namespace" {
			return false
		}
	}
	return true
}

// FieldsFromObject reports whether a store of info in format reads every
// selectable field from its objects; a store of PartialObjectMetadata (or
// of Table rows fed with it) answers only metadata.name and
// metadata.namespace.
func FieldsFromObject(info *Resource, format wire.Format) bool {
	switch format {
	case wire.MetaJSON, wire.MetaProtobuf:
		return false
	case wire.Table:
		return info.Table.Object
	}
	return true
}
