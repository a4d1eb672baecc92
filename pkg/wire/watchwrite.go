package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// ObjectType is the type a resource's watch objects carry.
type ObjectType struct {
	// GVK is the object's kind, e.g. v1 Pod or demo.listproxy.io/v1 Widget.
	GVK schema.GroupVersionKind
	// Custom marks a custom resource: its JSON objects are unstructured and
	// keep kind/apiVersion as list items.
	Custom bool
}

// metaAPIVersion and metaKind name the type of the metadata formats' objects.
const (
	metaAPIVersion = "meta.k8s.io/v1"
	metaKind       = "PartialObjectMetadata"
)

// AppendWatchEvent appends one watch event of type t in format f, byte-
// identical to the kube-apiserver's (v1.36) frame for the same object. item
// is the object in list-item form (as stored; see WatchDecoder). Observed
// encodings it reproduces:
//   - JSON: {"type":T,"object":O}\n, where O is the item with
//     {"kind":K,"apiVersion":V, prepended for built-in types (their list
//     items carry no TypeMeta) and the item itself for custom resources and
//     PartialObjectMetadata (whose items keep it).
//   - Protobuf: a 4-byte big-endian length, then metav1.WatchEvent{type = 1,
//     object = 2 {raw = 1: "k8s\x00" + runtime.Unknown{typeMeta, raw = item,
//     "", ""}}}.
func AppendWatchEvent(dst []byte, f Format, t EventType, typ ObjectType, item []byte) []byte {
	switch f {
	case JSON, MetaJSON:
		dst = append(dst, `{"type":`...)
		dst = appendJSONString(dst, string(t))
		dst = append(dst, `,"object":`...)
		if f == JSON && !typ.Custom && len(item) > 1 && item[0] == '{' {
			apiVersion, kind := typ.GVK.ToAPIVersionAndKind()
			dst = append(dst, `{"kind":`...)
			dst = appendJSONString(dst, kind)
			dst = append(dst, `,"apiVersion":`...)
			dst = appendJSONString(dst, apiVersion)
			if rest := item[1:]; len(rest) > 0 && rest[0] != '}' {
				dst = append(dst, ',')
			}
			dst = append(dst, item[1:]...)
		} else {
			dst = append(dst, item...)
		}
		return append(dst, "}\n"...)
	case Protobuf, MetaProtobuf:
		apiVersion, kind := typ.GVK.ToAPIVersionAndKind()
		if f == MetaProtobuf {
			apiVersion, kind = metaAPIVersion, metaKind
		}
		unknownLen := len(appendUnknownHeader(nil, apiVersion, kind, len(item))) + len(item) + len(unknownTrailer)
		rawExtLen := 1 + protowire.SizeVarint(uint64(unknownLen)) + unknownLen
		eventLen := 1 + protowire.SizeVarint(uint64(len(t))) + len(t) +
			1 + protowire.SizeVarint(uint64(rawExtLen)) + rawExtLen
		dst = binary.BigEndian.AppendUint32(dst, uint32(eventLen))
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendString(dst, string(t))
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(rawExtLen))
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(unknownLen))
		dst = appendUnknownHeader(dst, apiVersion, kind, len(item))
		dst = append(dst, item...)
		return append(dst, unknownTrailer...)
	}
	return dst
}

// statusType is the type of an ERROR event's object: metav1.Status is
// unversioned and always encoded as v1 Status, whatever the watched type
// and format.
var statusType = ObjectType{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Status"}}

// AppendErrorEvent appends one ERROR watch event carrying status in format
// f, as the apiserver sends a watch error (the cacher's errWatcher): the
// Status as v1 Status in JSON, or wrapped in the protobuf envelope, in every
// format (PartialObjectMetadata watches included).
func AppendErrorEvent(dst []byte, f Format, status *metav1.Status) ([]byte, error) {
	st := *status
	st.TypeMeta = metav1.TypeMeta{}
	var item []byte
	var err error
	switch f {
	case JSON, MetaJSON:
		// kind and apiVersion are prepended, as for built-in objects.
		item, err = json.Marshal(&st)
		f = JSON
	case Protobuf, MetaProtobuf:
		item, err = st.Marshal()
		f = Protobuf
	default:
		return dst, unsupported("format %v", f)
	}
	if err != nil {
		return dst, fmt.Errorf("encode status: %w", err)
	}
	return AppendWatchEvent(dst, f, Error, statusType, item), nil
}

// initialEventsEndValue is the value of the initial-events-end annotation.
const initialEventsEndValue = "true"

// BookmarkItem returns the object of a BOOKMARK at resourceVersion rv in
// list-item form (wrap it with AppendWatchEvent): the empty object of the
// type, as the apiserver's watch cache builds it, with
// metadata.resourceVersion and, when initialEventsEnd is set, the
// k8s.io/initial-events-end: "true" annotation that ends a watch-list's
// initial events. Built-in types are encoded from client-go's scheme, so
// their zero-valued fields are the apiserver's; a built-in type missing from
// it is ErrUnsupported.
func BookmarkItem(f Format, typ ObjectType, rv string, initialEventsEnd bool) ([]byte, error) {
	var annotations map[string]string
	if initialEventsEnd {
		annotations = map[string]string{initialEventsEndAnnotation: initialEventsEndValue}
	}
	if f.IsMeta() {
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: annotations}}
		if f == MetaProtobuf {
			return obj.Marshal()
		}
		obj.TypeMeta = metav1.TypeMeta{APIVersion: metaAPIVersion, Kind: metaKind}
		return json.Marshal(obj)
	}
	if typ.Custom {
		if f != JSON {
			return nil, unsupported("protobuf custom resources")
		}
		// Unstructured objects encode as maps: keys sorted.
		md := map[string]any{"resourceVersion": rv}
		if annotations != nil {
			md["annotations"] = annotations
		}
		apiVersion, kind := typ.GVK.ToAPIVersionAndKind()
		return json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md})
	}
	obj, err := scheme.Scheme.New(typ.GVK)
	if err != nil {
		return nil, unsupported("bookmark of %v: %v", typ.GVK, err)
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, unsupported("bookmark of %v: %v", typ.GVK, err)
	}
	acc.SetResourceVersion(rv)
	acc.SetAnnotations(annotations)
	if f == Protobuf {
		m, ok := obj.(interface{ Marshal() ([]byte, error) })
		if !ok {
			return nil, unsupported("bookmark of %v: type %T has no protobuf", typ.GVK, obj)
		}
		return m.Marshal()
	}
	return json.Marshal(obj)
}

