package lists

import (
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// benchGzipPods is the number of pods in the gzip benchmarks: make bench's
// default cluster.
const benchGzipPods = 30_000

// benchPodEntries returns n pods as list items, shaped like make bench's
// (hack/bench/seed.go): the template is one of its pods as the apiserver
// lists it (managedFields, admission defaults), and names, hashes, UIDs,
// versions, checksums and nodes vary the same way. Sorted by key.
func benchPodEntries(b *testing.B, n int) []*snapshot.Entry {
	b.Helper()
	tmpl, err := os.ReadFile("testdata/bench-pod.json.tmpl")
	if err != nil {
		b.Fatal(err)
	}
	teams := []string{"checkout", "payments", "catalog", "search", "recommendations", "cart", "shipping", "inventory", "accounts", "notifications", "analytics", "ingest", "reporting", "auth", "gateway", "media", "reviews", "pricing", "fraud", "support", "billing", "ledger", "identity", "messaging", "ads"}
	components := []string{"api", "web", "worker", "consumer", "scheduler", "grpc", "admin", "indexer", "cache", "sync", "export", "webhook"}
	const alphabet, hex = "bcdfghjklmnpqrstvwxz2456789", "0123456789abcdef"
	rng := rand.New(rand.NewPCG(7, 11))
	random := func(chars string, n int) string {
		s := make([]byte, n)
		for i := range s {
			s[i] = chars[rng.IntN(len(chars))]
		}
		return string(s)
	}
	uid := func() string {
		return random(hex, 8) + "-" + random(hex, 4) + "-4" + random(hex, 3) + "-a" + random(hex, 3) + "-" + random(hex, 12)
	}
	hashes := map[string]string{}
	entries := make([]*snapshot.Entry, n)
	for i := range entries {
		team, env := teams[i%50%len(teams)], []string{"prod", "staging"}[i%50/len(teams)]
		ns, app := team+"-"+env, components[i/50%len(components)]
		if hashes[ns+app] == "" {
			hashes[ns+app] = random(alphabet, 10)
		}
		hash := hashes[ns+app]
		suffix := ""
		for k, j := 0, i; k < 5; k, j = k+1, j/len(alphabet) {
			suffix += string(alphabet[j%len(alphabet)])
		}
		name := app + "-" + hash + "-" + suffix
		node := rng.IntN(500)
		raw := strings.NewReplacer("$NAME", name, "$NS", ns, "$UID", uid(), "$RV", fmt.Sprint(1000+i), "$TIME", "2026-11-22T06:34:49Z",
			"$FULL", team+"-"+app, "$APP", app, "$HASH", hash, "$VERSION", fmt.Sprintf("v2.%d.%d", rng.IntN(40), rng.IntN(10)),
			"$CHECKSUM", random(hex, 64), "$OWNERUID", uid(), "$VOL", random(alphabet, 5),
			"$NODE", fmt.Sprintf("ip-10-20-%d-%d.eu-west-1.compute.internal", node/250, 10+node%250), "$ENV", env, "$TEAM", team).Replace(string(tmpl))
		entries[i] = &snapshot.Entry{Key: ns + "/" + name, Raw: []byte(raw)}
	}
	slices.SortFunc(entries, func(a, b *snapshot.Entry) int { return strings.Compare(a.Key, b.Key) })
	return entries
}

// fresh returns new entries with the same bytes and no cached chunks.
func fresh(entries []*snapshot.Entry) []*snapshot.Entry {
	out := make([]*snapshot.Entry, len(entries))
	for i, e := range entries {
		out[i] = &snapshot.Entry{Key: e.Key, Raw: e.Raw}
	}
	return out
}

// counter counts the bytes written to it.
type counter int64

func (c *counter) Write(p []byte) (int, error) {
	*c += counter(len(p))
	return len(p), nil
}

// cpuTime is the process's user plus system CPU time: on a shared machine
// it varies less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs fn b.N times and reports CPU time and bytes written per run,
// and the extra metrics (b.Loop drops metrics reported before it).
func loop(b *testing.B, fn func(w io.Writer) error, extra ...metric) {
	b.ReportAllocs()
	var out counter
	start := cpuTime()
	for b.Loop() {
		out = 0
		if err := fn(&out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
	b.ReportMetric(float64(out)/1e6, "MB")
	for _, m := range extra {
		b.ReportMetric(m.value, m.unit)
	}
}

type metric struct {
	value float64
	unit  string
}

// BenchmarkGzipList compares a full LIST of 30,000 bench pods (JSON, gzip)
// as listproxy wrote it before stitched gzip (whole body at level 1, as the
// apiserver) with stitched chunks, cold (every chunk built) and warm.
func BenchmarkGzipList(b *testing.B) {
	entries := benchPodEntries(b, benchGzipPods)
	items := make([][]byte, len(entries))
	for i, e := range entries {
		items[i] = e.Raw
	}
	env := wire.EnvelopeFor(wire.JSON, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "123456"})
	parts, err := wire.SplitList(wire.JSON, env, items)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("identity", func(b *testing.B) {
		loop(b, func(w io.Writer) error { return wire.WriteList(w, wire.JSON, env, items) })
	})
	b.Run("whole_level1", func(b *testing.B) {
		loop(b, func(w io.Writer) error {
			gw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
			if err := wire.WriteList(gw, wire.JSON, env, items); err != nil {
				return err
			}
			return gw.Close()
		})
	})
	b.Run("stitched_cold", func(b *testing.B) {
		loop(b, func(w io.Writer) error {
			b.StopTimer()
			cold := fresh(entries)
			b.StartTimer()
			return writeGzipList(w, wire.JSON, parts, cold, snapshot.GzipCache{Build: true})
		})
	})
	b.Run("stitched_uncached", func(b *testing.B) {
		// A filtered list of items without chunks: level 1 per response.
		loop(b, func(w io.Writer) error {
			return writeGzipList(w, wire.JSON, parts, fresh(entries), snapshot.GzipCache{})
		})
	})
	b.Run("stitched_warm", func(b *testing.B) {
		warm := fresh(entries)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := writeGzipList(io.Discard, wire.JSON, parts, warm, snapshot.GzipCache{Build: true}); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		chunkBytes := 0
		for _, e := range warm {
			if it := e.GzipCached(snapshot.GzipListItem); it != nil {
				chunkBytes += it.Chunk.Len()
			}
		}
		loop(b, func(w io.Writer) error {
			return writeGzipList(w, wire.JSON, parts, warm, snapshot.GzipCache{Build: true})
		},
			metric{float64(after.HeapAlloc-before.HeapAlloc) / float64(len(warm)), "heap-B/entry"},
			metric{float64(chunkBytes) / float64(len(warm)), "chunk-B/entry"})
		runtime.KeepAlive(warm)
	})
}

// BenchmarkGzipChunkLevels builds (cold) and serves (warm) the full list of
// BenchmarkGzipList with chunks at each compression level.
func BenchmarkGzipChunkLevels(b *testing.B) {
	entries := benchPodEntries(b, benchGzipPods)
	items := make([][]byte, len(entries))
	for i, e := range entries {
		items[i] = e.Raw
	}
	env := wire.EnvelopeFor(wire.JSON, schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, false, wire.ListMeta{ResourceVersion: "123456"})
	write := func(w io.Writer, c *gzstitch.Compressor, list []*snapshot.Entry) error {
		parts, err := wire.SplitList(wire.JSON, env, items)
		if err != nil {
			return err
		}
		zw := gzstitch.NewWriter(w)
		err = writeGzipItems(zw, c, wire.JSON, parts, list, snapshot.GzipCache{Build: true})
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		return err
	}
	for _, level := range []int{1, 2, 4, 5, 6, 9} {
		c, err := gzstitch.NewCompressor(level)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("level=%d/cold", level), func(b *testing.B) {
			loop(b, func(w io.Writer) error {
				b.StopTimer()
				cold := fresh(entries)
				b.StartTimer()
				return write(w, c, cold)
			})
		})
		b.Run(fmt.Sprintf("level=%d/warm", level), func(b *testing.B) {
			warm := fresh(entries)
			if err := write(io.Discard, c, warm); err != nil {
				b.Fatal(err)
			}
			loop(b, func(w io.Writer) error { return write(w, c, warm) })
		})
	}
}
