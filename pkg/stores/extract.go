package stores

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// newExtractor returns how one resource's items in one representation become
// snapshot entries: metadata and selectable field values are read once, the
// bytes are kept as they are.
func newExtractor(info *catalog.Resource, format wire.Format) snapshot.Extractor {
	entryOf := newEntryMaker(info, format)
	return func(raw []byte) (*snapshot.Entry, error) { return entryOf(raw, raw) }
}

// newEntryMaker returns how an entry storing stored is made from object,
// one of the resource's objects in format: its metadata and selectable
// field values are read from object.
func newEntryMaker(info *catalog.Resource, format wire.Format) func(object, stored []byte) (*snapshot.Entry, error) {
	var specs []catalog.FieldSpec
	var paths []wire.FieldPath
	if !format.IsMeta() {
		for _, s := range info.Fields.Specs() {
			if s.Label == "metadata.name" || s.Label == "metadata.namespace" {
				continue // every entry answers these itself
			}
			specs = append(specs, s)
			for _, p := range s.Paths {
				paths = append(paths, wire.FieldPath{Path: p})
			}
		}
	}
	names := make([]string, len(specs))
	var perObject []string
	for i, s := range specs {
		names[i] = s.Label
		if s.PerObject {
			perObject = append(perObject, s.Label)
		}
	}
	fieldNames := snapshot.NewFieldNamesPerObject(names, perObject)
	gvk := info.GVR.GroupVersion().WithKind(info.Kind)
	return func(raw, stored []byte) (*snapshot.Entry, error) {
		m, err := wire.ExtractMeta(format, raw)
		if err != nil {
			return nil, err
		}
		rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("object %s/%s: resourceVersion %q: %w", m.Namespace, m.Name, m.ResourceVersion, err)
		}
		var values []string
		if len(paths) > 0 {
			found, err := wire.ExtractFields(format, gvk, raw, paths)
			if err != nil {
				return nil, err
			}
			values = make([]string, len(specs))
			for i, s := range specs {
				values[i] = s.Value(found)
			}
		}
		return snapshot.NewEntry(m.Namespace, m.Name, rv, m.Labels, fieldNames, values, stored), nil
	}
}

// ObjectUID reads the metadata.uid of e's object, stored in format f (a
// Table row's object for wire.Table), the key of a shard selector by uid.
func ObjectUID(f wire.Format, e *snapshot.Entry) (string, error) {
	if f != wire.Table {
		return wire.ObjectUID(f, e.Raw)
	}
	row, ok := e.Extra.(*TableRow)
	if !ok || row.Row == nil {
		return "", errors.New("an entry of a Table store without its row")
	}
	return wire.ObjectUID(wire.MetaJSON, row.Object(e.Raw))
}
