package stores

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestTableColumnsOfTheCRD: a custom resource's Table store takes only
// Tables under the columns its CRD names; the apiserver renders an older
// set for a while after the CRD changed, and such a list or watch fails
// (and is tried again).
func TestTableColumnsOfTheCRD(t *testing.T) {
	cols := func(names ...string) []byte {
		b := []byte("[")
		for i, n := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":"`+n+`","type":"string","format":"","description":"","priority":0}`...)
		}
		return append(b, ']')
	}
	for _, tc := range []struct {
		name    string
		expect  []string
		columns []byte
		wantErr bool
	}{
		{name: "built_in", columns: cols("Name", "Anything")},
		{name: "the_crds", expect: crdVersion{names: []string{"Size", "Created"}}.columnNames(), columns: cols("Name", "Size", "Created")},
		{name: "default_age", expect: crdVersion{}.columnNames(), columns: cols("Name", "Age")},
		{name: "older_set", expect: crdVersion{names: []string{"Size", "Created"}}.columnNames(), columns: cols("Name", "Color", "Size", "Note", "Created"), wantErr: true},
		{name: "renamed", expect: crdVersion{names: []string{"Size"}}.columnNames(), columns: cols("Name", "Bytes"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := &tableFeed{columnNames: tc.expect}
			if err := feed.checkColumns(tc.columns); (err != nil) != tc.wantErr {
				t.Errorf("checkColumns = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// TestTableWatchLearnsBookmark: a Table feed keeps the row of the
// apiserver's BOOKMARK under the current columns, and forgets it when
// the columns change (its row was rendered under the old ones).
func TestTableWatchLearnsBookmark(t *testing.T) {
	const cols = `[{"name":"Name","type":"string"}]`
	bookmark := func(rv, metadata string) string {
		return `{"type":"BOOKMARK","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"` + rv + `"},"columnDefinitions":null,"rows":[{"cells":["",0],"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":` + metadata + `}}]}}` + "\n"
	}
	tests := []struct {
		name string
		body string
		want *wire.TableBookmark
	}{
		{"periodic", bookmark("9", `{"resourceVersion":"9","creationTimestamp":null}`), &wire.TableBookmark{Head: []byte(`{"cells":["",0],"object":`), Meta: []byte(`,"creationTimestamp":null`)}},
		{"not a bookmark's row", bookmark("9", `{"resourceVersion":"8"}`), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			feed := &tableFeed{}
			feed.setColumns([]byte(cols))
			w := tableWatch{watchAdapter: watchAdapter{wire.NewWatchDecoder(wire.Table, io.NopCloser(bytes.NewReader([]byte(tc.body))), wire.WatchOptions{})}, table: feed}
			if _, err := w.Next(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, feed.head.Load().Bookmark); diff != "" {
				t.Errorf("bookmark row (-want +got):\n%s", diff)
			}
			feed.setNullRows(true)
			if diff := cmp.Diff(tc.want, feed.head.Load().Bookmark); diff != "" {
				t.Errorf("bookmark row after setNullRows (-want +got):\n%s", diff)
			}
			feed.setColumns([]byte(`[]`))
			if got := feed.head.Load().Bookmark; got != nil {
				t.Errorf("bookmark row under new columns = %+v, want none", got)
			}
		})
	}
}

// TestTableListAsksBookmarkRow: a Table store's list asks the apiserver
// for the bookmark row with one watch-list selecting nothing, and only
// where the apiserver serves watch-lists; one that refuses them is not
// sent a request bound to fail.
func TestTableListAsksBookmarkRow(t *testing.T) {
	const empty = `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"5"},"columnDefinitions":[{"name":"Name","type":"string"}],"rows":[]}`
	for _, tc := range []struct {
		name       string
		watchLists func() bool
		wantAsked  int
	}{
		{"serves watch-lists", func() bool { return true }, 1},
		{"refuses watch-lists", func() bool { return false }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("watch") == "true" {
					asked.Add(1)
					http.Error(w, "no watch here", http.StatusUnprocessableEntity)
					return
				}
				_, _ = io.WriteString(w, empty)
			}))
			defer up.Close()
			src := &apiSource{client: up.Client(), host: up.URL, path: "/api/v1/configmaps", format: wire.Table,
				table: &tableFeed{watchLists: tc.watchLists}}
			if _, err := src.List(t.Context(), 500, "", func([]byte) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if got := int(asked.Load()); got != tc.wantAsked {
				t.Errorf("%d watch-lists asked for the bookmark row, want %d", got, tc.wantAsked)
			}
		})
	}
}
