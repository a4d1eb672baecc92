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
