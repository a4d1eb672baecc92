package lists

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// benchTableRows returns the rows of kubectl get pods for n bench pods
// (benchPodEntries) received age after they were created: the pod
// printer's cells, AGE the one clock cell, and the pod's metadata as the
// object.
func benchTableRows(b *testing.B, n int, age time.Duration) ([]*stores.TableRow, []*snapshot.Entry) {
	b.Helper()
	str := table.Column{Type: "string"}
	rules, ok := table.ForCustom([]table.Column{str, str, str, {Type: "date", JSONPath: ".metadata.creationTimestamp"}, str, str, str, str})
	if !ok {
		b.Fatal("no rules")
	}
	pods := benchPodEntries(b, n)
	rows := make([]*stores.TableRow, n)
	entries := make([]*snapshot.Entry, n)
	for i, p := range pods {
		var pod struct {
			Metadata struct {
				CreationTimestamp time.Time `json:"creationTimestamp"`
			} `json:"metadata"`
		}
		var raw struct {
			Metadata json.RawMessage `json:"metadata"`
		}
		if err := json.Unmarshal(p.Raw, &pod); err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(p.Raw, &raw); err != nil {
			b.Fatal(err)
		}
		received := pod.Metadata.CreationTimestamp.Add(age)
		row := fmt.Sprintf(`{"cells":[%q,"2/2","Running","0",%q,"10.20.%d.%d","node-%d","\u003cnone\u003e","\u003cnone\u003e"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":%s}}`,
			p.Name(), duration.HumanDuration(age), i/250, i%250, i%500, raw.Metadata)
		rows[i], entries[i] = parseTableRow(b, rules, row, received)
		entries[i].Key = p.Key
	}
	return rows, entries
}

// discardResponse is an http.ResponseWriter that counts the body's bytes.
type discardResponse struct {
	h http.Header
	n counter
}

func (d *discardResponse) Header() http.Header         { return d.h }
func (d *discardResponse) Write(p []byte) (int, error) { return d.n.Write(p) }
func (d *discardResponse) WriteHeader(int)             {}

// BenchmarkGzipTable writes a walk's page of Table rows (500 bench pods,
// 0.9 MB) gzipped, as kubectl get asks for it: per response at level 1 as
// the apiserver does (as listproxy did before row chunks, and still does
// for a filtered page), and stitched from row chunks, warm (every chunk
// cached) and cold (every chunk compressed). Pods 7m30s old render AGE
// in three lengths a minute; pods 400 days old in one for a day.
// cpu-ms/op is per page.
func BenchmarkGzipTable(b *testing.B) {
	const n = 500
	opts := collection.TableOptions{GroupVersion: "v1", Include: table.IncludeMetadata}
	parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: "v1", ListMeta: wire.ListMeta{ResourceVersion: "123456", Continue: "token"}, Columns: []byte(`[{"name":"Name"}]`)}, n)
	if err != nil {
		b.Fatal(err)
	}
	for _, age := range []time.Duration{7*time.Minute + 30*time.Second, 400 * 24 * time.Hour} {
		rows, entries := benchTableRows(b, n, age)
		var created time.Time
		// The rows' creation, from any row's age at the instant it was received.
		var meta struct {
			Metadata struct {
				CreationTimestamp time.Time `json:"creationTimestamp"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(benchPodEntries(b, 1)[0].Raw, &meta); err != nil {
			b.Fatal(err)
		}
		created = meta.Metadata.CreationTimestamp
		now := created.Add(age + 300*time.Millisecond)
		name := duration.HumanDuration(age)
		b.Run(name+"/per response", func(b *testing.B) {
			r, _ := http.NewRequest(http.MethodGet, "/api/v1/pods", nil)
			r.Header.Set("Accept-Encoding", "gzip")
			loop(b, func(w io.Writer) error {
				d := &discardResponse{h: http.Header{}}
				writeTable(d, r, opts, parts, rows, entries, now, false)
				_, err := w.Write(make([]byte, d.n))
				return err
			})
		})
		b.Run(name+"/stitched, warm", func(b *testing.B) {
			if err := writeGzipTable(io.Discard, opts, parts, rows, entries, now); err != nil {
				b.Fatal(err)
			}
			loop(b, func(w io.Writer) error { return writeGzipTable(w, opts, parts, rows, entries, now) })
		})
		b.Run(name+"/stitched, cold", func(b *testing.B) {
			loop(b, func(w io.Writer) error { return writeGzipTable(w, opts, parts, rows, fresh(entries), now) })
		})
	}
}
