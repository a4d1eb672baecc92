package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ListParts is a list response cut at its items: WriteList writes Head, then
// for each item AppendItemPrefix's bytes and the item, then Tail. Callers
// that assemble a response from pieces of their own (pre-compressed items)
// use it to stay byte-identical to WriteList.
type ListParts struct {
	Head, Tail []byte
}

// SplitList returns the parts of the list response WriteList writes for f,
// env and items. Items are only measured (protobuf lengths), not copied.
// Errors are ErrUnsupported for an unstructured envelope in a format other
// than JSON or an unknown format, and envelope encoding errors.
func SplitList(f Format, env ListEnvelope, items [][]byte) (ListParts, error) {
	if env.Unstructured && f != JSON {
		return ListParts{}, unsupported("unstructured list in format %v", f)
	}
	switch f {
	case JSON, MetaJSON:
		return splitJSONList(f, env, len(items))
	case Protobuf, MetaProtobuf:
		return splitProtoList(env, items), nil
	}
	return ListParts{}, unsupported("format %v", f)
}

// Size returns the length of the response WriteListParts writes for p, f
// and items (a Content-Length), without writing it.
func (p ListParts) Size(f Format, items [][]byte) int64 {
	n := int64(len(p.Head) + len(p.Tail))
	var prefix [16]byte
	for i, it := range items {
		n += int64(len(AppendItemPrefix(prefix[:0], f, i == 0, it)) + len(it))
	}
	return n
}

// AppendItemPrefix appends to dst the bytes WriteList writes just before an
// item: in JSON a "," unless the item is the first; in protobuf the list's
// items field tag and the item's length.
func AppendItemPrefix(dst []byte, f Format, first bool, item []byte) []byte {
	if f.IsProtobuf() {
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		return protowire.AppendVarint(dst, uint64(len(item)))
	}
	if first {
		return dst
	}
	return append(dst, ',')
}

func splitJSONList(f Format, env ListEnvelope, n int) (ListParts, error) {
	lm := env.ListMeta
	var head []byte
	if env.Unstructured {
		head = append(head, `{"apiVersion":`...)
		head = appendJSONString(head, env.APIVersion)
		head = append(head, `,"items":`...)
	} else {
		head = append(head, '{')
		if env.Kind != "" {
			head = append(head, `"kind":`...)
			head = appendJSONString(head, env.Kind)
			head = append(head, ',')
		}
		if env.APIVersion != "" {
			head = append(head, `"apiVersion":`...)
			head = appendJSONString(head, env.APIVersion)
			head = append(head, ',')
		}
		meta, err := json.Marshal(lm.metaV1())
		if err != nil {
			return ListParts{}, fmt.Errorf("encode list metadata: %w", err)
		}
		head = append(head, `"metadata":`...)
		head = append(head, meta...)
		head = append(head, `,"items":`...)
	}
	var tail []byte
	if n == 0 && f == MetaJSON {
		// PartialObjectMetadataList.Items is nil when empty.
		head = append(head, "null"...)
	} else {
		head = append(head, '[')
		tail = append(tail, ']')
	}
	if env.Unstructured {
		m := map[string]any{"continue": lm.Continue, "resourceVersion": lm.ResourceVersion}
		if lm.RemainingItemCount != nil {
			m["remainingItemCount"] = *lm.RemainingItemCount
		}
		if lm.ShardSelector != "" {
			m["shardInfo"] = map[string]string{"selector": lm.ShardSelector}
		}
		meta, err := json.Marshal(m) // sorted keys, as the apiserver's map
		if err != nil {
			return ListParts{}, fmt.Errorf("encode list metadata: %w", err)
		}
		tail = append(tail, `,"kind":`...)
		tail = appendJSONString(tail, env.Kind)
		tail = append(tail, `,"metadata":`...)
		tail = append(tail, meta...)
	}
	tail = append(tail, "}\n"...)
	return ListParts{Head: head, Tail: tail}, nil
}

func splitProtoList(env ListEnvelope, items [][]byte) ListParts {
	lm := appendProtoListMeta(nil, env.ListMeta)
	rawLen := 1 + protowire.SizeVarint(uint64(len(lm))) + len(lm)
	for _, it := range items {
		rawLen += 1 + protowire.SizeVarint(uint64(len(it))) + len(it)
	}
	head := appendUnknownHeader(make([]byte, 0, 64+len(lm)), env.APIVersion, env.Kind, rawLen)
	head = protowire.AppendTag(head, 1, protowire.BytesType)
	head = protowire.AppendBytes(head, lm)
	return ListParts{Head: head, Tail: bytes.Clone(unknownTrailer)}
}

// metaV1 is lm as the apiserver's metav1.ListMeta, which encoding/json
// writes as the apiserver does.
func (lm ListMeta) metaV1() metav1.ListMeta {
	m := metav1.ListMeta{ResourceVersion: lm.ResourceVersion, Continue: lm.Continue, RemainingItemCount: lm.RemainingItemCount}
	if lm.ShardSelector != "" {
		m.ShardInfo = &metav1.ShardInfo{Selector: lm.ShardSelector}
	}
	return m
}
