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
	// Columns is a Table's columnDefinitions as sent; format Table only.
	Columns []byte
	// NullRows: a Table's rows were null, not [] (the apiserver's generic
	// table convertor writes an empty Table so); format Table only.
	NullRows bool
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
//
// A sharded list (metadata.shardInfo, KEP-5866) is ErrUnsupported: it holds
// a part of the collection, which no store may take for the whole.
func DecodeList(f Format, body io.Reader, item func(raw []byte) error) (ListEnvelope, error) {
	return decodeList(f, body, item, false)
}

// DecodeShardedList is DecodeList for a list that may be sharded: its
// metadata.shardInfo.selector is ListMeta.ShardSelector.
func DecodeShardedList(f Format, body io.Reader, item func(raw []byte) error) (ListEnvelope, error) {
	return decodeList(f, body, item, true)
}

// decodeList is DecodeList; sharded accepts metadata.shardInfo.
func decodeList(f Format, body io.Reader, item func(raw []byte) error, sharded bool) (ListEnvelope, error) {
	switch f {
	case JSON, MetaJSON, Table:
		return decodeJSONList(f, body, item, nil, sharded)
	case Protobuf, MetaProtobuf:
		b, err := io.ReadAll(body)
		if err != nil {
			return ListEnvelope{}, fmt.Errorf("read list: %w", err)
		}
		return decodeProtoList(b, item, sharded)
	}
	return ListEnvelope{}, unsupported("format %v", f)
}

// jsonListMeta is the JSON form of metav1.ListMeta as far as listproxy reads it.
type jsonListMeta struct {
	ResourceVersion    string `json:"resourceVersion"`
	Continue           string `json:"continue"`
	RemainingItemCount *int64 `json:"remainingItemCount"`
	ShardInfo          *struct {
		Selector string `json:"selector"`
	} `json:"shardInfo"`
}

// DecodeTable reads a Table LIST response body (format Table) as
// DecodeList does, calling row with each row's bytes; columns, when not
// nil, is called with the columnDefinitions before the first row (the
// apiserver writes them first) and may stop the decoding with an error.
func DecodeTable(body io.Reader, columns func(raw []byte) error, row func(raw []byte) error) (ListEnvelope, error) {
	return decodeJSONList(Table, body, row, columns, false)
}

func decodeJSONList(f Format, body io.Reader, item func([]byte) error, onColumns func([]byte) error, sharded bool) (ListEnvelope, error) {
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
		key, err := s.readKey()
		if err != nil {
			return env, err
		}
		switch {
		case key == "items" && f != Table, key == "rows" && f == Table:
			sawItems = true
			itemsFirst = !sawMeta
			null, err := decodeJSONItems(s, item)
			if err != nil {
				return env, err
			}
			env.NullRows = null && f == Table
		case key == "columnDefinitions" && f == Table:
			v, err := s.readValue()
			if err != nil {
				return env, err
			}
			env.Columns = bytes.Clone(v)
			if onColumns != nil {
				if err := onColumns(env.Columns); err != nil {
					return env, err
				}
			}
		case key == "metadata":
			sawMeta = true
			v, err := s.readValue()
			if err != nil {
				return env, err
			}
			m, err := decodeJSONListMeta(v, sharded)
			if err != nil {
				return env, err
			}
			env.ListMeta = m
		case key == "kind", key == "apiVersion":
			str, err := readJSONListString(s, key)
			if err != nil {
				return env, err
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
		if last, err := s.memberEnd("list"); err != nil {
			return env, err
		} else if last {
			break
		}
	}
	if err := checkJSONListEnd(s, sawItems, env.Kind); err != nil {
		return env, err
	}
	// The typed encoder writes metadata before items; the unstructured one
	// sorts keys, so items come before metadata.
	env.Unstructured = f == JSON && itemsFirst
	return env, nil
}

// readJSONListString reads the string value of a list's member key.
func readJSONListString(s *jsonStream, key string) (string, error) {
	v, err := s.readValue()
	if err != nil {
		return "", err
	}
	str, err := decodeString(v)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", key, err)
	}
	return str, nil
}

// checkJSONListEnd checks that nothing follows a list (of kind) read to
// its closing '}', and that it had items (sawItems).
func checkJSONListEnd(s *jsonStream, sawItems bool, kind string) error {
	if eof, err := s.atEOF(); err != nil {
		return err
	} else if !eof {
		return malformed("trailing data after list")
	}
	if !sawItems {
		return malformed("list has no items (kind %q)", kind)
	}
	return nil
}

// decodeJSONListMeta decodes a list's metadata v; a sharded list's
// (metadata.shardInfo) is unsupported unless sharded.
func decodeJSONListMeta(v []byte, sharded bool) (ListMeta, error) {
	var lm jsonListMeta
	if err := json.Unmarshal(v, &lm); err != nil {
		return ListMeta{}, malformed("list metadata: %v", err)
	}
	if lm.ShardInfo != nil && !sharded {
		return ListMeta{}, unsupported("sharded list (metadata.shardInfo)")
	}
	m := ListMeta{ResourceVersion: lm.ResourceVersion, Continue: lm.Continue, RemainingItemCount: lm.RemainingItemCount}
	if lm.ShardInfo != nil {
		m.ShardSelector = lm.ShardInfo.Selector
	}
	return m, nil
}

// decodeJSONItems reads a list's items, or a Table's rows, and reports
// whether they were null.
func decodeJSONItems(s *jsonStream, item func([]byte) error) (null bool, err error) {
	c, err := s.peek()
	if err != nil {
		return false, unexpectedEOF(err)
	}
	if c == 'n' {
		v, err := s.readValue()
		if err != nil {
			return false, err
		}
		if string(v) != "null" {
			return false, malformed("items: unexpected %q", v)
		}
		return true, nil
	}
	if err := s.expect('['); err != nil {
		return false, err
	}
	if c, err := s.peek(); err != nil {
		return false, unexpectedEOF(err)
	} else if c == ']' {
		s.pos++
		return false, nil
	}
	for i := 0; ; i++ {
		v, err := s.readValue()
		if err != nil {
			return false, fmt.Errorf("item %d: %w", i, err)
		}
		if v[0] != '{' {
			return false, malformed("item %d is not an object", i)
		}
		if err := item(v); err != nil {
			return false, fmt.Errorf("item %d: %w", i, err)
		}
		c, err := s.peek()
		if err != nil {
			return false, unexpectedEOF(err)
		}
		s.pos++
		if c == ']' {
			return false, nil
		}
		if c != ',' {
			return false, malformed("expected ',' or ']' after item %d, found %q", i, c)
		}
	}
}

func decodeProtoList(b []byte, item func([]byte) error, sharded bool) (ListEnvelope, error) {
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
			lm, err := parseProtoListMeta(v, sharded)
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

// parseProtoListMeta reads ListMeta: resourceVersion = 2, continue = 3,
// remainingItemCount = 4, shardInfo = 5 ({selector = 1}), which only a
// sharded list may carry.
func parseProtoListMeta(b []byte, sharded bool) (ListMeta, error) {
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
		case num == 5 && !sharded:
			return unsupported("sharded list (metadata.shardInfo)")
		case num == 5 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == 1 && typ == protowire.BytesType {
					lm.ShardSelector = string(v)
				}
				return nil
			})
		}
		return nil
	})
	return lm, err
}