// SetResourceVersion returns a copy of item (list-item form, format f) with
// metadata.resourceVersion replaced by rv, encoded as the apiserver would
// encode the object carrying rv. The watch cache sends an object that stops
// matching a watch's selectors as DELETED: the previous object at the
// event's resourceVersion.
func SetResourceVersion(f Format, item []byte, rv string) ([]byte, error) {
	switch f {
	case JSON, MetaJSON:
		return setJSONResourceVersion(item, rv)
	case Protobuf, MetaProtobuf:
		return setProtoResourceVersion(item, rv)
	}
	return nil, unsupported("format %v", f)
}

// offsetIn returns the offset of sub in b; sub must be a subslice of b.
func offsetIn(b, sub []byte) int { return cap(b) - cap(sub) }

func setJSONResourceVersion(item []byte, rv string) ([]byte, error) {
	start, end := -1, -1
	err := eachMember(item, func(key, value []byte) (bool, error) {
		if !keyIs(key, "metadata") {
			return true, nil
		}
		if value[0] != '{' {
			return false, malformed("metadata is not an object")
		}
		return false, eachMember(value, func(key, v []byte) (bool, error) {
			if !keyIs(key, "resourceVersion") {
				return true, nil
			}
			start = offsetIn(item, v)
			end = start + len(v)
			return false, nil
		})
	})
	if err != nil {
		return nil, err
	}
	if start < 0 {
		return nil, malformed("object without metadata.resourceVersion")
	}
	out := make([]byte, 0, len(item)+len(rv))
	out = append(out, item[:start]...)
	out = appendJSONString(out, rv)
	return append(out, item[end:]...), nil
}

// setProtoResourceVersion rewrites ObjectMeta (field 1 of every built-in
// object and of PartialObjectMetadata) field 6, resourceVersion. gogo-
// generated code writes fields in number order and always writes
// resourceVersion, so rewriting it in place and re-sizing the enclosing
// field reproduces the apiserver's encoding.
func setProtoResourceVersion(item []byte, rv string) ([]byte, error) {
	out := make([]byte, 0, len(item)+len(rv))
	found := false
	err := eachField(item, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType || found {
			return appendRawField(&out, item, num, typ, v)
		}
		md := make([]byte, 0, len(v)+len(rv))
		err := eachField(v, func(num protowire.Number, typ protowire.Type, mv []byte) error {
			if num == 6 && typ == protowire.BytesType {
				found = true
				md = protowire.AppendTag(md, 6, protowire.BytesType)
				md = protowire.AppendString(md, rv)
				return nil
			}
			return appendRawField(&md, v, num, typ, mv)
		})
		if err != nil {
			return err
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, md)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, malformed("protobuf object without metadata.resourceVersion")
	}
	return out, nil
}

// appendRawField appends one field of msg (as eachField reported it) with
// its original bytes.
func appendRawField(dst *[]byte, msg []byte, num protowire.Number, typ protowire.Type, v []byte) error {
	end := offsetIn(msg, v) + len(v)
	// The field starts with its tag (and, for bytes, the length) before v.
	tagLen := protowire.SizeTag(num)
	start := offsetIn(msg, v) - tagLen
	if typ == protowire.BytesType {
		start -= protowire.SizeVarint(uint64(len(v)))
	}
	if start < 0 || end > len(msg) {
		return fmt.Errorf("%w: field %d out of range", ErrMalformed, num)
	}
	*dst = append(*dst, msg[start:end]...)
	return nil
}
