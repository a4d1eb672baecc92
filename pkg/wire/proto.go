package wire

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
)

// The apiserver's protobuf envelope: the magic prefix "k8s\x00" followed by a
// runtime.Unknown message { TypeMeta typeMeta = 1 {apiVersion = 1, kind = 2};
// bytes raw = 2; string contentEncoding = 3; string contentType = 4 }.
// k8s.io/apimachinery/pkg/runtime/serializer/protobuf.
var protoPrefix = []byte("k8s\x00")

type unknown struct {
	apiVersion, kind string
	raw              []byte
}

// parseUnknown parses a "k8s\x00"-prefixed runtime.Unknown. raw aliases b.
func parseUnknown(b []byte) (unknown, error) {
	var u unknown
	if !bytes.HasPrefix(b, protoPrefix) {
		return u, malformed("missing protobuf prefix k8s\\x00")
	}
	sawRaw := false
	err := eachField(b[len(protoPrefix):], func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ != protowire.BytesType {
					return nil
				}
				switch num {
				case 1:
					u.apiVersion = string(v)
				case 2:
					u.kind = string(v)
				}
				return nil
			})
		case 2:
			sawRaw = true
			u.raw = v
		case 3:
			if len(v) > 0 {
				return unsupported("protobuf content encoding %q", v)
			}
		}
		return nil
	})
	if err != nil {
		return u, err
	}
	if !sawRaw {
		return u, malformed("protobuf envelope without raw (kind %q)", u.kind)
	}
	return u, nil
}

// eachField calls fn for each field of the protobuf message b. For
// length-delimited fields v is the content; for other wire types v is the
// encoded value (decode varints with protowire.ConsumeVarint). v aliases b.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("protobuf tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n >= 0 {
				v = b[:n]
			}
		}
		if n < 0 {
			return malformed("protobuf field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// appendUnknownHeader appends the "k8s\x00" prefix, the Unknown's typeMeta and
// the tag and length of its raw field (rawLen bytes follow).
func appendUnknownHeader(dst []byte, apiVersion, kind string, rawLen int) []byte {
	dst = append(dst, protoPrefix...)
	tmLen := 1 + protowire.SizeVarint(uint64(len(apiVersion))) + len(apiVersion) +
		1 + protowire.SizeVarint(uint64(len(kind))) + len(kind)
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(tmLen))
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendString(dst, apiVersion)
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	dst = protowire.AppendString(dst, kind)
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(rawLen))
}

// unknownTrailer is the Unknown's empty contentEncoding (3) and contentType
// (4), which gogo-generated code always writes.
var unknownTrailer = []byte{0x1a, 0x00, 0x22, 0x00}
