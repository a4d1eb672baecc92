package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// benchItems is the number of list items in the benchmarks: a 10k-pod list,
// built from the captured pods.
const benchItems = 10_000

func benchList(b *testing.B, file string) (Format, ListEnvelope, [][]byte, []byte) {
	b.Helper()
	env, golden := decodeGolden(b, file)
	items := make([][]byte, benchItems)
	for i := range items {
		items[i] = golden[i%len(golden)]
	}
	var body bytes.Buffer
	if err := WriteList(&body, formatOf(file), env, items); err != nil {
		b.Fatal(err)
	}
	return formatOf(file), env, items, body.Bytes()
}

func BenchmarkDecodeList(b *testing.B) {
	for _, file := range []string{"pods.json", "pods.pb", "pods-meta.json"} {
		b.Run(file, func(b *testing.B) {
			f, _, _, body := benchList(b, file)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeList(f, bytes.NewReader(body), func([]byte) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWriteList(b *testing.B) {
	for _, file := range []string{"pods.json", "pods.pb", "widgets.json"} {
		b.Run(file, func(b *testing.B) {
			f, env, items, body := benchList(b, file)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := WriteList(io.Discard, f, env, items); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkExtractMeta(b *testing.B) {
	for _, file := range []string{"pods.json", "pods.pb", "widgets.json"} {
		b.Run(file, func(b *testing.B) {
			_, items := decodeGolden(b, file)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := ExtractMeta(formatOf(file), items[i%len(items)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkExtractFields(b *testing.B) {
	paths := []FieldPath{{Path: "spec.nodeName"}, {Path: "status.phase"}, {Path: "spec.hostNetwork", Bool: true}}
	for _, file := range []string{"pods.json", "pods.pb"} {
		b.Run(file, func(b *testing.B) {
			_, items := decodeGolden(b, file)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := ExtractFields(formatOf(file), podGVK, items[i%len(items)], paths); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWatchDecoder(b *testing.B) {
	for _, file := range []string{"watch-pods-initial.json", "watch-pods-initial.pb"} {
		b.Run(file, func(b *testing.B) {
			body := bytes.Repeat(readGolden(b, file), 1000)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				d := NewWatchDecoder(formatOf(file), io.NopCloser(bytes.NewReader(body)), WatchOptions{StripTypeMeta: true})
				for {
					if _, err := d.Next(); errors.Is(err, io.EOF) {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
