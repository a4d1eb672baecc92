package proxy

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/snapshot/wire"
)

// newExtractor returns how one resource's items in one representation become
// snapshot entries: metadata and selectable field values are read once, the
// bytes are kept as they are.
func newExtractor(info *resourceInfo, format wire.Format) snapshot.Extractor {
	var specs []fieldSpec
	var paths []wire.FieldPath
	if !format.IsMeta() {
		specs = info.Fields.specs
		for _, s := range specs {
			for _, p := range s.paths {
				paths = append(paths, wire.FieldPath{Path: p})
			}
		}
	}
	gvk := info.GVR.GroupVersion().WithKind(info.Kind)
	return func(raw []byte) (*snapshot.Entry, error) {
		m, err := wire.ExtractMeta(format, raw)
		if err != nil {
			return nil, err
		}
		rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("object %s/%s: resourceVersion %q: %w", m.Namespace, m.Name, m.ResourceVersion, err)
		}
		set := make(fields.Set, 2+len(specs))
		set["metadata.name"] = m.Name
		set["metadata.namespace"] = m.Namespace
		if len(paths) > 0 {
			values, err := wire.ExtractFields(format, gvk, raw, paths)
			if err != nil {
				return nil, err
			}
			for _, s := range specs {
				set[s.label] = fieldValue(s, values)
			}
		}
		return &snapshot.Entry{
			Key:       snapshot.ObjectKey(m.Namespace, m.Name),
			Namespace: m.Namespace,
			Name:      m.Name,
			RV:        rv,
			Labels:    labels.Set(m.Labels),
			Fields:    set,
			Raw:       append([]byte(nil), raw...),
		}, nil
	}
}

// fieldValue renders a field as the apiserver's field set does.
func fieldValue(s fieldSpec, values map[string]string) string {
	v := ""
	for _, p := range s.paths {
		if v = values[p]; v != "" {
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
