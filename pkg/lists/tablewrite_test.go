package lists

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// parseTableRow is the row raw as a Table store holds it, received at
// received: its Row and its entry.
func parseTableRow(tb testing.TB, rules table.Rules, raw string, received time.Time) (*stores.TableRow, *snapshot.Entry) {
	tb.Helper()
	stored, _, row, err := rules.Parse([]byte(raw), received)
	if err != nil {
		tb.Fatalf("Parse(%s): %v", raw, err)
	}
	return &stores.TableRow{Row: row}, &snapshot.Entry{Raw: stored}
}

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
		rows[i], entries[i] = parseTableRow(t, rules, raw, received)
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
		name       string
		rows       int
		gzip       bool
		unfiltered bool
		wantGzip   bool
	}{
		{name: "short, written whole", rows: 3, gzip: true, unfiltered: true},
		{name: "long, gzipped, stitched from row chunks", rows: 1000, gzip: true, unfiltered: true, wantGzip: true},
		{name: "long, gzipped, filtered", rows: 1000, gzip: true, wantGzip: true},
		{name: "long, client without gzip", rows: 1000, unfiltered: true},
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
				writeTable(w, r, opts, parts, rows, entries, now, tc.unfiltered)
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

// youngRows returns n rows of a custom resource with two date columns of
// its creationTimestamp, received at received, row i created 7m30s+i
// seconds before it, with its AGE at received also in an annotation: a
// chunk that referred to the clock cells' bytes would find them there.
func youngRows(t *testing.T, n int, received time.Time, tag string) ([]*stores.TableRow, []*snapshot.Entry) {
	t.Helper()
	date := table.Column{Type: "date", JSONPath: ".metadata.creationTimestamp"}
	rules, ok := table.ForCustom([]table.Column{date, {Type: "string", JSONPath: ".spec.color"}, date})
	if !ok {
		t.Fatal("no Table rules for the custom resource")
	}
	rows := make([]*stores.TableRow, n)
	entries := make([]*snapshot.Entry, n)
	for i := range n {
		created := received.Add(-7*time.Minute - 30*time.Second - time.Duration(i)*time.Second)
		age := duration.HumanDuration(received.Sub(created))
		raw := fmt.Sprintf(`{"cells":["w-%d",%q,"a color of some length",%q],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"w-%d","namespace":"ns","creationTimestamp":%q,"annotations":{"age":%q,"tag":%q}}}}`,
			i, age, age, i, created.Format(time.RFC3339), age, tag)
		rows[i], entries[i] = parseTableRow(t, rules, raw, received)
	}
	return rows, entries
}

// TestWriteGzipTableChunks: a stitched Table response decompresses to the
// rows rendered for its instant, through responses that reuse the chunks
// cached on the rows (another instant whose clock cells render in the same
// lengths, a page starting further on) and that compress rows again (clock
// cells of other lengths, a changed preceding row).
func TestWriteGzipTableChunks(t *testing.T) {
	received := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	const n = 60
	rows, entries := youngRows(t, n, received, "a")
	// What each step changes of the page before writing it.
	replaced := func(rows []*stores.TableRow, entries []*snapshot.Entry) ([]*stores.TableRow, []*snapshot.Entry) {
		r, e := youngRows(t, n, received, "replaced")
		rows, entries = slices.Clone(rows), slices.Clone(entries)
		rows[5], entries[5] = r[5], e[5]
		return rows, entries
	}
	from10 := func(rows []*stores.TableRow, entries []*snapshot.Entry) ([]*stores.TableRow, []*snapshot.Entry) {
		return rows[10:], entries[10:]
	}
	// Which rows' chunks are compressed (again), by their index in the
	// original page.
	span := func(from, to int) []int {
		var s []int
		for i := from; i < to; i++ {
			s = append(s, i)
		}
		return s
	}
	all := span(1, n)
	// Within a minute, every row's AGE (7m30s+i to 8m29s+i) renders in
	// three lengths (8m, 8m1s, 8m10s): compressed for all three at once.
	// A minute on, rows 30-59 are 10m old a minute later (a fourth
	// length) and compressed ahead for it; three minutes on, the others
	// are compressed for it.
	for _, step := range []struct {
		name     string
		now      time.Duration
		change   func([]*stores.TableRow, []*snapshot.Entry) ([]*stores.TableRow, []*snapshot.Entry)
		compress []int
	}{
		{name: "first response: every row but the first", now: 0, compress: all},
		{name: "the same second: none", now: 300 * time.Millisecond},
		{name: "a second later, some AGEs in other lengths: none", now: time.Second},
		{name: "back to the first lengths: none", now: 400 * time.Millisecond},
		{name: "a minute later, other values of the same lengths: rows 10m old a minute on, ahead", now: time.Minute, compress: span(30, n)},
		{name: "row 5 replaced: it and the row after it", now: time.Minute, change: replaced, compress: []int{5, 6}},
		{name: "a page from row 10: none", now: time.Minute, change: replaced, compress: nil},
		{name: "three minutes later, AGE in a length not cached: rows not compressed ahead", now: 3 * time.Minute, compress: span(1, 30)},
	} {
		t.Run(step.name, func(t *testing.T) {
			rows, entries := rows, entries
			if step.change != nil {
				rows, entries = step.change(rows, entries)
			}
			if step.name == "a page from row 10: none" {
				rows, entries = from10(rows, entries)
			}
			compressed := gzipTableCompressed(t, metadataV1, rows, entries, received.Add(step.now))
			if step.name == "a page from row 10: none" {
				for i := range compressed {
					compressed[i] += 10
				}
			}
			if diff := cmp.Diff(step.compress, compressed, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rows compressed (-want +got):\n%s", diff)
			}
		})
	}
}

// metadataV1 asks for a meta.k8s.io/v1 Table whose rows carry their
// object's metadata: what kubectl asks for.
var metadataV1 = collection.TableOptions{GroupVersion: "v1", Include: table.IncludeMetadata}

// gzipTableCompressed writes rows and entries as a stitched gzip Table
// response asked with opts at now, checks that it decompresses to the rows
// rendered for opts and now, and returns the indexes of the rows whose
// chunks it compressed.
func gzipTableCompressed(t *testing.T, opts collection.TableOptions, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time) []int {
	t.Helper()
	before := make([]*snapshot.GzipItem, len(entries))
	for i, e := range entries {
		before[i] = e.GzipCached(snapshot.GzipTableRow)
	}
	parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: opts.GroupVersion, ListMeta: wire.ListMeta{ResourceVersion: "7"}, Columns: []byte(`[{"name":"Name"}]`)}, len(rows))
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
	want = append(want, parts.Tail...)
	var out bytes.Buffer
	if err := writeGzipTable(&out, opts, parts, rows, entries, now); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decompressing: %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Fatalf("decompressed (-want +got):\n%.3000s", diff)
	}
	var compressed []int
	for i, e := range entries {
		// Giving a row its ID alone compresses nothing.
		if it := e.GzipCached(snapshot.GzipTableRow); it != before[i] && it.Chunk.Len() > 0 {
			compressed = append(compressed, i)
		}
	}
	return compressed
}

