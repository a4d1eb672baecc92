package stores

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// TestTableColumnsInterned: rows rendered under the same columns share
// one value, so that a page's rows are checked against the latest columns
// by pointer; new columns replace it, and the empty-rows form is kept.
func TestTableColumnsInterned(t *testing.T) {
	var feed tableFeed
	if changed := feed.setColumns([]byte(`[{"name":"Name"}]`)); changed {
		t.Error("the first columns reported as a change")
	}
	first := feed.columns()
	feed.setNullRows(true)
	if changed := feed.setColumns([]byte(`[{"name":"Name"}]`)); changed || feed.columns() != first {
		t.Errorf("equal columns: changed %v, pointer kept %v; want false, true", changed, feed.columns() == first)
	}
	if changed := feed.setColumns([]byte(`[{"name":"Name"},{"name":"Age"}]`)); !changed || feed.columns() == first {
		t.Errorf("other columns: changed %v, pointer kept %v; want true, false", changed, feed.columns() == first)
	}
	if h := feed.head.Load(); !h.NullRows || !bytes.Equal(h.Columns.JSON, []byte(`[{"name":"Name"},{"name":"Age"}]`)) {
		t.Errorf("head = %+v, want the new columns and null rows kept", h)
	}
}

// TestTableWatchColumnsChanged: a Table watch whose first event carries
// the store's columns goes on; one carrying other columns ends with an
// error that makes the feeder relist, and the columns are the new ones.
func TestTableWatchColumnsChanged(t *testing.T) {
	const (
		cols  = `[{"name":"Name","type":"string"}]`
		other = `[{"name":"Name","type":"string"},{"name":"Size","type":"integer"}]`
	)
	event := func(typ, rv, columns string) string {
		return `{"type":"` + typ + `","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"` + rv + `"},"columnDefinitions":` + columns + `,"rows":[{"cells":["a"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","resourceVersion":"` + rv + `"}}}]}}` + "\n"
	}
	for _, tc := range []struct {
		name      string
		body      string
		wantTypes []snapshot.EventType
		wantErr   error
	}{
		{name: "same_columns", body: event("ADDED", "5", cols) + event("MODIFIED", "6", "null"), wantTypes: []snapshot.EventType{snapshot.Added, snapshot.Modified}, wantErr: io.EOF},
		{name: "new_columns", body: event("ADDED", "5", other), wantErr: snapshot.ErrGone},
		{name: "new_columns_on_a_bookmark", body: event("BOOKMARK", "5", other), wantErr: snapshot.ErrGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := &tableFeed{}
			feed.setColumns([]byte(cols))
			w := tableWatch{watchAdapter: watchAdapter{wire.NewWatchDecoder(wire.Table, io.NopCloser(bytes.NewReader([]byte(tc.body))), wire.WatchOptions{})}, table: feed}
			var got []snapshot.EventType
			var err error
			for {
				var ev snapshot.WatchEvent
				if ev, err = w.Next(); err != nil {
					break
				}
				got = append(got, ev.Type)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Next ended with %v, want %v", err, tc.wantErr)
			}
			if len(got) != len(tc.wantTypes) {
				t.Fatalf("events %v, want %v", got, tc.wantTypes)
			}
			if errors.Is(tc.wantErr, snapshot.ErrGone) && string(feed.columns().JSON) != other {
				t.Errorf("columns after the change = %s, want the new ones", feed.columns().JSON)
			}
		})
	}
}
