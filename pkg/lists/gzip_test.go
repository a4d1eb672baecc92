package lists

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

func gunzipAll(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gzip header: %v", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr) // checks CRC-32 and size
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

// testItem returns an object of about size bytes; objects of one app are
// alike, as pods of one Deployment are.
func testItem(rng *rand.Rand, i, size int) []byte {
	app := []string{"api", "web", "worker"}[i/7%3]
	b := fmt.Appendf(nil, `{"metadata":{"name":"%s-%05d","namespace":"ns-%d","uid":"%08x","labels":{"app":%q}},"spec":{"nodeName":"node-%d","containers":[`,
		app, i, i/40, rng.Uint32(), app, rng.IntN(50))
	for len(b) < size {
		b = fmt.Appendf(b, `{"name":"%s","image":"registry.example.com/%s:v1.%d","env":[{"name":"X","value":"%x"}]},`, app, app, rng.IntN(5), rng.Uint32())
	}
	return append(b, `{}]}}`...)
}

func testEntries(rng *rand.Rand, n int) []*snapshot.Entry {
	entries := make([]*snapshot.Entry, n)
	for i := range entries {
		size := 300 + rng.IntN(3000)
		if i%97 == 50 {
			size = 40 << 10 // larger than the deflate window
		}
		entries[i] = &snapshot.Entry{Key: fmt.Sprintf("ns/%05d", i), Raw: testItem(rng, i, size)}
	}
	return entries
}

var gzipTestEnvelopes = []struct {
	name string
	f    wire.Format
	env  wire.ListEnvelope
}{
	{"json", wire.JSON, wire.EnvelopeFor(wire.JSON, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "12", Continue: "c", RemainingItemCount: new(int64(3))})},
	{"unstructured_json", wire.JSON, wire.EnvelopeFor(wire.JSON, schema.GroupVersionKind{Group: "demo.listproxy.io", Version: "v1", Kind: "WidgetList"}, true, wire.ListMeta{ResourceVersion: "12"})},
	{"protobuf", wire.Protobuf, wire.EnvelopeFor(wire.Protobuf, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "12"})},
	{"meta_json", wire.MetaJSON, wire.EnvelopeFor(wire.MetaJSON, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "12"})},
	{"meta_protobuf", wire.MetaProtobuf, wire.EnvelopeFor(wire.MetaProtobuf, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "12", Continue: "c"})},
}

// cacheAll and cacheNone are the gzip caches of a list of every entry and
// of a filtered one.
var cacheAll, cacheNone = snapshot.GzipCache{Build: true}, snapshot.GzipCache{}

// checkGzipList writes entries with writeGzipList and checks that the body
// decompresses to wire.WriteList's bytes.
func checkGzipList(t testing.TB, f wire.Format, env wire.ListEnvelope, entries []*snapshot.Entry, cache snapshot.GzipCache) {
	t.Helper()
	items := make([][]byte, len(entries))
	for i, e := range entries {
		items[i] = e.Raw
	}
	var want, got bytes.Buffer
	if err := wire.WriteList(&want, f, env, items); err != nil {
		t.Fatal(err)
	}
	parts, err := wire.SplitList(f, env, items)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeGzipList(&got, f, parts, entries, cache); err != nil {
		t.Fatal(err)
	}
	if plain := gunzipAll(t, got.Bytes()); !bytes.Equal(plain, want.Bytes()) {
		t.Fatalf("%d items (cache %+v): decompressed %d bytes differ from WriteList's %d", len(entries), cache, len(plain), want.Len())
	}
}

// cachedItems returns each entry's cached GzipItem.
func cachedItems(entries []*snapshot.Entry) []*snapshot.GzipItem {
	items := make([]*snapshot.GzipItem, len(entries))
	for i, e := range entries {
		items[i] = e.GzipCached(snapshot.GzipListItem)
	}
	return items
}

