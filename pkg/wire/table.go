package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Table responses (format Table). The apiserver encodes a Table LIST with
// encoding/json, fields in struct order (k8s.io/apimachinery
// pkg/apis/meta/v1 Table):
//
//	{"kind":"Table","apiVersion":"meta.k8s.io/V","metadata":{ListMeta},
//	 "columnDefinitions":[...],"rows":[row,...]}\n
//
// and a Table WATCH event as {"type":T,"object":Table} with one row, whose
// metadata carries the object's resourceVersion (the bookmarked one for a
// BOOKMARK) and whose columnDefinitions are set on a watcher's first event
// only (null after). A store of format Table holds the rows.

// TableEnvelope is what a Table LIST response carries besides its rows.
type TableEnvelope struct {
	// GroupVersion is "v1" or "v1beta1" of meta.k8s.io.
	GroupVersion string
	ListMeta     ListMeta
	// Columns is the columnDefinitions array as the apiserver sent it.
	Columns []byte
	// NullRows writes an empty Table's rows as null (the apiserver's
	// generic convertor) instead of [] (its printers).
	NullRows bool
}

// SplitTable returns the parts of a Table LIST response with n rows: Head,
// then the rows separated by ",", then Tail.
func SplitTable(env TableEnvelope, n int) (ListParts, error) {
	head := append([]byte(nil), `{"kind":"Table","apiVersion":`...)
	head = appendJSONString(head, "meta.k8s.io/"+env.GroupVersion)
	lm := env.ListMeta
	meta, err := json.Marshal(lm.metaV1())
	if err != nil {
		return ListParts{}, fmt.Errorf("encode list metadata: %w", err)
	}
	head = append(head, `,"metadata":`...)
	head = append(head, meta...)
	head = append(head, `,"columnDefinitions":`...)
	columns := env.Columns
	if len(columns) == 0 {
		columns = []byte("null")
	}
	head = append(head, columns...)
	head = append(head, `,"rows":`...)
	if n == 0 && env.NullRows {
		head = append(head, "null"...)
		return ListParts{Head: head, Tail: []byte("}\n")}, nil
	}
	head = append(head, '[')
	return ListParts{Head: head, Tail: []byte("]}\n")}, nil
}

// tableEvent turns a Table watch event (ev.Object the Table) into the
// event of its one row: Object is the row, ResourceVersion the Table's.
func tableEvent(ev Event) (Event, error) {
	var row []byte
	rows := 0
	err := eachMember(ev.Object, func(key, value []byte) (bool, error) {
		switch {
		case keyIs(key, "metadata"):
			return true, eachMember(value, func(key, value []byte) (bool, error) {
				if !keyIs(key, "resourceVersion") {
					return true, nil
				}
				rv, err := decodeString(value)
				ev.ResourceVersion = rv
				return false, err
			})
		case keyIs(key, "columnDefinitions"):
			if !bytes.Equal(value, []byte("null")) {
				ev.Columns = value
			}
		case keyIs(key, "rows"):
			if value[0] != '[' {
				return false, malformed("table watch event rows: %.20q", value)
			}
			return true, eachElement(value, func(v []byte) error {
				rows++
				row = v
				return nil
			})
		}
		return true, nil
	})
	if err != nil {
		return Event{}, fmt.Errorf("table watch event: %w", err)
	}
	if rows != 1 || row[0] != '{' {
		return Event{}, malformed("table watch event with %d rows", rows)
	}
	if ev.ResourceVersion == "" {
		return Event{}, malformed("table watch event without resourceVersion")
	}
	// ev.Object is the decoder's copy: the row and columns may share it.
	ev.Object = row
	return ev, nil
}

// AppendTableWatchEvent appends a Table watch event: the Table of one row
// in meta.k8s.io/groupVersion with metadata.resourceVersion rv, and the
// columns, or null when columns is nil (every event but a watcher's
// first), then "\n".
func AppendTableWatchEvent(dst []byte, t EventType, groupVersion, rv string, columns, row []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, string(t))
	dst = append(dst, `,"object":{"kind":"Table","apiVersion":`...)
	dst = appendJSONString(dst, "meta.k8s.io/"+groupVersion)
	dst = append(dst, `,"metadata":{"resourceVersion":`...)
	dst = appendJSONString(dst, rv)
	dst = append(dst, `},"columnDefinitions":`...)
	if columns == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, columns...)
	}
	dst = append(dst, `,"rows":[`...)
	dst = append(dst, row...)
	return append(dst, "]}}\n"...)
}

