package wire

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addGoldenSeeds adds the captured bodies whose names match suffix.
func addGoldenSeeds(f *testing.F, match func(name string) bool, add func(b []byte, format Format)) {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !match(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		add(b, formatOf(e.Name()))
	}
}

// FuzzDecodeList checks DecodeList never panics, and that whatever it
// accepts survives WriteList and a second DecodeList unchanged.
func FuzzDecodeList(f *testing.F) {
	addGoldenSeeds(f, func(n string) bool {
		return !strings.HasPrefix(n, "watch-") && !strings.HasSuffix(n, ".txt") && !strings.HasSuffix(n, ".md")
	},
		func(b []byte, format Format) { f.Add(b, uint8(format)) })
	f.Fuzz(func(t *testing.T, body []byte, format uint8) {
		fm := Format(format % 4)
		decode := func(b []byte) (ListEnvelope, [][]byte, error) {
			var items [][]byte
			env, err := DecodeList(fm, bytes.NewReader(b), func(raw []byte) error {
				items = append(items, bytes.Clone(raw))
				return nil
			})
			return env, items, err
		}
		env, items, err := decode(body)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteList(&out, fm, env, items); err != nil {
			t.Fatalf("WriteList of a decoded list: %v", err)
		}
		env2, items2, err := decode(out.Bytes())
		if err != nil {
			t.Fatalf("DecodeList of WriteList output: %v\n%q", err, out.Bytes())
		}
		if diff := cmp.Diff(env, env2); diff != "" {
			t.Errorf("envelope changed (-first +second):\n%s", diff)
		}
		if len(items) != len(items2) {
			t.Fatalf("%d items became %d", len(items), len(items2))
		}
		for i := range items {
			if !bytes.Equal(items[i], items2[i]) {
				t.Errorf("item %d changed: %q -> %q", i, items[i], items2[i])
			}
		}
	})
}

func drainWatch(t *testing.T, fm Format, body []byte, opts WatchOptions) {
	d := NewWatchDecoder(fm, io.NopCloser(bytes.NewReader(body)), opts)
	defer func() { _ = d.Close() }()
	for range len(body) + 1 {
		ev, err := d.Next()
		if err != nil {
			return
		}
		if !ev.Type.valid() || ev.Object == nil {
			t.Fatalf("invalid event %+v", ev)
		}
		if _, err := ExtractMeta(fm, ev.Object); err != nil && ev.Type != Error {
			t.Fatalf("event object unreadable: %v", err)
		}
	}
	t.Fatal("decoder did not end")
}

// FuzzWatchDecoderJSON checks the JSON watch decoder never panics or loops,
// and that the objects it returns are readable.
func FuzzWatchDecoderJSON(f *testing.F) {
	addGoldenSeeds(f, func(n string) bool { return strings.HasPrefix(n, "watch-") && strings.HasSuffix(n, ".json") },
		func(b []byte, _ Format) { f.Add(b, true) })
	f.Fuzz(func(t *testing.T, body []byte, strip bool) {
		drainWatch(t, JSON, body, WatchOptions{StripTypeMeta: strip})
	})
}

// FuzzWatchDecoderProtobuf is FuzzWatchDecoderJSON for protobuf frames.
func FuzzWatchDecoderProtobuf(f *testing.F) {
	addGoldenSeeds(f, func(n string) bool { return strings.HasPrefix(n, "watch-") && strings.HasSuffix(n, ".pb") },
		func(b []byte, _ Format) { f.Add(b) })
	f.Fuzz(func(t *testing.T, body []byte) {
		drainWatch(t, Protobuf, body, WatchOptions{})
	})
}