// TestWriteGzipTableChunksAhead: a row whose chunk is cached is compressed
// ahead for the lengths its clock cells take a minute later, if not cached,
// so that a response then finds it; once, not at every response.
func TestWriteGzipTableChunksAhead(t *testing.T) {
	received := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	const n = 60
	// Row i is 7m30s+i old at received.
	rows, entries := youngRows(t, n, received, "a")
	span := func(from, to int) []int {
		var s []int
		for i := from; i < to; i++ {
			s = append(s, i)
		}
		return s
	}
	for _, step := range []struct {
		name     string
		now      time.Duration
		compress []int
	}{
		{name: "first response: every row but the first", now: 0, compress: span(1, n)},
		// Rows 0-39 are 9m20s-9m59s old (cached lengths), rows 40-59
		// 10m-10m19s (not cached): the former are compressed ahead for 10m.
		{name: "1m50s later: rows under 10m ahead, rows of 10m again", now: time.Minute + 50*time.Second, compress: span(1, n)},
		{name: "a second later: none", now: time.Minute + 51*time.Second},
		{name: "2m30s later, every AGE 10m or more: none", now: 2*time.Minute + 30*time.Second},
	} {
		t.Run(step.name, func(t *testing.T) {
			got := gzipTableCompressed(t, metadataV1, rows, entries, received.Add(step.now))
			if diff := cmp.Diff(step.compress, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rows compressed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteGzipTableChunksPerObjectForm: the rows' chunks are cached per
// form of the row's object (includeObject=None, metadata in meta.k8s.io/v1,
// in v1beta1), so one set of entries written in each form in turn
// decompresses to that form's rows every time: a chunk compressed for one
// form is never stitched into a response of another. Each form's first
// response compresses every row but the first; later ones reuse its
// chunks (an AGE of 100m keeps its length for the minute, so each row
// needs one chunk per form, three in all, as many as an entry keeps).
func TestWriteGzipTableChunksPerObjectForm(t *testing.T) {
	created := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	now := created.Add(100 * time.Minute)
	const n = 50
	rows, entries := tableRows(t, n, created)
	none := collection.TableOptions{GroupVersion: "v1", Include: table.IncludeNone}
	metadataV1beta1 := collection.TableOptions{GroupVersion: "v1beta1", Include: table.IncludeMetadata}
	var everyRowButTheFirst []int
	for i := 1; i < n; i++ {
		everyRowButTheFirst = append(everyRowButTheFirst, i)
	}
	for _, step := range []struct {
		name     string
		opts     collection.TableOptions
		compress []int
	}{
		{name: "object None, first: every row but the first", opts: none, compress: everyRowButTheFirst},
		{name: "metadata v1, first: every row but the first", opts: metadataV1, compress: everyRowButTheFirst},
		{name: "metadata v1beta1, first: every row but the first", opts: metadataV1beta1, compress: everyRowButTheFirst},
		{name: "object None again: none", opts: none},
		{name: "metadata v1 again: none", opts: metadataV1},
		{name: "metadata v1beta1 again: none", opts: metadataV1beta1},
	} {
		t.Run(step.name, func(t *testing.T) {
			got := gzipTableCompressed(t, step.opts, rows, entries, now)
			if diff := cmp.Diff(step.compress, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rows compressed (-want +got):\n%s", diff)
			}
		})
	}
}
