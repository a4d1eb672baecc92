package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Meta is the object metadata listproxy indexes at ingest.
type Meta struct {
	Namespace, Name, ResourceVersion string
	// Labels is nil when the object has none.
	Labels map[string]string
}

// ExtractMeta reads namespace, name, resourceVersion and labels from an item
// in format f. It does not decode the rest of the object: JSON reads only the
// top-level "metadata" member, protobuf only ObjectMeta (field 1 of every
// built-in object and of PartialObjectMetadata) with protowire. No scheme is
// involved, so it works for any resource.
func ExtractMeta(f Format, raw []byte) (Meta, error) {
	switch f {
	case JSON, MetaJSON:
		m, err := jsonObjectMeta(raw, 0)
		return m.Meta, err
	case Protobuf, MetaProtobuf:
		m, err := protoObjectMeta(raw, 0)
		return m.Meta, err
	}
	return Meta{}, unsupported("format %v", f)
}

// ExtractMetaUID reads what ExtractMeta reads and the object's
// metadata.uid, which ExtractMeta leaves out so that lists and events do
// not pay for it.
func ExtractMetaUID(f Format, raw []byte) (Meta, string, error) {
	switch f {
	case JSON, MetaJSON:
		m, err := jsonObjectMeta(raw, withUID)
		return m.Meta, m.uid, err
	case Protobuf, MetaProtobuf:
		m, err := protoObjectMeta(raw, withUID)
		return m.Meta, m.uid, err
	}
	return Meta{}, "", unsupported("format %v", f)
}

// ObjectUID reads an object's metadata.uid from its bytes in format f (a
// full object or a PartialObjectMetadata, JSON or protobuf), reading no
// further than the uid: in the apiserver's typed JSON and in protobuf it
// follows name and namespace; in a custom resource's JSON (keys sorted) it
// ends the metadata. "" when the object has none.
func ObjectUID(f Format, raw []byte) (string, error) {
	switch f {
	case JSON, MetaJSON:
		return jsonObjectUID(raw)
	case Protobuf, MetaProtobuf:
		return protoObjectUID(raw)
	}
	return "", unsupported("format %v", f)
}

func jsonObjectUID(raw []byte) (string, error) {
	m, err := memberStart(raw, "metadata")
	if err != nil || m < 0 || raw[m] == 'n' { // no metadata, or null
		return "", err
	}
	meta := raw[m:]
	u, err := memberStart(meta, "uid")
	if err != nil || u < 0 {
		return "", err
	}
	end, err := valueEnd(meta, u)
	if err != nil {
		return "", err
	}
	return decodeNullableString(meta[u:end])
}

// errFound ends a scan of protobuf fields early.
var errFound = errors.New("found")

// protoObjectUID reads uid (5) of ObjectMeta (1).
func protoObjectUID(raw []byte) (string, error) {
	var uid string
	err := eachField(raw, func(num protowire.Number, typ protowire.Type, om []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		err := eachField(om, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num == 5 && typ == protowire.BytesType {
				uid = string(v)
				return errFound
			}
			return nil
		})
		if err == nil {
			return errFound // metadata without a uid
		}
		return err
	})
	if errors.Is(err, errFound) {
		err = nil
	}
	return uid, err
}

// metaParts selects what an object's metadata is read for beyond Meta.
type metaParts uint8

const (
	// withInitialEventsEnd reads the initial-events-end annotation.
	withInitialEventsEnd metaParts = 1 << iota
	// withUID reads metadata.uid.
	withUID
)

type objectMeta struct {
	Meta
	uid              string
	initialEventsEnd bool
}

