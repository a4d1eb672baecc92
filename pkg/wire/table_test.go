package wire

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTableListRoundTrip: a Table LIST decoded into its rows and envelope
// and written again with SplitTable is the apiserver's body, byte for byte.
func TestTableListRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		file     string
		rows     int
		nullRows bool
		meta     ListMeta
	}{
		{file: "table-configmaps-limit2.json", rows: 2},
		{file: "table-roles-empty.json", rows: 0, nullRows: true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var rows [][]byte
			var sawColumns []byte
			env, err := DecodeTable(bytes.NewReader(body), func(cols []byte) error {
				if len(rows) != 0 {
					t.Errorf("columns after %d rows", len(rows))
				}
				sawColumns = bytes.Clone(cols)
				return nil
			}, func(raw []byte) error {
				rows = append(rows, bytes.Clone(raw))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != tc.rows || env.NullRows != tc.nullRows {
				t.Fatalf("DecodeTable: %d rows, NullRows %v; want %d, %v", len(rows), env.NullRows, tc.rows, tc.nullRows)
			}
			if !bytes.Equal(sawColumns, env.Columns) || len(env.Columns) == 0 {
				t.Fatalf("columns callback got %q, envelope %q", sawColumns, env.Columns)
			}
			parts, err := SplitTable(TableEnvelope{GroupVersion: "v1", ListMeta: env.ListMeta, Columns: env.Columns, NullRows: env.NullRows}, len(rows))
			if err != nil {
				t.Fatal(err)
			}
			got := append([]byte(nil), parts.Head...)
			for i, r := range rows {
				if i > 0 {
					got = append(got, ',')
				}
				got = append(got, r...)
			}
			got = append(got, parts.Tail...)
			if diff := cmp.Diff(string(body), string(got)); diff != "" {
				t.Errorf("rewritten Table (-apiserver +listproxy):\n%s", diff)
			}
		})
	}
}

