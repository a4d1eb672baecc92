package table

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkAppend500Pods writes a page of 500 pod rows, each with a
// Restarts and an Age clock cell and a PartialObjectMetadata of about
// 1.5 KB; ns/op is per page.
func BenchmarkAppend500Pods(b *testing.B) {
	rules := mustFor(37, gr("", "pods"))
	type stored struct {
		bytes []byte
		row   *Row
	}
	var rows []stored
	fields := strings.Repeat(`{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-03-01T11:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}}},`, 6)
	for i := range 500 {
		created := ts(-time.Duration(i) * time.Minute)
		meta := fmt.Sprintf(`{"name":"pod-%d","namespace":"default","uid":"0c7f8e2e-%08d","resourceVersion":"%d","creationTimestamp":"%s","labels":{"app":"web"},"managedFields":[%s]}`,
			i, i, 1000+i, created, strings.TrimSuffix(fields, ","))
		finished := ts(-time.Duration(i) * time.Second)
		object := podObject(meta, `{"containers":[{"name":"c"}]}`,
			`{"containerStatuses":[{"name":"c","restartCount":1,"lastState":{"terminated":{"exitCode":1,"finishedAt":"`+finished+`"}}}]}`)
		cells := []string{jsonCell(fmt.Sprintf("pod-%d", i)), `"1/1"`, `"Running"`, jsonCell("1 (" + ago(finished, received) + " ago)"),
			jsonCell(ago(created, received)), `"10.0.0.1"`, `"node-1"`, `"\u003cnone\u003e"`, `"\u003cnone\u003e"`}
		s, _, row, err := rules.Parse([]byte(makeRow(cells, object)), received)
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, stored{s, row})
	}
	dst := make([]byte, 0, 2<<20)
	now := received.Add(time.Minute)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dst = dst[:0]
		for _, r := range rows {
			dst = r.row.Append(dst, r.bytes, now, IncludeMetadata, "v1")
			dst = append(dst, ',')
		}
	}
	b.ReportMetric(float64(len(dst))/500, "bytes/row")
}
