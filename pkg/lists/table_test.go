package lists

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

var configmapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

const tableColumns = `[{"name":"Name","type":"string","format":"name","description":"","priority":0},{"name":"Data","type":"string","format":"","description":"","priority":0},{"name":"Age","type":"string","format":"","description":"","priority":0}]`

// configmapRow is a configmap's Table row as the apiserver renders it
// age after created, padded by an annotation of pad bytes.
func configmapRow(name string, rv uint64, created time.Time, age string, pad int) []byte {
	return fmt.Appendf(nil, `{"cells":[%q,1,%q],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d","creationTimestamp":%q,"annotations":{"pad":%q}}}}`,
		name, age, name, rv, created.UTC().Format(time.RFC3339), bytes.Repeat([]byte("x"), pad))
}

// newTableTestLists returns a LIST server over a Table store of
// configmaps (1.37's rules) holding n rows created two minutes ago and
// checked when received now, at resourceVersion n+1, and the store; the
// rows listed in otherColumns were rendered under other columns than the
// store's latest. The store keeps no history, and pins for an hour.
func newTableTestLists(t *testing.T, n, pad int, otherColumns map[int]bool) (*Lists, *snapshot.Store) {
	t.Helper()
	rules, ok := table.For(37, configmapsGVR.GroupResource())
	if !ok {
		t.Fatal("no Table rules for configmaps on 1.37")
	}
	res := catalog.NewResource(configmapsGVR, "ConfigMap", true, false)
	res.Table, res.TableServed = rules, true
	head := &stores.TableHead{Columns: &stores.TableColumns{JSON: []byte(tableColumns)}}
	older := &stores.TableColumns{JSON: []byte(`[]`)}
	now := time.Now()
	created := now.Add(-2 * time.Minute).Truncate(time.Second)
	var entries []*snapshot.Entry
	for i := range n {
		raw := configmapRow(fmt.Sprintf("cm-%05d", i), uint64(i+1), created, "2m", pad)
		stored, _, row, err := rules.Parse(raw, now)
		if err != nil {
			t.Fatal(err)
		}
		e := snapshot.NewEntry("ns", fmt.Sprintf("cm-%05d", i), uint64(i+1), nil, snapshot.NewFieldNames(), nil, stored)
		e.Extra = &stores.TableRow{Row: row, Columns: head.Columns}
		if otherColumns[i] {
			e.Extra = &stores.TableRow{Row: row, Columns: older}
		}
		entries = append(entries, e)
	}
	store := snapshot.NewStore(snapshot.StoreConfig{PinTTL: time.Hour})
	store.Replace(entries, uint64(n+1))
	l := newTestLists(t, testListsOptions{store: stores.StaticStore{Resource: res, Format: wire.Table, Store: store, TableHead: head}})
	return l, store
}

type testTable struct {
	Kind       string          `json:"kind"`
	APIVersion string          `json:"apiVersion"`
	Columns    json.RawMessage `json:"columnDefinitions"`
	Rows       []struct {
		Cells  []json.RawMessage `json:"cells"`
		Object json.RawMessage   `json:"object"`
	} `json:"rows"`
}

