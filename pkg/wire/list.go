package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// ListEnvelope is everything in a LIST response except the items.
type ListEnvelope struct {
	// APIVersion and Kind of the list, e.g. "v1" and "PodList";
	// "demo.listproxy.io/v1" and "WidgetList"; "meta.k8s.io/v1" and
	// "PartialObjectMetadataList".
	APIVersion, Kind string
	// Unstructured marks a custom resource list in JSON, which the apiserver
	// encodes as an UnstructuredList: keys sorted (apiVersion, items, kind,
	// metadata), and metadata.continue present even when empty. Only valid
	// with format JSON.
	Unstructured bool
	ListMeta     ListMeta
}

// DecodeList reads a LIST response body in format f, calls item with the
// exact bytes of each item in order, and returns the envelope.
//
// The bytes passed to item are owned by DecodeList and valid only until item
// returns; copy them to retain them. If item returns an error, DecodeList
// stops and returns it (wrapped; match with errors.Is).
//
// JSON is streamed: memory is bounded by the largest item, not the body.
// Protobuf bodies are read whole, since the list is a single length-prefixed
// message. DecodeList reads body to its end and reports trailing garbage;
// it does not close body. A body without "items" (a Status, for example) is
// ErrMalformed; check the HTTP status first. For JSON, Unstructured is
// inferred from key order: an UnstructuredList has "items" before
// "metadata", a typed list the reverse.
func DecodeList(f Format, body io.Reader, item func(raw []byte) error) (ListEnvelope, error) {
	switch f {
	case JSON, MetaJSON:
		return decodeJSONList(f, body, item)
	case Protobuf, MetaProtobuf:
		b, err := io.ReadAll(body)
		if err != nil {
			return ListEnvelope{}, fmt.Errorf("read list: %w", err)
		}
		return decodeProtoList(b, item)
	}
	return ListEnvelope{}, unsupported("format %v", f)
}

// jsonListMeta is the JSON form of metav1.ListMeta as far as listproxy reads it.
type jsonListMeta struct {
	ResourceVersion    string          `json:"resourceVersion"`
	Continue           string          `json:"continue"`
	RemainingItemCount *int64          `json:"remainingItemCount"`
	ShardInfo          json.RawMessage `json:"shardInfo"`
}

func decodeJSONList(f Format, body io.Reader, item func([]byte) error) (ListEnvelope, error) {
	var env ListEnvelope
	s := newJSONStream(body)
	if err := s.expect('{'); err != nil {
		return env, err
	}
	sawItems, sawMeta, itemsFirst := false, false, false
	for n := 0; ; n++ {
		c, err := s.peek()
		if err != nil {
			return env, unexpectedEOF(err)
		}
		if c == '}' && n == 0 {
			s.pos++
			break
		}
		rawKey, err := s.readValue()
		if err != nil {
			return env, err
		}
		key, err := decodeString(rawKey)
		if err != nil {
			return env, err
		}
		if err := s.expect(':'); err != nil {
			return env, err
		}
		switch key {
		case "items":
			sawItems = true
			itemsFirst = !sawMeta
			if err := decodeJSONItems(s, item); err != nil {
				return env, err
			}
		case "metadata":
			sawMeta = true
			v, err := s.readValue()
			if err != nil {
				return env, err
			}
			var lm jsonListMeta
			if err := json.Unmarshal(v, &lm); err != nil {
				return env, malformed("list metadata: %v", err)
			}
			if len(lm.ShardInfo) > 0 && !bytes.Equal(lm.ShardInfo, []byte("null")) {
				return env, unsupported("sharded list (metadata.shardInfo)")
			}
			env.ListMeta = ListMeta{ResourceVersion: lm.ResourceVersion, Continue: lm.Continue, RemainingItemCount: lm.RemainingItemCount}
		case "kind", "apiVersion":
			v, err := s.readValue()
			if err != nil {
				return env, err
			}
			str, err := decodeString(v)
			if err != nil {
				return env, fmt.Errorf("list %s: %w", key, err)
			}
			if key == "kind" {
				env.Kind = str
			} else {
				env.APIVersion = str
			}
		default:
			if _, err := s.readValue(); err != nil {
				return env, err
			}
		}
		c, err = s.peek()
		if err != nil {
			return env, unexpectedEOF(err)
		}
		s.pos++
		if c == '}' {
			break
		}
		if c != ',' {
			return env, malformed("expected ',' or '}' in list, found %q", c)
		}
	}
	if eof, err := s.atEOF(); err != nil {
		return env, err
	} else if !eof {
		return env, malformed("trailing data after list")
	}
	if !sawItems {
		return env, malformed("list has no items (kind %q)", env.Kind)
	}
	// The typed encoder writes metadata before items; the unstructured one
	// sorts keys, so items come before metadata.
	env.Unstructured = f == JSON && itemsFirst
	return env, nil
}

func decodeJSONItems(s *jsonStream, item func([]byte) error) error {
	c, err := s.peek()
	if err != nil {
		return unexpectedEOF(err)
	}
	if c == 'n' {
		v, err := s.readValue()
		if err != nil {
			return err
		}
		if string(v) != "null" {
			return malformed("items: unexpected %q", v)
		}
		return nil
	}
	if err := s.expect('['); err != nil {
		return err
	}
	if c, err := s.peek(); err != nil {
		return unexpectedEOF(err)
	} else if c == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		v, err := s.readValue()
		if err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if v[0] != '{' {
			return malformed("item %d is not an object", i)
		}
		if err := item(v); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		c, err := s.peek()
		if err != nil {
			return unexpectedEOF(err)
		}
		s.pos++
		if c == ']' {
			return nil
		}
		if c != ',' {
			return malformed("expected ',' or ']' after item %d, found %q", i, c)
		}
	}
}

func decodeProtoList(b []byte, item func([]byte) error) (ListEnvelope, error) {
	var env ListEnvelope
	u, err := parseUnknown(b)
	if err != nil {
		return env, err
	}
	env.APIVersion, env.Kind = u.apiVersion, u.kind
	sawMeta := false
	err = eachField(u.raw, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			sawMeta = true
			lm, err := parseProtoListMeta(v)
			if err != nil {
				return err
			}
			env.ListMeta = lm
		case 2:
			return item(v)
		}
		return nil
	})
	if err != nil {
		return env, err
	}
	if !sawMeta {
		return env, malformed("protobuf list has no metadata (kind %q)", env.Kind)
	}
	return env, nil
}

func parseProtoListMeta(b []byte) (ListMeta, error) {
	var lm ListMeta
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 2 && typ == protowire.BytesType:
			lm.ResourceVersion = string(v)
		case num == 3 && typ == protowire.BytesType:
			lm.Continue = string(v)
		case num == 4 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			n := int64(x)
			lm.RemainingItemCount = &n
		case num == 5:
			return unsupported("sharded list (metadata.shardInfo)")
		}
		return nil
	})
	return lm, err
}
