package wire

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// typedField reads one dotted JSON path of a decoded built-in object by
// reflection. It gives exactly what runtime.DefaultUnstructuredConverter's
// ToUnstructured followed by unstructured.NestedFieldNoCopy gives for the
// path, without converting the whole object: the converter allocates a map
// per struct and a value per field, which made reading a pod's selectable
// fields cost more than decoding the pod.
//
// A path is only planned where the converter's rules are plain: struct
// fields named by their json tag (or Go name), pointers followed, omitempty
// fields that are empty treated as missing, and a string, bool or signed
// integer at the end. Anything else (a type that converts itself such as
// Quantity or Time, a map or slice on the way, an inlined struct that might
// shadow the name, omitzero, unsigned or float leaves) is left to the
// converter.
type typedField struct {
	steps []fieldStep
}

// fieldStep is one struct field on a typedField's path.
type fieldStep struct {
	index     int
	omitEmpty bool
}

type typedFieldKey struct {
	t    reflect.Type
	path string
}

// typedFields caches plans by struct type and path; a nil plan means the
// path is read through the converter.
var typedFields sync.Map // typedFieldKey → *typedField

// typedFieldOf returns the plan for path in struct type t, or nil.
func typedFieldOf(t reflect.Type, path string) *typedField {
	key := typedFieldKey{t, path}
	if p, ok := typedFields.Load(key); ok {
		return p.(*typedField)
	}
	p := planTypedField(t, path)
	typedFields.Store(key, p)
	return p
}

func planTypedField(t reflect.Type, path string) *typedField {
	p := &typedField{}
	for _, name := range strings.Split(path, ".") {
		t = derefType(t)
		if t.Kind() != reflect.Struct || convertsItself(t) {
			return nil
		}
		f, ok := jsonField(t, name)
		if !ok {
			return nil
		}
		tag := strings.Split(f.Tag.Get("json"), ",")
		if slices.Contains(tag[1:], "omitzero") {
			return nil
		}
		p.steps = append(p.steps, fieldStep{index: f.Index[0], omitEmpty: slices.Contains(tag[1:], "omitempty")})
		t = f.Type
	}
	leaf := derefType(t)
	if convertsItself(leaf) {
		return nil
	}
	switch leaf.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return p
	}
	return nil
}

// read returns the path's value in v (a struct or a pointer to one) as
// ExtractFields renders it, and whether it is present.
func (p *typedField) read(v reflect.Value) (string, bool) {
	for _, s := range p.steps {
		if v = derefValue(v); !v.IsValid() {
			return "", false
		}
		v = v.Field(s.index)
		if s.omitEmpty && isEmptyField(v) {
			return "", false
		}
	}
	if v = derefValue(v); !v.IsValid() {
		return "", false
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	default: // the signed integers planTypedField admits
		return strconv.FormatInt(v.Int(), 10), true
	}
}

// jsonField finds the field the converter names name in struct t, as its
// fieldInfoFromField names fields. It gives up when an inlined struct could
// hold the name too or the field is unexported.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	var found reflect.StructField
	n := 0
	for i := range t.NumField() {
		f := t.Field(i)
		fieldName, inline := jsonName(f)
		if inline {
			it := derefType(f.Type)
			if it.Kind() != reflect.Struct {
				return reflect.StructField{}, false
			}
			for j := range it.NumField() {
				if inner, innerInline := jsonName(it.Field(j)); innerInline || inner == name {
					return reflect.StructField{}, false
				}
			}
			continue
		}
		if fieldName == name {
			found = f
			n++
		}
	}
	if n != 1 || !found.IsExported() {
		return reflect.StructField{}, false
	}
	return found, true
}

// jsonName is the converter's name of a struct field, or inline for an
// embedded struct it flattens into its parent; "-" is never matched.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag, ok := f.Tag.Lookup("json")
	if !ok || tag == "" {
		if f.Anonymous {
			return "", true
		}
		return f.Name, false
	}
	items := strings.Split(tag, ",")
	if slices.Contains(items[1:], "inline") || (items[0] == "" && f.Anonymous) {
		return "", true
	}
	if items[0] == "" {
		return f.Name, false
	}
	return items[0], false
}

// convertsItself says whether the converter hands t (or *t) to its own
// marshaling (json.Marshaler, UnstructuredConverter) instead of walking it.
func convertsItself(t reflect.Type) bool {
	if value.TypeReflectEntryOf(t).CanConvertToUnstructured() {
		return true
	}
	if t.Kind() == reflect.Pointer {
		return value.TypeReflectEntryOf(t.Elem()).CanConvertToUnstructured()
	}
	return value.TypeReflectEntryOf(reflect.PointerTo(t)).CanConvertToUnstructured()
}

// isEmptyField is the converter's omitempty test (its isEmpty) for the kinds
// a plan walks through.
func isEmptyField(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Pointer:
		return v.IsNil()
	}
	return false
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// derefValue follows pointers; a nil one gives the zero Value.
func derefValue(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}