// TestServeTable: a Table page is written from stored rows with each Age
// rendered for the response, the object as includeObject asks, in the
// meta.k8s.io version asked for; up to 128 KiB with a Content-Length,
// beyond it gzipped for a client that accepts it and streamed for one
// that does not; and a page holding a row rendered under other columns
// passes through, having written nothing.
func TestServeTable(t *testing.T) {
	const path = "/api/v1/namespaces/ns/configmaps"
	tests := []struct {
		name         string
		rows, pad    int
		otherColumns map[int]bool
		accept       string
		q            url.Values
		gzip         bool
		wantServed   bool
		wantEncoding string
		wantLength   bool
		wantRows     int
		wantVersion  string
		wantNone     bool
	}{
		{name: "small_page", rows: 3, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", q: url.Values{"limit": {"2"}, "resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}}, gzip: true, wantServed: true, wantLength: true, wantRows: 2, wantVersion: "meta.k8s.io/v1"},
		{name: "v1beta1_none", rows: 3, accept: "application/json;as=Table;v=v1beta1;g=meta.k8s.io", q: url.Values{"includeObject": {"None"}}, wantServed: true, wantLength: true, wantRows: 3, wantVersion: "meta.k8s.io/v1beta1", wantNone: true},
		{name: "large_gzipped", rows: 200, pad: 1000, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", gzip: true, wantServed: true, wantEncoding: "gzip", wantRows: 200, wantVersion: "meta.k8s.io/v1"},
		{name: "large_streamed", rows: 200, pad: 1000, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", wantServed: true, wantRows: 200, wantVersion: "meta.k8s.io/v1"},
		{name: "rows_under_other_columns", rows: 3, otherColumns: map[int]bool{1: true}, accept: "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{name: "include_object_passes_through", rows: 3, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", q: url.Values{"includeObject": {"Object"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTableTestLists(t, tc.rows, tc.pad, tc.otherColumns)
			q := tc.q
			if q == nil {
				q = url.Values{}
			}
			if q.Get("resourceVersion") == "" {
				q.Set("resourceVersion", "0")
			}
			h := http.Header{"Accept": {tc.accept}}
			if tc.gzip {
				h.Set("Accept-Encoding", "gzip")
			}
			served, rec, _ := serveTest(l, path, q, h)
			if served != tc.wantServed {
				t.Fatalf("served %v, want %v (HTTP %d: %.200s)", served, tc.wantServed, rec.Code, rec.Body.Bytes())
			}
			if !served {
				if rec.Body.Len() != 0 || rec.Header().Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot {
					t.Fatalf("passed through having written %d bytes, served-from %q", rec.Body.Len(), rec.Header().Get(httpapi.HeaderServedFrom))
				}
				return
			}
			if got := rec.Header().Get("Content-Encoding"); got != tc.wantEncoding {
				t.Errorf("Content-Encoding %q, want %q", got, tc.wantEncoding)
			}
			if got := rec.Header().Get("Content-Length") != ""; got != tc.wantLength {
				t.Errorf("Content-Length set %v, want %v", got, tc.wantLength)
			}
			body := rec.Body.Bytes()
			if tc.wantEncoding == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if tc.wantLength && rec.Header().Get("Content-Length") != fmt.Sprint(len(body)) {
				t.Errorf("Content-Length %s, body %d bytes", rec.Header().Get("Content-Length"), len(body))
			}
			var got testTable
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body: %v: %.300s", err, body)
			}
			if got.Kind != "Table" || got.APIVersion != tc.wantVersion || string(got.Columns) != tableColumns || len(got.Rows) != tc.wantRows {
				t.Fatalf("kind %q apiVersion %q columns %s, %d rows; want Table %s, the store's columns, %d rows", got.Kind, got.APIVersion, got.Columns, len(got.Rows), tc.wantVersion, tc.wantRows)
			}
			for i, r := range got.Rows {
				// Two minutes ago, rendered now: "2m" (the row was
				// received with the same), or "2m1s" across a second.
				if age := string(r.Cells[2]); age != `"2m"` && age != `"2m1s"` {
					t.Errorf("row %d age %s, want \"2m\" or \"2m1s\"", i, age)
				}
				var obj struct {
					APIVersion string `json:"apiVersion"`
				}
				if tc.wantNone {
					if string(r.Object) != "null" {
						t.Errorf("row %d object %s, want null", i, r.Object)
					}
				} else if err := json.Unmarshal(r.Object, &obj); err != nil || obj.APIVersion != tc.wantVersion {
					t.Errorf("row %d object apiVersion %q (%v), want %q", i, obj.APIVersion, err, tc.wantVersion)
				}
			}
		})
	}
}

// TestTablePagePassedThroughPinsNothing: a Table page with more to come
// pins its snapshot for its continue token, but a page that passes through
// (a row rendered under other columns than the resource's latest) pins
// nothing: its client gets the apiserver's page and token, and a pin would
// keep the snapshot for no one until its TTL, beyond what history keeps.
func TestTablePagePassedThroughPinsNothing(t *testing.T) {
	for _, tc := range []struct {
		name         string
		otherColumns map[int]bool
		wantServed   bool
	}{
		{name: "served_pins", wantServed: true},
		{name: "passed_through_pins_nothing", otherColumns: map[int]bool{1: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Three rows at resourceVersion 4: a page of two has more.
			l, store := newTableTestLists(t, 3, 0, tc.otherColumns)
			q := url.Values{"limit": {"2"}, "resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}}
			h := http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io"}}
			served, rec, _ := serveTest(l, "/api/v1/namespaces/ns/configmaps", q, h)
			if served != tc.wantServed {
				t.Fatalf("served %v, want %v (HTTP %d: %.200s)", served, tc.wantServed, rec.Code, rec.Body.Bytes())
			}
			// The next change leaves the snapshot at 4 to history, which
			// keeps none: only a pin holds it now.
			store.Apply(snapshot.Change{Entry: snapshot.NewEntry("ns", "cm-00000", 5, nil, snapshot.NewFieldNames(), nil, []byte(`{}`))}, 5)
			_, err := store.At(4)
			if pinned := err == nil; pinned != tc.wantServed {
				t.Errorf("snapshot at 4 pinned: %v (At: %v), want %v", pinned, err, tc.wantServed)
			}
		})
	}
}