// SetTableRowResourceVersion returns a copy of a Table row whose object
// (PartialObjectMetadata) has metadata.resourceVersion rv; a row whose
// object is null is returned as it is. The watch cache sends an object
// that stops matching a watch's selectors as DELETED at the event's
// resourceVersion.
func SetTableRowResourceVersion(row []byte, rv string) ([]byte, error) {
	object, err := memberValue(row, "object")
	if err != nil {
		return nil, err
	}
	if object == nil || object[0] != '{' {
		return row, nil
	}
	updated, err := setJSONResourceVersion(object, rv)
	if err != nil {
		return nil, err
	}
	start := offsetIn(row, object)
	out := make([]byte, 0, len(row)+len(updated)-len(object))
	out = append(out, row[:start]...)
	out = append(out, updated...)
	return append(out, row[start+len(object):]...), nil
}

// TableBookmark is the row of a Table watch's BOOKMARK, learned from one
// the apiserver sent: its rendering of an empty object of the resource,
// whose cells do not depend on the bookmark's resourceVersion.
type TableBookmark struct {
	// Head is the row up to its object's value: {"cells":[...],"object":
	Head []byte
	// Meta is what the object's metadata carries after its
	// resourceVersion, the initial-events-end annotation left out
	// (e.g. `,"creationTimestamp":null`, or nothing).
	Meta []byte
}

// bookmarkObjectPrefix is how a bookmark row's PartialObjectMetadata
// starts, up to its group version.
const bookmarkObjectPrefix = `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/`

// initialEventsEndMember is the annotations member of the bookmark ending
// a watch-list's initial events.
const initialEventsEndMember = `,"annotations":{"` + initialEventsEndAnnotation + `":"true"}`

// ParseTableBookmark reads the row of a Table BOOKMARK at resourceVersion
// rv, as the apiserver sent it: the object's metadata must start with the
// resourceVersion, and nothing may follow the object in the row. The
// object may be a PartialObjectMetadata or a whole object (a feed with
// includeObject=Object); only its metadata is kept.
func ParseTableBookmark(row []byte, rv string) (TableBookmark, error) {
	object, err := memberValue(row, "object")
	if err != nil {
		return TableBookmark{}, fmt.Errorf("table bookmark row: %w", err)
	}
	if object == nil || object[0] != '{' {
		return TableBookmark{}, malformed("table bookmark row without an object")
	}
	end := offsetIn(row, object) + len(object)
	if string(row[end:]) != "}" {
		return TableBookmark{}, malformed("table bookmark row: members after the object")
	}
	meta, err := memberValue(object, "metadata")
	if err != nil {
		return TableBookmark{}, fmt.Errorf("table bookmark object: %w", err)
	}
	lead := []byte(`{"resourceVersion":`)
	lead = appendJSONString(lead, rv)
	if !bytes.HasPrefix(meta, lead) {
		return TableBookmark{}, malformed("table bookmark metadata does not start with resourceVersion %q: %.80s", rv, meta)
	}
	rest := meta[len(lead) : len(meta)-1]
	rest = bytes.TrimSuffix(rest, []byte(initialEventsEndMember))
	if bytes.Contains(rest, []byte(`"annotations"`)) {
		return TableBookmark{}, malformed("table bookmark metadata with other annotations: %.80s", meta)
	}
	return TableBookmark{
		Head: bytes.Clone(row[:offsetIn(row, object)]),
		Meta: bytes.Clone(rest),
	}, nil
}

// AppendTableBookmarkRow appends b's row at resourceVersion rv: its object
// a PartialObjectMetadata in meta.k8s.io/groupVersion carrying rv (and,
// when initialEventsEnd, the k8s.io/initial-events-end annotation), or
// null when object is false.
func AppendTableBookmarkRow(dst []byte, b TableBookmark, groupVersion, rv string, object, initialEventsEnd bool) []byte {
	dst = append(dst, b.Head...)
	if !object {
		dst = append(dst, "null"...)
		return append(dst, '}')
	}
	dst = append(dst, bookmarkObjectPrefix...)
	dst = append(dst, groupVersion...)
	dst = append(dst, `","metadata":{"resourceVersion":`...)
	dst = appendJSONString(dst, rv)
	dst = append(dst, b.Meta...)
	if initialEventsEnd {
		dst = append(dst, initialEventsEndMember...)
	}
	return append(dst, "}}}"...)
}