// TestTableEmptyRows: an empty Table's rows are [] unless the apiserver
// writes them null, and a Table with rows never writes null.
func TestTableEmptyRows(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		nullRows bool
		want     string
	}{
		{"empty_printer", 0, false, `"rows":[]}` + "\n"},
		{"empty_generic", 0, true, `"rows":null}` + "\n"},
		{"rows_generic", 1, true, `"rows":[X]}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts, err := SplitTable(TableEnvelope{GroupVersion: "v1beta1", Columns: []byte("[]")}, tc.n)
			if tc.nullRows {
				parts, err = SplitTable(TableEnvelope{GroupVersion: "v1beta1", Columns: []byte("[]"), NullRows: true}, tc.n)
			}
			if err != nil {
				t.Fatal(err)
			}
			body := string(parts.Head)
			if tc.n > 0 {
				body += "X"
			}
			body += string(parts.Tail)
			want := `{"kind":"Table","apiVersion":"meta.k8s.io/v1beta1","metadata":{},"columnDefinitions":[],` + tc.want
			if body != want {
				t.Errorf("got %q, want %q", body, want)
			}
		})
	}
}

// TestTableWatchEvents: each event of a Table watch is its one row, with
// the Table's resourceVersion, and the columns only where the apiserver
// sent them (a watcher's first event).
func TestTableWatchEvents(t *testing.T) {
	body, err := os.ReadFile("testdata/table-configmaps-watch.json")
	if err != nil {
		t.Fatal(err)
	}
	d := NewWatchDecoder(Table, io.NopCloser(bytes.NewReader(body)), WatchOptions{})
	type event struct {
		Type       EventType
		RV         string
		HasColumns bool
		RowPrefix  string
	}
	var got []event
	for {
		ev, err := d.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, event{ev.Type, ev.ResourceVersion, ev.Columns != nil, string(ev.Object[:min(len(ev.Object), 20)])})
	}
	want := []event{
		{Bookmark, "4002", true, `{"cells":["",0,"\u00`},
		{Added, "4003", false, `{"cells":["tw1",1,"0`},
		{Modified, "4004", false, `{"cells":["tw1",1,"0`},
		{Deleted, "4005", false, `{"cells":["tw1",1,"0`},
		{Bookmark, "4005", false, `{"cells":["",0,"\u00`},
		{Bookmark, "4005", false, `{"cells":["",0,"\u00`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestTableWatchEventMalformed: a Table event must carry exactly one row
// and a resourceVersion.
func TestTableWatchEventMalformed(t *testing.T) {
	for _, body := range []string{
		`{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"1"},"rows":[]}}`,
		`{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"1"},"rows":[{"cells":[]},{"cells":[]}]}}`,
		`{"type":"ADDED","object":{"kind":"Table","metadata":{},"rows":[{"cells":[]}]}}`,
		`{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"1"},"rows":null}}`,
	} {
		d := NewWatchDecoder(Table, io.NopCloser(bytes.NewReader([]byte(body))), WatchOptions{})
		if _, err := d.Next(); !errors.Is(err, ErrMalformed) {
			t.Errorf("Next(%s) = %v, want ErrMalformed", body, err)
		}
	}
}

// TestTableBookmark: a Table BOOKMARK's row, learned from one the
// apiserver sent at one resourceVersion, is written again at another as
// the apiserver writes it: periodic bookmarks with a PartialObjectMetadata
// or a null object, the initial-events-end bookmark with its annotation,
// in either meta.k8s.io version. Rows as a v1.37 apiserver sent them.
func TestTableBookmark(t *testing.T) {
	const (
		cells    = `{"cells":["",0,"\u003cunknown\u003e"],"object":`
		periodic = cells + `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"226"}}}`
		end      = cells + `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"220","annotations":{"k8s.io/initial-events-end":"true"}}}}`
	)
	tests := []struct {
		name             string
		row, rv          string
		groupVersion     string
		object, endEvent bool
		want             string
	}{
		{"periodic to end", periodic, "226", "v1", true, true, `{"cells":["",0,"\u003cunknown\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}`},
		{"end to periodic", end, "220", "v1", true, false, `{"cells":["",0,"\u003cunknown\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"}}}`},
		{"v1beta1", end, "220", "v1beta1", true, false, `{"cells":["",0,"\u003cunknown\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":{"resourceVersion":"7"}}}`},
		{"no object", end, "220", "v1", false, false, `{"cells":["",0,"\u003cunknown\u003e"],"object":null}`},
		{"creationTimestamp kept", `{"cells":["x"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3","creationTimestamp":null}}}`, "3", "v1", true, true, `{"cells":["x"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}`},
		{"whole object", `{"cells":["","0/0"],"conditions":[],"object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"3"},"spec":{"containers":null},"status":{}}}`, "3", "v1", true, false, `{"cells":["","0/0"],"conditions":[],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParseTableBookmark([]byte(tc.row), tc.rv)
			if err != nil {
				t.Fatal(err)
			}
			got := AppendTableBookmarkRow(nil, b, tc.groupVersion, "7", tc.object, tc.endEvent)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTableBookmarkMalformed: a row that is not a bookmark's at the given
// resourceVersion is not learned.
func TestTableBookmarkMalformed(t *testing.T) {
	tests := []struct{ name, row, rv string }{
		{"null object", `{"cells":[""],"object":null}`, "3"},
		{"no object", `{"cells":[""]}`, "3"},
		{"other resourceVersion", `{"cells":[""],"object":{"metadata":{"resourceVersion":"4"}}}`, "3"},
		{"a name", `{"cells":[""],"object":{"metadata":{"name":"a","resourceVersion":"3"}}}`, "3"},
		{"other annotations", `{"cells":[""],"object":{"metadata":{"resourceVersion":"3","annotations":{"a":"b"}}}}`, "3"},
		{"member after the object", `{"cells":[""],"object":{"metadata":{"resourceVersion":"3"}},"x":1}`, "3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := ParseTableBookmark([]byte(tc.row), tc.rv); err == nil {
				t.Errorf("learned %+v, want an error", b)
			}
		})
	}
}