func TestWriteGzipList(t *testing.T) {
	for _, tc := range gzipTestEnvelopes {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{0, 1, 2, 3} {
				entries := testEntries(rand.New(rand.NewPCG(uint64(n), 1)), n)
				checkGzipList(t, tc.f, tc.env, entries, cacheAll)
				checkGzipList(t, tc.f, tc.env, entries, cacheAll)
				checkGzipList(t, tc.f, tc.env, entries, cacheNone)
			}

			rng := rand.New(rand.NewPCG(2, 3))
			entries := testEntries(rng, 300)
			// Cold: every chunk is built; warm: every chunk is reused.
			checkGzipList(t, tc.f, tc.env, entries, cacheAll)
			built := cachedItems(entries)
			if built[0] != nil {
				t.Errorf("the first item got a chunk; want it compressed per response")
			}
			for i, it := range built[1:] {
				if it == nil || it.Chunk.Len() == 0 {
					t.Fatalf("item %d has no chunk after a full list", i+1)
				}
			}
			checkGzipList(t, tc.f, tc.env, entries, cacheAll)
			for i, it := range cachedItems(entries) {
				if it != built[i] {
					t.Errorf("item %d: chunk rebuilt by an identical list", i)
				}
			}

			// A filtered list uses what fits and caches nothing.
			var filtered []*snapshot.Entry
			for i, e := range entries {
				if i%3 != 1 || (i > 100 && i < 120) {
					filtered = append(filtered, e)
				}
			}
			checkGzipList(t, tc.f, tc.env, filtered, cacheNone)
			for i, it := range cachedItems(entries) {
				if it != built[i] {
					t.Errorf("item %d: chunk changed by a filtered list", i)
				}
			}

			// A page in the middle: only its first items are recompressed.
			checkGzipList(t, tc.f, tc.env, entries[150:220], cacheAll)

			// Changes: replaced objects, a deletion, an insertion. Chunks
			// far from them stay; the full list is right again.
			changed := append([]*snapshot.Entry(nil), entries...)
			for _, i := range []int{5, 6, 120} {
				changed[i] = &snapshot.Entry{Key: changed[i].Key, Raw: testItem(rng, i+1000, 2000)}
			}
			changed = append(changed[:60], changed[61:]...)
			changed = append(changed[:200], append([]*snapshot.Entry{{Key: "ns/00199x", Raw: testItem(rng, 5000, 1500)}}, changed[200:]...)...)
			checkGzipList(t, tc.f, tc.env, changed, cacheAll)
			checkGzipList(t, tc.f, tc.env, changed, cacheAll)
			if it := entries[280].GzipCached(snapshot.GzipListItem); it != built[280] {
				t.Errorf("item 280, far from every change, was recompressed")
			}
			checkGzipList(t, tc.f, tc.env, entries, cacheAll) // the old snapshot still lists right
		})
	}
}

// TestWriteGzipListConcurrent lists overlapping shapes of the same entries
// at once: chunks are built and replaced under concurrent readers.
func TestWriteGzipListConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	entries := testEntries(rng, 200)
	other := append([]*snapshot.Entry(nil), entries...)
	for i := 10; i < len(other); i += 30 {
		other[i] = &snapshot.Entry{Key: other[i].Key, Raw: testItem(rng, i+2000, 1000)}
	}
	shapes := [][]*snapshot.Entry{entries, other, entries[50:], other[:150], entries[1:]}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 8 {
				shape := shapes[(g+i)%len(shapes)]
				checkGzipList(t, wire.JSON, gzipTestEnvelopes[0].env, shape, snapshot.GzipCache{Build: (g+i)%4 != 0})
			}
		})
	}
	wg.Wait()
}

