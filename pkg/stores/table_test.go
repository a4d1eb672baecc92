package stores

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/table"
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
		{name: "the_crds", expect: []string{"Name", "Size", "Created"}, columns: cols("Name", "Size", "Created")},
		{name: "default_age", expect: []string{"Name", "Age"}, columns: cols("Name", "Age")},
		{name: "older_set", expect: []string{"Name", "Size", "Created"}, columns: cols("Name", "Color", "Size", "Note", "Created"), wantErr: true},
		{name: "renamed", expect: []string{"Name", "Size"}, columns: cols("Name", "Bytes"), wantErr: true},
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

// configMapsTable is the configmaps resource with its Table rules on 1.37.
func configMapsTable(t *testing.T) *catalog.Resource {
	t.Helper()
	res := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true, false)
	rules, ok := table.For(37, res.GVR.GroupResource())
	if !ok {
		t.Fatal("no Table rules for configmaps on 1.37")
	}
	res.Table, res.TableServed = rules, true
	return res
}

// configMapRow is the Table row of a configmap created at created (a whole
// second) as an apiserver renders it at rendered by its clock; age, when
// not empty, is its Age cell instead.
func configMapRow(created, rendered time.Time, age string) []byte {
	if age == "" {
		age = duration.HumanDuration(rendered.Sub(created))
	}
	meta := `{"name":"cm","namespace":"ns","resourceVersion":"5","creationTimestamp":"` + created.UTC().Format(time.RFC3339) + `"}`
	return []byte(`{"cells":["cm",1,"` + age + `"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":` + meta + `}}`)
}

// tableStoreRegistry is a registry running a Table store of res, with a
// fake clock at start and metrics, and that store's extractor as a
// registry builds it (newStoreLocked).
func tableStoreRegistry(t *testing.T, ctx context.Context, res *catalog.Resource, start time.Time) (*Registry, *testingclock.FakeClock, *Metrics, snapshot.Extractor) {
	t.Helper()
	clk := testingclock.NewFakeClock(start)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace(nil, 1)
	reg, err := NewStatic(ctx, Config{Clock: clk, Metrics: m}, nil, StaticStore{Resource: res, Format: wire.Table, Store: store, TableHead: &TableHead{}})
	if err != nil {
		t.Fatal(err)
	}
	feed := &tableFeed{rules: res.Table}
	feed.setColumns([]byte(`[{"name":"Name"}]`))
	return reg, clk, m, newTableExtractor(res, feed, clk.Now, m, func(err error) { reg.refuseTables(res, err) })
}

