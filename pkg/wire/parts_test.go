package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestSplitList checks that a list assembled from SplitList's parts and
// AppendItemPrefix is WriteList's, in every format, with 0, 1 and many items,
// and that WriteListParts and the sizes agree with it.
func TestSplitList(t *testing.T) {
	for _, file := range []string{"pods.json", "pods.pb", "pods-meta.json", "pods-meta.pb", "widgets.json"} {
		env, golden := decodeGolden(t, file)
		f := formatOf(file)
		for _, n := range []int{0, 1, 2, 50} {
			items := make([][]byte, n)
			for i := range items {
				items[i] = golden[i%len(golden)]
			}
			var want bytes.Buffer
			if err := WriteList(&want, f, env, items); err != nil {
				t.Fatalf("%s, %d items: WriteList: %v", file, n, err)
			}
			parts, err := SplitList(f, env, items)
			if err != nil {
				t.Fatalf("%s, %d items: SplitList: %v", file, n, err)
			}
			got := bytes.Clone(parts.Head)
			for i, it := range items {
				got = AppendItemPrefix(got, f, i == 0, it)
				got = append(got, it...)
			}
			got = append(got, parts.Tail...)
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("%s, %d items: assembled from parts\n got %q\nwant %q", file, n, got, want.Bytes())
			}
			if size := parts.Size(f, items); size != int64(want.Len()) {
				t.Errorf("%s, %d items: parts.Size = %d; want %d", file, n, size, want.Len())
			}
			var fromParts bytes.Buffer
			if err := WriteListParts(&fromParts, f, parts, items); err != nil || !bytes.Equal(fromParts.Bytes(), want.Bytes()) {
				t.Errorf("%s, %d items: WriteListParts = %v\n got %q\nwant %q", file, n, err, fromParts.Bytes(), want.Bytes())
			}
		}
	}
}

func TestSplitListErrors(t *testing.T) {
	if _, err := SplitList(Protobuf, ListEnvelope{Unstructured: true}, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unstructured protobuf: err = %v, want ErrUnsupported", err)
	}
	if _, err := SplitList(Format(9), ListEnvelope{}, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown format: err = %v, want ErrUnsupported", err)
	}
}
