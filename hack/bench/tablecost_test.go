package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTablePayload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rows    []json.RawMessage
		want    payload
		wantErr bool
	}{
		{name: "none"},
		{
			name: "two rows",
			rows: []json.RawMessage{
				json.RawMessage(`{"cells":["a",1],"object":{"kind":"PartialObjectMetadata"}}`),
				json.RawMessage(`{"cells":["bb"],"conditions":[],"object":{}}`),
			},
			want: payload{rows: 2, bytes: 59 + 44, cells: 7 + 6, object: 32 + 2},
		},
		{name: "no object", rows: []json.RawMessage{json.RawMessage(`{"cells":[]}`)}, wantErr: true},
		{name: "not JSON", rows: []json.RawMessage{json.RawMessage(`{"cells":`)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tablePayload(tc.rows)
			if (err != nil) != tc.wantErr {
				t.Fatalf("tablePayload() error = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(payload{})); diff != "" {
				t.Errorf("tablePayload() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTableMemoryCheck(t *testing.T) {
	for _, tc := range []struct {
		name                string
		r                   tableMemoryResult
		wantRatio, wantHeap num
		wantMet             bool
	}{
		{
			name:      "within 10%",
			r:         tableMemoryResult{PayloadBytes: 1000, StoreObjects: 1, StoreBytes: 1000, HistoryBytes: 40, FeedBytes: 10, HeapStoreBytes: 1100, HeapForced: true},
			wantRatio: 1.05, wantHeap: 1.1, wantMet: true,
		},
		{
			name:      "beyond 10%",
			r:         tableMemoryResult{PayloadBytes: 1000, StoreObjects: 1, StoreBytes: 1000, HeapStoreBytes: 1101, HeapForced: true},
			wantRatio: 1, wantHeap: 1.101,
		},
		{
			name:      "heap not after a forced GC",
			r:         tableMemoryResult{PayloadBytes: 1000, StoreObjects: 1, StoreBytes: 1000, HeapStoreBytes: 1000},
			wantRatio: 1, wantHeap: 1,
		},
		{name: "no payload", r: tableMemoryResult{StoreObjects: 1, StoreBytes: 1000, HeapForced: true}},
		{name: "no store", r: tableMemoryResult{PayloadBytes: 1000, HeapForced: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.Ratio, r.HeapRatio = tableMemoryRatios(&r)
			if diff := cmp.Diff([]num{tc.wantRatio, tc.wantHeap}, []num{r.Ratio, r.HeapRatio}, cmp.Comparer(approx)); diff != "" {
				t.Errorf("tableMemoryRatios() (-want +got):\n%s", diff)
			}
			if got := tableMemoryCheck(&r); got.Met != tc.wantMet {
				t.Errorf("tableMemoryCheck() met = %t (%s), want %t", got.Met, got.Text, tc.wantMet)
			}
		})
	}
}

func TestFeedSlope(t *testing.T) {
	base := &tableFeedPhase{APIServerCPUPerWrite: 0.008}
	for _, tc := range []struct {
		name          string
		tables, jsons num
		// nTable and nJSON are the watches (128 and 256 when 0).
		nTable, nJSON int
		limit         float64
		want          feedSlope
		wantMet       bool
		wantName      string
	}{
		{
			name: "Object feed within 5×", tables: 0.008 + 128*0.0004, jsons: 0.008 + 256*0.0001, limit: 5,
			want:    feedSlope{TablePerChange: 0.0004, JSONPerChange: 0.0001, Ratio: 4},
			wantMet: true,
		},
		{
			name: "Metadata feed beyond 1.5×", tables: 0.008 + 128*0.0002, jsons: 0.008 + 256*0.0001, limit: 1.5,
			want: feedSlope{TablePerChange: 0.0002, JSONPerChange: 0.0001, Ratio: 2},
		},
		{
			name: "sole watches within 1.5×", tables: 0.008 + 0.000140, jsons: 0.008 + 0.000115, nTable: 1, nJSON: 1, limit: 1.5,
			want:     feedSlope{TablePerChange: 0.000140, JSONPerChange: 0.000115, Ratio: 0.000140 / 0.000115},
			wantMet:  true,
			wantName: "Table Object feed (pods, includeObject=Object) per change, a sole watch (changes written in etcd)",
		},
		{
			name: "sole watches beyond 1.5×", tables: 0.008 + 0.000200, jsons: 0.008 + 0.000115, nTable: 1, nJSON: 1, limit: 1.5,
			want: feedSlope{TablePerChange: 0.000200, JSONPerChange: 0.000115, Ratio: 0.000200 / 0.000115},
		},
		{
			name: "JSON watches within the noise", tables: 0.008 + 128*0.0002, jsons: 0.0079, limit: 5,
			want: feedSlope{TablePerChange: 0.0002, JSONPerChange: -0.0001 / 256},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nTable == 0 {
				tc.nTable, tc.nJSON = 128, 256
			}
			got := slopeOf("Object", "pods", base, &tableFeedPhase{APIServerCPUPerWrite: tc.tables}, &tableFeedPhase{APIServerCPUPerWrite: tc.jsons}, tc.nTable, tc.nJSON)
			tc.want.Feed, tc.want.Resource, tc.want.TableWatches, tc.want.JSONWatches = "Object", "pods", tc.nTable, tc.nJSON
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(approx)); diff != "" {
				t.Errorf("slopeOf() (-want +got):\n%s", diff)
			}
			c := feedSlopeCheck(got, tc.limit)
			if c.Met != tc.wantMet {
				t.Errorf("feedSlopeCheck() met = %t (%s), want %t", c.Met, c.Text, tc.wantMet)
			}
			if tc.wantName != "" && c.Name != tc.wantName {
				t.Errorf("feedSlopeCheck() name = %q, want %q", c.Name, tc.wantName)
			}
		})
	}
}

// approx compares within a relative 1e-9.
func approx(a, b num) bool {
	d := float64(a - b)
	return d < 1e-9*max(1, float64(abs(a))) && -d < 1e-9*max(1, float64(abs(a)))
}

func abs(n num) num {
	if n < 0 {
		return -n
	}
	return n
}

func TestInitialEvents(t *testing.T) {
	const end = `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}`
	for _, tc := range []struct {
		name    string
		stream  string
		want    int
		wantErr bool
	}{
		{name: "two, then the end", stream: `{"type":"ADDED","object":{}}` + "\n" + `{"type":"ADDED","object":{}}` + "\n" + end + "\n", want: 2},
		{name: "a bookmark before the end", stream: `{"type":"ADDED","object":{}}{"type":"BOOKMARK","object":{"metadata":{}}}{"type":"ADDED","object":{}}` + end, want: 2},
		{name: "none", stream: end, want: 0},
		{name: "no end", stream: `{"type":"ADDED","object":{}}`, want: 1, wantErr: true},
		{name: "a change among them", stream: `{"type":"MODIFIED","object":{}}` + end, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := initialEvents(strings.NewReader(tc.stream))
			if (err != nil) != tc.wantErr {
				t.Fatalf("initialEvents() error = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("initialEvents() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestEncodeCheck(t *testing.T) {
	for _, tc := range []struct {
		name        string
		table, json num
		limit       float64
		wantRatio   num
		wantMet     bool
	}{
		{name: "Object feed within 5×", table: 50e-6, json: 20e-6, limit: 5, wantRatio: 2.5, wantMet: true},
		{name: "Object feed beyond 5×", table: 120e-6, json: 20e-6, limit: 5, wantRatio: 6},
		{name: "Metadata feed within 1.5×", table: 30e-6, json: 20e-6, limit: 1.5, wantRatio: 1.5, wantMet: true},
		{name: "Metadata feed beyond 1.5×", table: 31e-6, json: 20e-6, limit: 1.5, wantRatio: 1.55},
		{name: "JSON not measured", table: 30e-6, json: 0, limit: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := encodeCost{TablePerEvent: tc.table, JSONPerEvent: tc.json}
			c.encodeRatio()
			if !approx(tc.wantRatio, c.Ratio) {
				t.Errorf("encodeRatio() = %v, want %v", c.Ratio, tc.wantRatio)
			}
			if got := encodeCheck(c, tc.limit); got.Met != tc.wantMet {
				t.Errorf("encodeCheck() met = %t (%s), want %t", got.Met, got.Text, tc.wantMet)
			}
		})
	}
}

// A sole watch's cost is its phases' median less the base's, so that one
// phase a garbage collection fell in moves nothing.
func TestSoleSlope(t *testing.T) {
	base := &tableFeedPhase{APIServerCPUPerWriteByCycle: []float64{270e-6, 260e-6, 470e-6}}
	table := &tableFeedPhase{APIServerCPUPerWriteByCycle: []float64{410e-6, 360e-6, 380e-6}}
	json := &tableFeedPhase{APIServerCPUPerWriteByCycle: []float64{370e-6, 380e-6, 340e-6}}
	got := soleSlopeOf("Metadata", "configmaps", base, table, json)
	want := feedSlope{Feed: "Metadata", Resource: "configmaps", TableWatches: 1, JSONWatches: 1,
		TablePerChange: 110e-6, JSONPerChange: 100e-6, Ratio: 1.1}
	if diff := cmp.Diff(want, got, cmp.Comparer(approx)); diff != "" {
		t.Errorf("soleSlopeOf() (-want +got):\n%s", diff)
	}
	if c := feedSlopeCheck(got, 1.5); !c.Met {
		t.Errorf("feedSlopeCheck() met = false (%s), want true", c.Text)
	}
}
