// Package wire is listproxy's byte-level knowledge of the kube-apiserver's
// LIST and WATCH wire formats.
//
// listproxy keeps every object as the exact bytes the apiserver's own LIST
// response carries for that item, one copy per representation a client asks
// for, and assembles LIST responses by streaming those bytes (docs/design.md "Goals", rule 4,
// "Bytes in, bytes out"). This package therefore never decodes and
// re-encodes an object to produce output: DecodeList and WatchDecoder hand out
// item bytes, WriteList splices them into an envelope that is byte-identical to
// the apiserver's, and ExtractMeta and ExtractFields read values without
// changing the bytes.
//
// Every format fact encoded here was observed on a kube-apiserver v1.36.3 and
// is pinned by golden files under testdata/. See
// https://kubernetes.io/docs/reference/using-api/api-concepts/ for the
// semantics and
// k8s.io/apimachinery/pkg/runtime/serializer/{json,protobuf}/collections.go
// for the apiserver's streaming list encoders this package mirrors.
//
// This package imports no other listproxy package.
//
// It imports nothing of listproxy's.
package wire

import (
	"errors"
	"fmt"
)

// Format is one representation of a resource that the apiserver serves and
// listproxy caches separately.
type Format int

const (
	// JSON is application/json: typed objects for built-in resources,
	// unstructured objects for custom resources.
	JSON Format = iota
	// Protobuf is application/vnd.kubernetes.protobuf. Built-in types only;
	// the apiserver answers 406 for custom resources.
	Protobuf
	// MetaJSON is PartialObjectMetadata(List) in JSON, as client-go's metadata
	// informers request it.
	MetaJSON
	// MetaProtobuf is PartialObjectMetadata(List) in protobuf. Works for
	// custom resources too.
	MetaProtobuf
	// Table is meta.k8s.io Table in JSON, as kubectl get asks for it: a
	// store's items are the Table's rows (table.go).
	Table
)

// Media types and the Accept parameters selecting PartialObjectMetadata.
const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"

	asMetaList  = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	asMetaWatch = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	asTable     = ";as=Table;g=meta.k8s.io;v=v1"
)

// Formats lists the formats of whole objects and their metadata, for
// tables and validation; Table, a representation of rows, is not among
// them.
var Formats = []Format{JSON, Protobuf, MetaJSON, MetaProtobuf}

// String returns a short name for logs and metric labels.
func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case Protobuf:
		return "protobuf"
	case MetaJSON:
		return "meta-json"
	case MetaProtobuf:
		return "meta-protobuf"
	case Table:
		return "table"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Valid reports whether f is one of the defined formats.
func (f Format) Valid() bool { return f >= JSON && f <= Table }

// IsProtobuf reports whether f is a protobuf representation.
func (f Format) IsProtobuf() bool { return f == Protobuf || f == MetaProtobuf }

// IsMeta reports whether f is a PartialObjectMetadata representation.
func (f Format) IsMeta() bool { return f == MetaJSON || f == MetaProtobuf }

// ListAccept is the Accept header listproxy sends to LIST in format f. It names
// exactly one media type, so that an apiserver unable to serve f answers 406
// instead of silently choosing another representation.
func (f Format) ListAccept() string {
	switch f {
	case JSON:
		return mediaJSON
	case Protobuf:
		return mediaProtobuf
	case MetaJSON:
		return mediaJSON + asMetaList
	case MetaProtobuf:
		return mediaProtobuf + asMetaList
	case Table:
		return mediaJSON + asTable
	}
	return ""
}

// WatchAccept is the Accept header listproxy sends to WATCH in format f.
// Metadata watches ask for as=PartialObjectMetadata (singular), as client-go's
// metadata client does.
func (f Format) WatchAccept() string {
	switch f {
	case JSON:
		return mediaJSON
	case Protobuf:
		return mediaProtobuf
	case MetaJSON:
		return mediaJSON + asMetaWatch
	case MetaProtobuf:
		return mediaProtobuf + asMetaWatch
	case Table:
		return mediaJSON + asTable
	}
	return ""
}

// ContentType is the Content-Type the apiserver puts on a LIST response in
// format f. Observed on v1.36.3: the as=/g=/v= parameters are not echoed, so
// the metadata formats share the plain media type.
func (f Format) ContentType() string {
	if f.IsProtobuf() {
		return mediaProtobuf
	}
	return mediaJSON
}

// WatchContentType is the Content-Type the apiserver puts on a WATCH response
// in format f. Observed on v1.36.3: protobuf watches carry ";stream=watch",
// JSON watches do not.
func (f Format) WatchContentType() string {
	if f.IsProtobuf() {
		return mediaProtobuf + ";stream=watch"
	}
	return mediaJSON
}

// ListMeta is the list metadata of a LIST response
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks).
type ListMeta struct {
	ResourceVersion string
	// Continue is empty on the last page.
	Continue string
	// RemainingItemCount is nil when the apiserver did not send it.
	RemainingItemCount *int64
	// ShardSelector is metadata.shardInfo.selector: the shard selector a
	// sharded list's items were selected by (KEP-5866), as the apiserver
	// echoes it; "" for a list without shardInfo.
	ShardSelector string
}

// Errors returned by this package; match them with errors.Is.
var (
	// ErrMalformed: the input is not in the expected wire format.
	ErrMalformed = errors.New("malformed input")
	// ErrUnsupported: the input is well formed but uses a feature this package
	// does not understand (e.g. sharded lists, gzip content encoding), or the
	// format cannot represent the request (protobuf custom resources).
	ErrUnsupported = errors.New("unsupported")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}