// TestListsWriteGzip checks the negotiation in write: gzip only above the
// apiserver's threshold and only for clients that accept it.
func TestListsWriteGzip(t *testing.T) {
	env := gzipTestEnvelopes[0].env
	rng := rand.New(rand.NewPCG(6, 7))
	small := testEntries(rng, 20)
	large := testEntries(rng, 300)
	// Many small items whose bytes alone stay under the threshold while the
	// list around them (separators, envelope) exceeds it: the apiserver
	// decides on the body.
	var justOver []*snapshot.Entry
	for i, total := 0, 0; total+20 <= gzipThreshold; i++ {
		e := &snapshot.Entry{Key: fmt.Sprintf("ns/%05d", i), Raw: []byte(fmt.Sprintf(`{"n":"%012d"}`, i))}
		justOver = append(justOver, e)
		total += len(e.Raw)
	}
	for _, tc := range []struct {
		name           string
		entries        []*snapshot.Entry
		acceptEncoding string
		wantGzip       bool
	}{
		{name: "large_gzip", entries: large, acceptEncoding: "gzip", wantGzip: true},
		{name: "large_gzip_among_others", entries: large, acceptEncoding: "deflate, gzip", wantGzip: true},
		{name: "large_identity", entries: large},
		{name: "small_gzip", entries: small, acceptEncoding: "gzip"},
		{name: "items_under_body_over_threshold_gzip", entries: justOver, acceptEncoding: "gzip", wantGzip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := make([][]byte, len(tc.entries))
			for i, e := range tc.entries {
				items[i] = e.Raw
			}
			var want bytes.Buffer
			if err := wire.WriteList(&want, wire.JSON, env, items); err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
			if tc.acceptEncoding != "" {
				r.Header.Set("Accept-Encoding", tc.acceptEncoding)
			}
			rec := httptest.NewRecorder()
			(&Lists{}).write(rec, r, wire.JSON, env, tc.entries, snapshot.GzipCache{Build: true})
			body := rec.Body.Bytes()
			if gotGzip := rec.Header().Get("Content-Encoding") == "gzip"; gotGzip != tc.wantGzip {
				t.Fatalf("Content-Encoding %q, want gzip %v", rec.Header().Get("Content-Encoding"), tc.wantGzip)
			}
			if tc.wantGzip {
				body = gunzipAll(t, body)
			}
			if !bytes.Equal(body, want.Bytes()) {
				t.Errorf("body (%d bytes) differs from WriteList's (%d bytes)", len(body), want.Len())
			}
		})
	}
}

// TestWriteGzipListShardChunks: the lists of two shards (each a shard
// selector alone: every other entry) build chunks under their keys beside
// the whole collection's, so that after one list of each, the next lists
// of each compress nothing again, whichever went last; all decompress to
// the plain list.
func TestWriteGzipListShardChunks(t *testing.T) {
	f, env := gzipTestEnvelopes[0].f, gzipTestEnvelopes[0].env
	entries := testEntries(rand.New(rand.NewPCG(7, 8)), 200)
	var even, odd []*snapshot.Entry
	for i, e := range entries {
		if i%2 == 0 {
			even = append(even, e)
		} else {
			odd = append(odd, e)
		}
	}
	lists := []struct {
		name    string
		entries []*snapshot.Entry
		cache   snapshot.GzipCache
	}{
		{"whole", entries, snapshot.GzipCache{Build: true}},
		{"even", even, snapshot.GzipCache{Build: true, Key: snapshot.GzipKey("even")}},
		{"odd", odd, snapshot.GzipCache{Build: true, Key: snapshot.GzipKey("odd")}},
	}
	for _, l := range lists {
		checkGzipList(t, f, env, l.entries, l.cache)
	}
	built := cachedItems(entries)
	for _, l := range lists {
		checkGzipList(t, f, env, l.entries, l.cache)
		for i, it := range cachedItems(entries) {
			if it != built[i] {
				t.Fatalf("after the %s list: entry %d's chunks rebuilt; each list's chunks should be kept beside the others'", l.name, i)
			}
		}
	}
	// The whole collection and each entry's shard: two chunks per entry
	// but the first of each list.
	for i, it := range built {
		if i < 2 {
			continue
		}
		if it == nil || len(it.Others) != 1 {
			t.Fatalf("entry %d: %v; want a chunk for the whole list and one for its shard", i, it)
		}
	}
}
