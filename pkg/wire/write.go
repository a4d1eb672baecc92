package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
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
// Runs of items packed by PackItems are handed to w in place, not copied:
// two items in one array, the next exactly an item prefix's length after the
// previous, must have that item prefix between them (see laidOutRun).
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
	parts, err := SplitList(f, env, items)
	if err != nil {
		return err
	}
	return WriteListParts(w, f, parts, items)
}

// WriteListParts writes what WriteList writes, given the parts SplitList
// returned for the same format, envelope and items (a caller that has them
// for a Content-Length spares encoding the envelope twice).
func WriteListParts(w io.Writer, f Format, parts ListParts, items [][]byte) error {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writerPool.Put(bw)
	}()
	// bufio.Writer errors are sticky: Flush reports the first.
	_, _ = bw.Write(parts.Head)
	var prefix [1 + binary.MaxVarintLen64]byte
	for i := 0; i < len(items); {
		_, _ = bw.Write(AppendItemPrefix(prefix[:0], f, i == 0, items[i]))
		run, n := laidOutRun(f, items[i:])
		if len(run) >= directWriteMin {
			// Spare the copy into the buffer: flush it, then hand the
			// run to w as it is.
			if err := bw.Flush(); err != nil {
				return err
			}
			if _, err := w.Write(run); err != nil {
				return err
			}
		} else {
			_, _ = bw.Write(run)
		}
		i += n
	}
	_, _ = bw.Write(parts.Tail)
	return bw.Flush()
}

// directWriteMin is the smallest run of items WriteList writes without
// copying it into its buffer.
const directWriteMin = 64 << 10

// PackItems copies items, in order, into one new array laid out as WriteList
// writes them, each item but the first preceded by its item prefix, and
// returns the copies. WriteList writes a run of consecutive packed items
// with one write instead of copying each into its buffer.
//
// Each returned item has the capacity of the rest of the array: it is read
// only, never appended to. The array lives as long as any item in it does.
func PackItems(f Format, items [][]byte) [][]byte {
	var prefix [1 + binary.MaxVarintLen64]byte
	size := 0
	for i, it := range items {
		size += len(AppendItemPrefix(prefix[:0], f, i == 0, it)) + len(it)
	}
	packed := make([]byte, 0, size)
	out := make([][]byte, len(items))
	for i, it := range items {
		packed = AppendItemPrefix(packed, f, i == 0, it)
		start := len(packed)
		packed = append(packed, it...)
		out[i] = packed[start:]
	}
	return out
}

// laidOutRun returns, as one slice, the longest run of items[0], items[1], …
// that memory already holds as WriteList writes them: each next item in the
// same array as the previous one, exactly its item prefix's length after it.
// n is how many items the run covers, at least 1.
//
// The bytes between two such items are taken to be the item prefix, without
// reading them (reading one byte per item costs a cache miss each, and
// profiles put that at 4% of a walk's CPU). Every producer of list items
// leaves exactly that there: PackItems writes it, and DecodeList's items lie
// in the response as the list's own encoding put them, one ',' or one items
// field tag and length apart. TestWriteListPackedItems checks the first.
func laidOutRun(f Format, items [][]byte) (run []byte, n int) {
	run = items[0]
	var prefix [1 + binary.MaxVarintLen64]byte
	for n = 1; n < len(items); n++ {
		next := items[n]
		end := len(run) + len(AppendItemPrefix(prefix[:0], f, false, next)) + len(next)
		if len(next) == 0 || cap(run) < end {
			break
		}
		grown := run[:end]
		if &grown[end-len(next)] != &next[0] {
			break
		}
		run = grown
	}
	return run, n
}

// appendJSONString appends s as encoding/json does (HTML-escaped).
func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // strings always marshal
	return append(dst, b...)
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
	if lm.ShardSelector != "" {
		// ShardInfo{selector = 1}.
		info := protowire.AppendTag(nil, 1, protowire.BytesType)
		info = protowire.AppendString(info, lm.ShardSelector)
		dst = protowire.AppendTag(dst, 5, protowire.BytesType)
		dst = protowire.AppendBytes(dst, info)
	}
	return dst
}