// TestTableRowsRefusedOnRepeatedEvidence: a rejected row fails only the
// list or watch that brought it (the store lists again); the resource's
// Tables are refused, and its Table store dropped, once tableRejectLimit
// rows were rejected within tableRejectPeriod, and served again
// tableRefusal later. Each rejected row is counted by reason.
func TestTableRowsRefusedOnRepeatedEvidence(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := configMapsTable(t)
	reg, clk, m, extract := tableStoreRegistry(t, ctx, res, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	served := func() (string, bool) {
		h, reason, ok := reg.Acquire(ctx, res, wire.Table, false)
		if ok {
			h.Release()
		}
		return reason, ok
	}
	// A row rendered 10s ahead of listproxy's clock: beyond the skew
	// tolerated, and its Age cell of seconds.
	skewed := func() []byte { return configMapRow(clk.Now().Add(-30*time.Second), clk.Now().Add(10*time.Second), "") }

	steps := []struct {
		after   time.Duration
		refused bool
	}{
		{0, false},
		{40 * time.Minute, false},
		// The first of three is more than tableRejectPeriod before.
		{21 * time.Minute, false},
		{10 * time.Minute, true},
	}
	for i, st := range steps {
		clk.Step(st.after)
		if _, err := extract(configMapRow(clk.Now().Add(-time.Minute), clk.Now(), "")); err != nil {
			t.Fatalf("step %d: a row of the current instant: %v", i, err)
		}
		if _, err := extract(skewed()); !errors.Is(err, table.ErrClockSkew) {
			t.Fatalf("step %d: a row 10s ahead: %v, want table.ErrClockSkew", i, err)
		}
		reason, ok := served()
		if ok == st.refused || (st.refused && reason != ReasonTableRefused) {
			t.Fatalf("step %d (%d rejected rows): served %v (%q), want refused %v", i, i+1, ok, reason, st.refused)
		}
		if running := reg.Store(res.GVR, wire.Table) != nil; running == st.refused {
			t.Fatalf("step %d: Table store running %v, want %v", i, running, !st.refused)
		}
	}
	if got := testutil.ToFloat64(m.tableMismatchTotal.WithLabelValues("configmaps", tableRejectClockSkew)); got != float64(len(steps)) {
		t.Errorf("table_mismatches_total{clock_skew} = %v, want %d", got, len(steps))
	}
	clk.Step(tableRefusal - time.Second)
	if reason, ok := served(); ok || reason != ReasonTableRefused {
		t.Errorf("%v after the refusal: served %v (%q), want refused", tableRefusal-time.Second, ok, reason)
	}
	clk.Step(time.Second)
	if reg.tablesRefused(res.GVR) {
		t.Errorf("still refused %v after the refusal", tableRefusal)
	}
}

// TestTableRowRejectReasons: a rejected row is counted by why, and one
// alone refuses nothing.
func TestTableRowRejectReasons(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	created := start.Add(-30 * time.Second)
	for _, tc := range []struct {
		name, reason string
		row          []byte
	}{
		{"clock skew", tableRejectClockSkew, configMapRow(created, start.Add(table.MaxClockSkew+2*time.Second), "")},
		{"rule", tableRejectRule, configMapRow(created, start, "41d")},
		{"malformed", tableRejectMalformed, []byte(`{"cells":["cm",1,"30s"]}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := configMapsTable(t)
			reg, _, m, extract := tableStoreRegistry(t, ctx, res, start)
			if _, err := extract(tc.row); err == nil {
				t.Fatalf("row %s taken", tc.row)
			}
			if got := testutil.ToFloat64(m.tableMismatchTotal.WithLabelValues("configmaps", tc.reason)); got != 1 {
				t.Errorf("table_mismatches_total{%s} = %v, want 1", tc.reason, got)
			}
			if reg.tablesRefused(res.GVR) || reg.Store(res.GVR, wire.Table) == nil {
				t.Error("one rejected row refused the resource's Tables")
			}
		})
	}
}

// TestTableClockAheadObserved: a row rendered by an apiserver whose clock
// is 30ms ahead, received just before a whole second, is taken, and the
// skew it shows is observed; a row that shows none is not.
func TestTableClockAheadObserved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := configMapsTable(t)
	received := time.Date(2026, 3, 1, 12, 0, 0, 990*int(time.Millisecond), time.UTC)
	_, _, m, extract := tableStoreRegistry(t, ctx, res, received)
	created := received.Add(-30 * time.Second).Truncate(time.Second)
	if _, err := extract(configMapRow(created, received.Add(-time.Second), "")); err != nil {
		t.Fatal(err)
	}
	if _, err := extract(configMapRow(created, received.Add(30*time.Millisecond), "")); err != nil {
		t.Fatalf("a row rendered 30ms ahead: %v", err)
	}
	var got dto.Metric
	if err := m.tableClockAhead.Write(&got); err != nil {
		t.Fatal(err)
	}
	// The row reads 31s: rendered at least 10ms after it arrived.
	if h := got.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 0.009 || h.GetSampleSum() > 0.030 {
		t.Errorf("table_clock_ahead_seconds: %d samples, sum %v; want 1 of 0.01", h.GetSampleCount(), h.GetSampleSum())
	}
}
