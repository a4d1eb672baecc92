package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// metaListAPIVersion and metaListKind name the list type of the metadata
// formats.
const (
	metaListAPIVersion = "meta.k8s.io/v1"
	metaListKind       = "PartialObjectMetadataList"
)

// EnvelopeFor returns the envelope of a list in format f. listGVK is the list
// type of the resource (e.g. v1 PodList, demo.listproxy.io/v1 WidgetList);
// custom marks a custom resource. The metadata formats always use
// meta.k8s.io/v1 PartialObjectMetadataList.
func EnvelopeFor(f Format, listGVK schema.GroupVersionKind, custom bool, lm ListMeta) ListEnvelope {
	if f.IsMeta() {
		return ListEnvelope{APIVersion: metaListAPIVersion, Kind: metaListKind, ListMeta: lm}
	}
	apiVersion, kind := listGVK.ToAPIVersionAndKind()
	return ListEnvelope{APIVersion: apiVersion, Kind: kind, Unstructured: custom && f == JSON, ListMeta: lm}
}

// writeBufSize batches items into large writes: a full LIST is mostly
// copying bytes to the socket, and profiles of make bench showed a third of
// listproxy's CPU in write syscalls with 32 KiB batches. Items larger than
// the buffer bypass it. Buffers are pooled.
const writeBufSize = 256 << 10

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}

// WriteList writes a LIST response in format f that is byte-identical to the
// kube-apiserver's (v1.36 streaming list encoders) for the same envelope and
// items. items must be list items in format f exactly as DecodeList or
// WatchDecoder returned them; they are written unchanged and not validated.
//
// Observed encodings it reproduces:
//   - JSON typed list: {"kind":K,"apiVersion":V,"metadata":{…},"items":[…]}
//     plus "\n"; metadata is metav1.ListMeta via encoding/json (empty fields
//     omitted). Empty items are [] for typed lists and null for
//     PartialObjectMetadataList (MetaJSON).
//   - JSON unstructured list: keys sorted, {"apiVersion":V,"items":[…],
//     "kind":K,"metadata":{"continue":C,["remainingItemCount":N,]
//     "resourceVersion":R}} plus "\n"; continue is always present.
//   - Protobuf: "k8s\x00" + runtime.Unknown{typeMeta, raw = list message
//     {1: ListMeta, 2: item…}, "", ""}.
//
// Errors come from w, except ErrUnsupported for an unstructured envelope in a
// format other than JSON.
func WriteList(w io.Writer, f Format, env ListEnvelope, items [][]byte) error {
	if env.Unstructured && f != JSON {
		return unsupported("unstructured list in format %v", f)
	}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writerPool.Put(bw)
	}()
	var err error
	switch f {
	case JSON, MetaJSON:
		err = writeJSONList(bw, f, env, items)
	case Protobuf, MetaProtobuf:
		err = writeProtoList(bw, env, items)
	default:
		return unsupported("format %v", f)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

func writeJSONList(w *bufio.Writer, f Format, env ListEnvelope, items [][]byte) error {
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
		meta, err := json.Marshal(metav1.ListMeta{ResourceVersion: lm.ResourceVersion, Continue: lm.Continue, RemainingItemCount: lm.RemainingItemCount})
		if err != nil {
			return fmt.Errorf("encode list metadata: %w", err)
		}
		head = append(head, `"metadata":`...)
		head = append(head, meta...)
		head = append(head, `,"items":`...)
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	if len(items) == 0 && f == MetaJSON {
		// PartialObjectMetadataList.Items is nil when empty.
		if _, err := w.WriteString("null"); err != nil {
			return err
		}
	} else {
		if err := w.WriteByte('['); err != nil {
			return err
		}
		for i, it := range items {
			if i > 0 {
				if err := w.WriteByte(','); err != nil {
					return err
				}
			}
			if _, err := w.Write(it); err != nil {
				return err
			}
		}
		if err := w.WriteByte(']'); err != nil {
			return err
		}
	}
	var tail []byte
	if env.Unstructured {
		m := map[string]any{"continue": lm.Continue, "resourceVersion": lm.ResourceVersion}
		if lm.RemainingItemCount != nil {
			m["remainingItemCount"] = *lm.RemainingItemCount
		}
		meta, err := json.Marshal(m) // sorted keys, as the apiserver's map
		if err != nil {
			return fmt.Errorf("encode list metadata: %w", err)
		}
		tail = append(tail, `,"kind":`...)
		tail = appendJSONString(tail, env.Kind)
		tail = append(tail, `,"metadata":`...)
		tail = append(tail, meta...)
	}
	tail = append(tail, "}\n"...)
	_, err := w.Write(tail)
	return err
}

// appendJSONString appends s as encoding/json does (HTML-escaped).
func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // strings always marshal
	return append(dst, b...)
}

func writeProtoList(w *bufio.Writer, env ListEnvelope, items [][]byte) error {
	lm := appendProtoListMeta(nil, env.ListMeta)
	rawLen := 1 + protowire.SizeVarint(uint64(len(lm))) + len(lm)
	for _, it := range items {
		rawLen += 1 + protowire.SizeVarint(uint64(len(it))) + len(it)
	}
	head := appendUnknownHeader(make([]byte, 0, 64+len(lm)), env.APIVersion, env.Kind, rawLen)
	head = protowire.AppendTag(head, 1, protowire.BytesType)
	head = protowire.AppendBytes(head, lm)
	if _, err := w.Write(head); err != nil {
		return err
	}
	var hdr [1 + binary.MaxVarintLen64]byte
	for _, it := range items {
		h := protowire.AppendTag(hdr[:0], 2, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(len(it)))
		if _, err := w.Write(h); err != nil {
			return err
		}
		if _, err := w.Write(it); err != nil {
			return err
		}
	}
	_, err := w.Write(unknownTrailer)
	return err
}

// appendProtoListMeta appends metav1.ListMeta as gogo-generated code encodes
// it: selfLink (1), resourceVersion (2) and continue (3) always, even empty;
// remainingItemCount (4) only when set.
func appendProtoListMeta(dst []byte, lm ListMeta) []byte {
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendString(dst, "")
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	dst = protowire.AppendString(dst, lm.ResourceVersion)
	dst = protowire.AppendTag(dst, 3, protowire.BytesType)
	dst = protowire.AppendString(dst, lm.Continue)
	if lm.RemainingItemCount != nil {
		dst = protowire.AppendTag(dst, 4, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(*lm.RemainingItemCount))
	}
	return dst
}
