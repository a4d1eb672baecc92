package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	podType    = ObjectType{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}}
	widgetType = ObjectType{GVK: schema.GroupVersionKind{Group: "demo.listproxy.io", Version: "v1", Kind: "Widget"}, Custom: true}
)

// TestWatchEventGolden re-encodes every captured watch stream from its
// decoded events (bookmarks from BookmarkItem) and expects the apiserver's
// bytes.
func TestWatchEventGolden(t *testing.T) {
	tests := []struct {
		file string
		typ  ObjectType
		opts WatchOptions
	}{
		{"watch-pods-initial.json", podType, WatchOptions{StripTypeMeta: true}},
		{"watch-pods-initial.pb", podType, WatchOptions{}},
		{"watch-pods-initial-meta.json", podType, WatchOptions{}},
		{"watch-pods-initial-meta.pb", podType, WatchOptions{}},
		{"watch-pods.json", podType, WatchOptions{StripTypeMeta: true}},
		{"watch-pods.pb", podType, WatchOptions{}},
		{"watch-pods-meta.json", podType, WatchOptions{}},
		{"watch-widgets-initial.json", widgetType, WatchOptions{}},
		{"watch-widgets-initial-meta.json", widgetType, WatchOptions{}},
		{"watch-widgets-initial-meta.pb", widgetType, WatchOptions{}},
		{"watch-widgets.json", widgetType, WatchOptions{}},
		{"watch-widgets-meta.pb", widgetType, WatchOptions{}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f := formatOf(tc.file)
			golden := readGolden(t, tc.file)
			evs, _ := readEvents(t, f, golden, tc.opts, func(r io.Reader) io.Reader { return r })
			var out []byte
			bookmarks := 0
			for i, ev := range evs {
				item := ev.Object
				if ev.Type == Bookmark {
					bookmarks++
					b, err := BookmarkItem(f, tc.typ, ev.ResourceVersion, ev.InitialEventsEnd)
					if err != nil {
						t.Fatalf("BookmarkItem: %v", err)
					}
					if !bytes.Equal(b, item) {
						t.Errorf("event %d: bookmark\n got: %q\nwant: %q", i, b, item)
					}
					item = b
				}
				out = AppendWatchEvent(out, f, ev.Type, tc.typ, item)
			}
			if bookmarks == 0 {
				t.Errorf("no bookmark in %s", tc.file)
			}
			if !bytes.Equal(out, golden) {
				t.Errorf("re-encoded stream differs from the apiserver's\n got: %q\nwant: %q", out, golden)
			}
		})
	}
}

// TestSetResourceVersion compares the byte-wise rewrite with decoding,
// setting and re-encoding through the compiled-in types.
func TestSetResourceVersion(t *testing.T) {
	tests := []struct {
		file string
		opts WatchOptions
	}{
		{"watch-pods.json", WatchOptions{StripTypeMeta: true}},
		{"watch-pods.pb", WatchOptions{}},
		{"watch-pods-meta.json", WatchOptions{}},
		{"watch-widgets-meta.pb", WatchOptions{}},
		{"watch-widgets.json", WatchOptions{}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f := formatOf(tc.file)
			evs, _ := readEvents(t, f, readGolden(t, tc.file), tc.opts, func(r io.Reader) io.Reader { return r })
			n := 0
			for _, ev := range evs {
				if ev.Type == Bookmark {
					continue
				}
				for _, rv := range []string{"1", "99999999999"} {
					got, err := SetResourceVersion(f, ev.Object, rv)
					if err != nil {
						t.Fatalf("SetResourceVersion: %v", err)
					}
					want := reencodeWithRV(t, f, tc.file, ev.Object, rv)
					if !bytes.Equal(got, want) {
						t.Errorf("rv %q:\n got: %q\nwant: %q", rv, got, want)
					}
					n++
				}
			}
			if n == 0 {
				t.Fatal("no objects")
			}
		})
	}
}

func reencodeWithRV(t *testing.T, f Format, file string, item []byte, rv string) []byte {
	t.Helper()
	var (
		out []byte
		err error
	)
	switch {
	case f == MetaProtobuf:
		obj := &metav1.PartialObjectMetadata{}
		if err := obj.Unmarshal(item); err != nil {
			t.Fatal(err)
		}
		obj.ResourceVersion = rv
		out, err = obj.Marshal()
	case f == Protobuf:
		obj := &corev1.Pod{}
		if err := obj.Unmarshal(item); err != nil {
			t.Fatal(err)
		}
		obj.ResourceVersion = rv
		out, err = obj.Marshal()
	case f == MetaJSON:
		obj := &metav1.PartialObjectMetadata{}
		if err := json.Unmarshal(item, obj); err != nil {
			t.Fatal(err)
		}
		obj.ResourceVersion = rv
		out, err = json.Marshal(obj)
	case bytes.Contains([]byte(file), []byte("widgets")):
		var obj map[string]any
		if err := json.Unmarshal(item, &obj); err != nil {
			t.Fatal(err)
		}
		obj["metadata"].(map[string]any)["resourceVersion"] = rv
		out, err = json.Marshal(obj)
	default:
		obj := &corev1.Pod{}
		if err := json.Unmarshal(item, obj); err != nil {
			t.Fatal(err)
		}
		obj.ResourceVersion = rv
		out, err = json.Marshal(obj)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAppendErrorEvent: an ERROR event carries a v1 Status in every format,
// as the apiserver's errWatcher sends it.
func TestAppendErrorEvent(t *testing.T) {
	status := &metav1.Status{
		Status: metav1.StatusFailure, Code: 504, Reason: metav1.StatusReasonTimeout,
		Message: "Too large resource version: 99, current: 10",
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1, Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}},
	}
	wantJSON := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too large resource version: 99, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}}` + "\n"
	for _, f := range Formats {
		t.Run(f.String(), func(t *testing.T) {
			b, err := AppendErrorEvent(nil, f, status)
			if err != nil {
				t.Fatal(err)
			}
			if !f.IsProtobuf() && string(b) != wantJSON {
				t.Errorf("got  %s\nwant %s", b, wantJSON)
			}
			d := NewWatchDecoder(f, io.NopCloser(bytes.NewReader(b)), WatchOptions{})
			ev, err := d.Next()
			if err != nil || ev.Type != Error {
				t.Fatalf("decode: %v %v", ev.Type, err)
			}
			got, err := DecodeStatus(f, ev.Object)
			if err != nil {
				t.Fatal(err)
			}
			if got.Message != status.Message || got.Code != 504 || got.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
				t.Errorf("decoded %+v", got)
			}
			if f.IsProtobuf() && !bytes.Contains(b, []byte("\x12\x02v1\x1a\x06Status")) && !bytes.Contains(b, []byte("\n\x02v1\x12\x06Status")) {
				t.Errorf("protobuf envelope is not v1 Status: %q", b)
			}
		})
	}
}
