package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"testing"
	"time"
)

// podRow is a pod's Table row as the apiserver writes it, with its
// RESTARTS and AGE cells.
func podRow(name, restarts, age string) json.RawMessage {
	return json.RawMessage(`{"cells":["` + name + `","0/2","Pending",` + restarts + `,"` + age + `","","ip-10-20-0-10","\u003cnone\u003e","\u003cnone\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"` + name + `"}}}`)
}

func TestCompareTables(t *testing.T) {
	want := tableView{apiVersion: "meta.k8s.io/v1", cont: "next", columns: json.RawMessage(`[{"name":"Name"}]`),
		rows: []json.RawMessage{podRow("a", "0", "5m10s"), podRow("b", "0", "5m11s")}}
	for _, tc := range []struct {
		name    string
		got     func(v tableView) tableView
		exact   bool
		wantErr bool
	}{
		{name: "equal, exact", got: func(v tableView) tableView { return v }, exact: true},
		{name: "equal, masked", got: func(v tableView) tableView { return v }},
		{name: "age differs, masked", got: func(v tableView) tableView {
			v.rows = []json.RawMessage{podRow("a", "0", "5m11s"), podRow("b", "0", "5m12s")}
			return v
		}},
		{name: "age differs, exact", got: func(v tableView) tableView {
			v.rows = []json.RawMessage{podRow("a", "0", "5m11s"), podRow("b", "0", "5m11s")}
			return v
		}, exact: true, wantErr: true},
		{name: "restarts differ, masked", got: func(v tableView) tableView {
			v.rows = []json.RawMessage{podRow("a", `"1 (3s ago)"`, "5m10s"), podRow("b", "0", "5m11s")}
			return v
		}},
		{name: "name differs, masked", got: func(v tableView) tableView {
			v.rows = []json.RawMessage{podRow("a", "0", "5m10s"), podRow("c", "0", "5m11s")}
			return v
		}, wantErr: true},
		{name: "a row missing", got: func(v tableView) tableView {
			v.rows = v.rows[:1]
			return v
		}, wantErr: true},
		{name: "no continue", got: func(v tableView) tableView {
			v.cont = ""
			return v
		}, wantErr: true},
		{name: "other token, same presence", got: func(v tableView) tableView {
			v.cont = "listproxy's"
			return v
		}, exact: true},
		{name: "columns differ", got: func(v tableView) tableView {
			v.columns = json.RawMessage(`[{"name":"NAME"}]`)
			return v
		}, wantErr: true},
		{name: "remainingItemCount differs", got: func(v tableView) tableView {
			n := int64(3)
			v.remaining = &n
			return v
		}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compareTables("/api/v1/pods", want, tc.got(want), tc.exact)
			if (err != nil) != tc.wantErr {
				t.Errorf("compareTables() = %v, want error %t", err, tc.wantErr)
			}
		})
	}
}

func TestSameSecond(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		a, b result
		want bool
	}{
		{name: "both within one second", a: result{at: at("2026-11-27T10:00:00.100Z"), dur: 200 * time.Millisecond},
			b: result{at: at("2026-11-27T10:00:00.400Z"), dur: 500 * time.Millisecond}, want: true},
		{name: "the second answer ends in the next second", a: result{at: at("2026-11-27T10:00:00.100Z"), dur: 200 * time.Millisecond},
			b: result{at: at("2026-11-27T10:00:00.400Z"), dur: 700 * time.Millisecond}},
		{name: "the first answer straddles a second", a: result{at: at("2026-11-27T10:00:00.900Z"), dur: 200 * time.Millisecond},
			b: result{at: at("2026-11-27T10:00:01.200Z"), dur: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameSecond(tc.a, tc.b); got != tc.want {
				t.Errorf("sameSecond() = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestTableContinue(t *testing.T) {
	body := []byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"12","continue":"abc","remainingItemCount":5},"columnDefinitions":[],"rows":[` + string(podRow("a", "0", "1m")) + `]}`)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	if _, err := zw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		res  result
		want string
	}{
		{name: "plain", res: result{body: body}, want: "abc"},
		{name: "gzipped", res: result{body: zipped.Bytes(), gzipped: true}, want: "abc"},
		{name: "last page", res: result{body: []byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"12"},"columnDefinitions":[],"rows":[]}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tableContinue(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("tableContinue() = %q, want %q", got, tc.want)
			}
			v, err := decodeTable(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if v.cont != tc.want {
				t.Errorf("decodeTable().cont = %q, want %q", v.cont, tc.want)
			}
		})
	}
}