// jsonObjectMeta reads metadata from a JSON object, and what parts asks
// for beyond Meta.
func jsonObjectMeta(raw []byte, parts metaParts) (objectMeta, error) {
	var m objectMeta
	err := eachMember(raw, func(key, value []byte) (bool, error) {
		if !keyIs(key, "metadata") {
			return true, nil
		}
		if value[0] == 'n' { // null
			return false, nil
		}
		return false, eachMember(value, func(key, value []byte) (bool, error) {
			var err error
			switch {
			case keyIs(key, "name"):
				m.Name, err = decodeNullableString(value)
			case keyIs(key, "namespace"):
				m.Namespace, err = decodeNullableString(value)
			case keyIs(key, "resourceVersion"):
				m.ResourceVersion, err = decodeNullableString(value)
			case keyIs(key, "labels"):
				m.Labels, err = decodeStringMap(value)
			case parts&withUID != 0 && keyIs(key, "uid"):
				m.uid, err = decodeNullableString(value)
			case parts&withInitialEventsEnd != 0 && keyIs(key, "annotations"):
				var a map[string]string
				a, err = decodeStringMap(value)
				m.initialEventsEnd = a[initialEventsEndAnnotation] == "true"
			}
			if err != nil {
				return false, fmt.Errorf("metadata: %w", err)
			}
			return true, nil
		})
	})
	return m, err
}

func decodeNullableString(v []byte) (string, error) {
	if string(v) == "null" {
		return "", nil
	}
	return decodeString(v)
}

func decodeStringMap(v []byte) (map[string]string, error) {
	if string(v) == "null" {
		return nil, nil
	}
	var m map[string]string
	err := eachMember(v, func(key, value []byte) (bool, error) {
		k, err := decodeString(key)
		if err != nil {
			return false, err
		}
		s, err := decodeNullableString(value)
		if err != nil {
			return false, err
		}
		if m == nil {
			m = make(map[string]string)
		}
		m[k] = s
		return true, nil
	})
	return m, err
}

