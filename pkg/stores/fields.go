package stores

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

// fieldSpec is one field selector label and where its value lives in the
// object's JSON form. The first non-empty path wins.
type fieldSpec struct {
	label string
	paths []string
	kind  fieldKind
	// perObject: the values differ per object (an IP, a UID), so they
	// are not interned (snapshot.NewFieldNamesPerObject).
	perObject bool
}

// builtinFields lists, per built-in resource, the field selector labels the
// apiserver evaluates beyond metadata.name (and metadata.namespace where the
// type's field-label conversion accepts it). They mirror the apiserver's
// registry strategies (ToSelectableFields / GetAttrs) and the v1 field-label
// conversions; a label not listed here passes through.
var builtinFields = map[schema.GroupResource]struct {
	namespaceLabel bool
	fields         []fieldSpec
}{
	{Resource: "pods"}: {namespaceLabel: true, fields: []fieldSpec{
		{label: "spec.nodeName", paths: []string{"spec.nodeName"}},
		{label: "spec.restartPolicy", paths: []string{"spec.restartPolicy"}},
		{label: "spec.schedulerName", paths: []string{"spec.schedulerName"}},
		{label: "spec.serviceAccountName", paths: []string{"spec.serviceAccountName"}},
		{label: "spec.hostNetwork", paths: []string{"spec.hostNetwork"}, kind: fieldBool},
		{label: "status.phase", paths: []string{"status.phase"}},
		{label: "status.podIP", paths: []string{"status.podIP"}, perObject: true},
		{label: "status.nominatedNodeName", paths: []string{"status.nominatedNodeName"}},
	}},
	{Resource: "nodes"}: {fields: []fieldSpec{
		{label: "spec.unschedulable", paths: []string{"spec.unschedulable"}, kind: fieldBool},
	}},
	{Resource: "namespaces"}: {fields: []fieldSpec{
		{label: "status.phase", paths: []string{"status.phase"}},
	}},
	{Resource: "secrets"}: {namespaceLabel: true, fields: []fieldSpec{
		{label: "type", paths: []string{"type"}},
	}},
	{Resource: "services"}: {namespaceLabel: true, fields: []fieldSpec{
		{label: "spec.clusterIP", paths: []string{"spec.clusterIP"}, perObject: true},
		{label: "spec.type", paths: []string{"spec.type"}},
	}},
	{Resource: "replicationcontrollers"}: {namespaceLabel: true, fields: []fieldSpec{
		{label: "status.replicas", paths: []string{"status.replicas"}, kind: fieldInt},
	}},
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {fields: []fieldSpec{
		{label: "spec.signerName", paths: []string{"spec.signerName"}},
	}},
	{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}: {fields: []fieldSpec{
		{label: "spec.signerName", paths: []string{"spec.signerName"}},
	}},
	// The PodCertificateRequest field-label conversion does not accept
	// metadata.namespace.
	{Group: "certificates.k8s.io", Resource: "podcertificaterequests"}: {fields: []fieldSpec{
		{label: "spec.signerName", paths: []string{"spec.signerName"}},
		{label: "spec.podName", paths: []string{"spec.podName"}},
		{label: "spec.nodeName", paths: []string{"spec.nodeName"}},
	}},
	{Resource: "events"}: {namespaceLabel: true, fields: []fieldSpec{
		{label: "involvedObject.kind", paths: []string{"involvedObject.kind"}},
		{label: "involvedObject.namespace", paths: []string{"involvedObject.namespace"}},
		{label: "involvedObject.name", paths: []string{"involvedObject.name"}},
		{label: "involvedObject.uid", paths: []string{"involvedObject.uid"}, perObject: true},
		{label: "involvedObject.apiVersion", paths: []string{"involvedObject.apiVersion"}},
		{label: "involvedObject.resourceVersion", paths: []string{"involvedObject.resourceVersion"}, perObject: true},
		{label: "involvedObject.fieldPath", paths: []string{"involvedObject.fieldPath"}},
		{label: "reason", paths: []string{"reason"}},
		{label: "reportingComponent", paths: []string{"reportingComponent"}},
		{label: "source", paths: []string{"source.component", "reportingComponent"}},
		{label: "type", paths: []string{"type"}},
	}},
}

// SelectableFields describes the field selectors listproxy evaluates for one
// resource.
type SelectableFields struct {
	// labels holds every accepted field label.
	labels map[string]bool
	// specs are the non-metadata fields to extract at ingest.
	specs []fieldSpec
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
			sf.specs = append(sf.specs, fieldSpec{label: p, paths: []string{p}})
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
		sf.labels[f.label] = true
	}
	sf.specs = b.fields
	sf.metaOnly = len(b.fields) == 0
	return sf
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
