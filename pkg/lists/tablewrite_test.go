package lists

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// tableRows returns n configmap rows as a Table store holds them, created
// 90 minutes before they were received.
func tableRows(t *testing.T, n int, created time.Time) ([]*stores.TableRow, []*snapshot.Entry) {
	t.Helper()
	rules, ok := table.For(37, schema.GroupResource{Resource: "configmaps"})
	if !ok {
		t.Fatal("no Table rules for configmaps on 1.37")
	}
	received := created.Add(90 * time.Minute)
	rows := make([]*stores.TableRow, n)
	entries := make([]*snapshot.Entry, n)
	for i := range n {
		raw := fmt.Sprintf(`{"cells":["cm-%d",1,"90m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"cm-%d","namespace":"ns","creationTimestamp":%q}}}`,
			i, i, created.Format(time.RFC3339))
		stored, _, row, err := rules.Parse([]byte(raw), received)
		if err != nil {
			t.Fatalf("Parse(%s): %v", raw, err)
		}
		rows[i] = &stores.TableRow{Row: row}
		entries[i] = &snapshot.Entry{Raw: stored}
	}
	return rows, entries
}

// TestWriteTable: responses written one after another and at once, with
// and without gzip, below and above the gzip threshold, each hold their
// own rows rendered for their instant (render buffers and writers are
// pooled between responses).
func TestWriteTable(t *testing.T) {
	created := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	opts := collection.TableOptions{GroupVersion: "v1", Include: table.IncludeMetadata}
	for _, tc := range []struct {
		name     string
		rows     int
		gzip     bool
		wantGzip bool
	}{
		{name: "short, written whole", rows: 3, gzip: true},
		{name: "long, gzipped", rows: 1000, gzip: true, wantGzip: true},
		{name: "long, client without gzip", rows: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, entries := tableRows(t, tc.rows, created)
			// Each response is asked at its own instant: AGE 100m, 101m, ...
			responses := make([]string, 4)
			wants := make([]string, len(responses))
			for k := range responses {
				now := created.Add(time.Duration(100+k) * time.Minute)
				parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: "v1", ListMeta: wire.ListMeta{ResourceVersion: fmt.Sprint(k)}, Columns: []byte(`[{"name":"Name"}]`)}, tc.rows)
				if err != nil {
					t.Fatal(err)
				}
				want := append([]byte(nil), parts.Head...)
				for i := range rows {
					if i > 0 {
						want = append(want, ',')
					}
					want = rows[i].Append(want, entries[i].Raw, now, opts.Include, opts.GroupVersion)
				}
				wants[k] = string(append(want, parts.Tail...))
				if !bytes.Contains(want, fmt.Appendf(nil, `"%dm"`, 100+k)) {
					t.Fatalf("response %d's rows do not hold AGE %dm", k, 100+k)
				}
			}
			write := func(k int) string {
				now := created.Add(time.Duration(100+k) * time.Minute)
				parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: "v1", ListMeta: wire.ListMeta{ResourceVersion: fmt.Sprint(k)}, Columns: []byte(`[{"name":"Name"}]`)}, tc.rows)
				if err != nil {
					t.Error(err)
					return ""
				}
				r := httptest.NewRequest(http.MethodGet, "/api/v1/configmaps", nil)
				if tc.gzip {
					r.Header.Set("Accept-Encoding", "gzip")
				}
				w := httptest.NewRecorder()
				writeTable(w, r, opts, parts, rows, entries, now)
				body := w.Body.Bytes()
				if got := w.Header().Get("Content-Encoding") == "gzip"; got != tc.wantGzip {
					t.Errorf("response %d gzipped: %t, want %t", k, got, tc.wantGzip)
				}
				if tc.wantGzip {
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Errorf("response %d: %v", k, err)
						return ""
					}
					if body, err = io.ReadAll(zr); err != nil {
						t.Errorf("response %d: %v", k, err)
						return ""
					}
				}
				return string(body)
			}
			// One after another: each reuses the previous one's writers.
			for k := range responses {
				if diff := cmp.Diff(wants[k], write(k)); diff != "" {
					t.Errorf("sequential response %d (-want +got):\n%.2000s", k, diff)
				}
			}
			// At once.
			var wg sync.WaitGroup
			for k := range responses {
				wg.Go(func() { responses[k] = write(k) })
			}
			wg.Wait()
			for k := range responses {
				if diff := cmp.Diff(wants[k], responses[k]); diff != "" {
					t.Errorf("concurrent response %d (-want +got):\n%.2000s", k, diff)
				}
			}
		})
	}
}