// protoObjectMeta reads ObjectMeta (field 1) of a protobuf object, and what
// parts asks for beyond Meta: name = 1, namespace = 3, uid = 5,
// resourceVersion = 6, labels = 11, annotations = 12 (map entries
// {key = 1, value = 2}).
func protoObjectMeta(raw []byte, parts metaParts) (objectMeta, error) {
	var m objectMeta
	var om []byte
	err := eachField(raw, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == 1 && typ == protowire.BytesType {
			om = v
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	err = eachField(om, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			if parts&withUID != 0 {
				m.uid = string(v)
			}
		case 6:
			m.ResourceVersion = string(v)
		case 11, 12:
			if num == 12 && parts&withInitialEventsEnd == 0 {
				return nil
			}
			var k, val string
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ == protowire.BytesType {
					switch num {
					case 1:
						k = string(v)
					case 2:
						val = string(v)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if num == 12 {
				if k == initialEventsEndAnnotation && val == "true" {
					m.initialEventsEnd = true
				}
				return nil
			}
			if m.Labels == nil {
				m.Labels = make(map[string]string)
			}
			m.Labels[k] = val
		}
		return nil
	})
	if err != nil {
		return m, fmt.Errorf("object metadata: %w", err)
	}
	return m, nil
}

// FieldPath is a field-selector path such as "spec.nodeName" and its kind.
type FieldPath struct {
	Path string
	// Bool marks a boolean field: a missing value reads "false", as the
	// apiserver's field-selector conversion does for unset booleans.
	Bool bool
}

// ExtractFields returns the value of each path in the item raw of format f,
// keyed by path. Strings are returned as is, booleans as "true"/"false",
// numbers in their decimal form; a missing or null field is "" ("false" for
// a Bool path). A path that reaches an object or array is an error.
//
// JSON and MetaJSON are read from the bytes. Protobuf is decoded with
// client-go's scheme into the typed object for gvk only to read values
// (never to produce output) and read as
// runtime.DefaultUnstructuredConverter renders it (typedField); an
// unregistered gvk is
// ErrUnsupported. MetaProtobuf is decoded as PartialObjectMetadata.
func ExtractFields(f Format, gvk schema.GroupVersionKind, raw []byte, paths []FieldPath) (map[string]string, error) {
	out := make(map[string]string, len(paths))
	for _, p := range paths {
		if p.Bool {
			out[p.Path] = "false"
		} else {
			out[p.Path] = ""
		}
	}
	if len(paths) == 0 {
		return out, nil
	}
	switch f {
	case JSON, MetaJSON:
		return out, jsonFields(raw, paths, out)
	case Protobuf, MetaProtobuf:
		return out, protoFields(f, gvk, raw, paths, out)
	}
	return nil, unsupported("format %v", f)
}

func jsonFields(raw []byte, paths []FieldPath, out map[string]string) error {
	leaves := make(map[string]struct{}, len(paths))
	inner := make(map[string]struct{})
	for _, p := range paths {
		leaves[p.Path] = struct{}{}
		for i := range len(p.Path) {
			if p.Path[i] == '.' {
				inner[p.Path[:i]] = struct{}{}
			}
		}
	}
	path := make([]byte, 0, 64)
	var walk func(obj []byte) error
	walk = func(obj []byte) error {
		return eachMember(obj, func(key, value []byte) (bool, error) {
			n := len(path)
			if n > 0 {
				path = append(path, '.')
			}
			if k, ok := rawStringBytes(key); ok {
				path = append(path, k...)
			} else {
				k, err := decodeString(key)
				if err != nil {
					return false, err
				}
				path = append(path, k...)
			}
			defer func() { path = path[:n] }()
			if _, ok := leaves[string(path)]; ok {
				return true, setJSONField(out, string(path), value)
			}
			if _, ok := inner[string(path)]; ok && value[0] == '{' {
				return true, walk(value)
			}
			return true, nil
		})
	}
	return walk(raw)
}

func setJSONField(out map[string]string, path string, v []byte) error {
	switch v[0] {
	case '"':
		s, err := decodeString(v)
		if err != nil {
			return fmt.Errorf("field %s: %w", path, err)
		}
		out[path] = s
	case 'n': // null: keep the default
	case '{', '[':
		return malformed("field %s is not a scalar", path)
	default: // true, false, numbers
		out[path] = string(v)
	}
	return nil
}

type protoUnmarshaler interface {
	runtime.Object
	Unmarshal([]byte) error
}

func protoFields(f Format, gvk schema.GroupVersionKind, raw []byte, paths []FieldPath, out map[string]string) error {
	var obj protoUnmarshaler
	if f == MetaProtobuf {
		obj = &metav1.PartialObjectMetadata{}
	} else {
		o, err := scheme.Scheme.New(gvk)
		if err != nil {
			return unsupported("protobuf fields of %v: %v", gvk, err)
		}
		u, ok := o.(protoUnmarshaler)
		if !ok {
			return unsupported("protobuf fields of %v: type %T has no protobuf", gvk, o)
		}
		obj = u
	}
	if err := obj.Unmarshal(raw); err != nil {
		return malformed("protobuf %v: %v", gvk, err)
	}
	// Paths with a plan are read from the typed object; the rest from its
	// conversion to unstructured, made once if any path needs it.
	typed := reflect.ValueOf(obj)
	var m map[string]any
	for _, p := range paths {
		if plan := typedFieldOf(typed.Type().Elem(), p.Path); plan != nil {
			if v, found := plan.read(typed); found {
				out[p.Path] = v
			}
			continue
		}
		if m == nil {
			var err error
			if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
				return fmt.Errorf("convert %v: %w", gvk, err)
			}
		}
		v, found, err := unstructured.NestedFieldNoCopy(m, strings.Split(p.Path, ".")...)
		if err != nil || !found || v == nil {
			continue
		}
		switch v := v.(type) {
		case string:
			out[p.Path] = v
		case bool, int64, int32, int, float64:
			out[p.Path] = fmt.Sprint(v)
		case json.Number:
			out[p.Path] = v.String()
		default:
			return malformed("field %s is not a scalar", p.Path)
		}
	}
	return nil
}

// DecodeStatus decodes the Object of an ERROR watch event in format f. The
// Status is decoded into the compiled-in type to be read, never re-encoded.
func DecodeStatus(f Format, raw []byte) (*metav1.Status, error) {
	st := &metav1.Status{}
	var err error
	if f.IsProtobuf() {
		err = st.Unmarshal(raw)
	} else {
		err = json.Unmarshal(raw, st)
	}
	if err != nil {
		return nil, malformed("status: %v", err)
	}
	return st, nil
}
