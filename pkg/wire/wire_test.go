package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFormatHeaders(t *testing.T) {
	tests := []struct {
		f                        Format
		list, watch, ct, watchCT string
	}{
		{JSON, "application/json", "application/json", "application/json", "application/json"},
		{Protobuf, "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf;stream=watch"},
		{MetaJSON, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "application/json", "application/json"},
		{MetaProtobuf, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf;stream=watch"},
	}
	for _, tc := range tests {
		t.Run(tc.f.String(), func(t *testing.T) {
			got := []string{tc.f.ListAccept(), tc.f.WatchAccept(), tc.f.ContentType(), tc.f.WatchContentType()}
			if diff := cmp.Diff([]string{tc.list, tc.watch, tc.ct, tc.watchCT}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if Format(9).Valid() || Format(9).ListAccept() != "" {
		t.Error("Format(9) should be invalid")
	}
}

func TestDecodeListJSONErrors(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr error
	}{
		{"empty_body", "", ErrMalformed},
		{"status", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":410}`, ErrMalformed},
		{"truncated_item", `{"kind":"PodList","metadata":{},"items":[{"metadata":{`, io.ErrUnexpectedEOF},
		{"truncated_after_item", `{"kind":"PodList","metadata":{},"items":[{}`, io.ErrUnexpectedEOF},
		{"trailing_garbage", `{"kind":"PodList","metadata":{},"items":[]} x`, ErrMalformed},
		{"item_not_object", `{"kind":"PodList","metadata":{},"items":[1]}`, ErrMalformed},
		{"mismatched_brackets", `{"kind":"PodList","metadata":{},"items":[{"a":[}]]}`, ErrMalformed},
		{"items_string", `{"kind":"PodList","metadata":{},"items":"x"}`, ErrMalformed},
		{"bad_metadata", `{"kind":"PodList","metadata":{"resourceVersion":1},"items":[]}`, ErrMalformed},
		{"sharded", `{"kind":"PodList","metadata":{"shardInfo":{"selector":"x"}},"items":[]}`, ErrUnsupported},
		{"not_object", `[]`, ErrMalformed},
		{"missing_comma", `{"kind":"PodList" "items":[]}`, ErrMalformed},
		{"unterminated_string", `{"kind":"PodList","items":["abc`, io.ErrUnexpectedEOF},
		{"deep_nesting", `{"items":[` + strings.Repeat("[", maxDepth+1), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeList(JSON, strings.NewReader(tc.body), func([]byte) error { return nil })
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeListProtobufErrors(t *testing.T) {
	golden := readGolden(t, "pods-limit2.pb")
	tests := []struct {
		name    string
		body    []byte
		wantErr error
	}{
		{"empty_body", nil, ErrMalformed},
		{"no_prefix", golden[4:], ErrMalformed},
		{"truncated", golden[:len(golden)-10], ErrMalformed},
		{"gzip", appendUnknown(nil, "v1", "PodList", appendProtoListMeta(nil, ListMeta{}), "gzip"), ErrUnsupported},
		{"no_metadata", appendUnknown(nil, "v1", "PodList", nil, ""), ErrMalformed},
		{"sharded", appendUnknown(nil, "v1", "PodList", protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), nil)), ""), ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeList(Protobuf, bytes.NewReader(tc.body), func([]byte) error { return nil })
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// appendUnknown appends a complete "k8s\x00" Unknown envelope around raw.
func appendUnknown(dst []byte, apiVersion, kind string, raw []byte, contentEncoding string) []byte {
	dst = appendUnknownHeader(dst, apiVersion, kind, len(raw))
	dst = append(dst, raw...)
	dst = protowire.AppendTag(dst, 3, protowire.BytesType)
	dst = protowire.AppendString(dst, contentEncoding)
	dst = protowire.AppendTag(dst, 4, protowire.BytesType)
	return protowire.AppendString(dst, "")
}

func TestDecodeListCallbackError(t *testing.T) {
	stop := errors.New("stop")
	for _, file := range []string{"pods.json", "pods.pb"} {
		t.Run(file, func(t *testing.T) {
			n := 0
			_, err := DecodeList(formatOf(file), bytes.NewReader(readGolden(t, file)), func([]byte) error {
				n++
				return stop
			})
			if !errors.Is(err, stop) || n != 1 {
				t.Errorf("err = %v after %d items, want stop after 1", err, n)
			}
		})
	}
}

// TestJSONLargeItems checks items far larger than the read buffer, read in
// small chunks, round-trip exactly.
func TestJSONLargeItems(t *testing.T) {
	big := `{"metadata":{"name":"big"},"data":"` + strings.Repeat("x\\\"", 300_000) + `"}`
	items := [][]byte{[]byte(big), []byte(`{"metadata":{"name":"small"}}`), []byte(big)}
	env := ListEnvelope{APIVersion: "v1", Kind: "ConfigMapList", ListMeta: ListMeta{ResourceVersion: "7"}}
	var body bytes.Buffer
	if err := WriteList(&body, JSON, env, items); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	gotEnv, err := DecodeList(JSON, iotest.HalfReader(bytes.NewReader(body.Bytes())), func(raw []byte) error {
		got = append(got, bytes.Clone(raw))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(env, gotEnv); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(items, got); diff != "" {
		t.Errorf("items differ (-want +got):\n%.400s", diff)
	}
}

func TestWriteList(t *testing.T) {
	items := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}
	tests := []struct {
		name    string
		f       Format
		env     ListEnvelope
		items   [][]byte
		want    string
		wantErr error
	}{
		{"typed_empty_meta", JSON, ListEnvelope{Kind: "PodList", APIVersion: "v1"}, nil, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}` + "\n", nil},
		{"meta_empty_items_null", MetaJSON, ListEnvelope{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1", ListMeta: ListMeta{ResourceVersion: "5"}}, nil, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"5"},"items":null}` + "\n", nil},
		{"html_escaped_continue", JSON, ListEnvelope{Kind: "PodList", APIVersion: "v1", ListMeta: ListMeta{Continue: "<&>"}}, items, `{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"\u003c\u0026\u003e"},"items":[{"a":1},{"b":2}]}` + "\n", nil},
		{"unstructured_zero_count", JSON, ListEnvelope{Kind: "WL", APIVersion: "g/v1", Unstructured: true, ListMeta: ListMeta{ResourceVersion: "9", RemainingItemCount: ptr[int64](0)}}, items, `{"apiVersion":"g/v1","items":[{"a":1},{"b":2}],"kind":"WL","metadata":{"continue":"","remainingItemCount":0,"resourceVersion":"9"}}` + "\n", nil},
		{"unstructured_protobuf", Protobuf, ListEnvelope{Unstructured: true}, nil, "", ErrUnsupported},
		{"bad_format", Format(7), ListEnvelope{}, nil, "", ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := WriteList(&out, tc.f, tc.env, tc.items)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && out.String() != tc.want {
				t.Errorf("got  %s\nwant %s", out.String(), tc.want)
			}
		})
	}
}

// TestWriteListProtobufListMeta compares the hand-written ListMeta encoding,
// including multi-byte varints, with the generated marshaler.
func TestWriteListProtobufListMeta(t *testing.T) {
	for _, lm := range []ListMeta{{}, {ResourceVersion: "1", Continue: strings.Repeat("c", 300), RemainingItemCount: ptr[int64](1 << 40)}} {
		want, err := (&metav1.ListMeta{ResourceVersion: lm.ResourceVersion, Continue: lm.Continue, RemainingItemCount: lm.RemainingItemCount}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got := appendProtoListMeta(nil, lm); !bytes.Equal(got, want) {
			t.Errorf("ListMeta %+v:\n got %x\nwant %x", lm, got, want)
		}
	}
}

func TestStripTypeMeta(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        error
	}{
		{"builtin", `{"kind":"Pod","apiVersion":"v1","metadata":{"kind":"x"}}`, `{"metadata":{"kind":"x"}}`, nil},
		{"middle", `{"a":1,"kind":"Pod","b":{"apiVersion":"v"},"apiVersion":"v1"}`, `{"a":1,"b":{"apiVersion":"v"}}`, nil},
		{"only_typemeta", `{"kind":"Pod","apiVersion":"v1"}`, `{}`, nil},
		{"none", `{"metadata":{}}`, `{"metadata":{}}`, nil},
		{"escaped_key", `{"\u006bind":"Pod","x":1}`, `{"x":1}`, nil},
		{"garbage", `{"kind":`, "", ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stripTypeMeta([]byte(tc.in))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestWatchDecoderJSON(t *testing.T) {
	status := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (254)","reason":"Expired","code":410}`
	tests := []struct {
		name    string
		body    string
		opts    WatchOptions
		want    []Event
		wantErr error
	}{
		{
			name: "error_event_kept_whole",
			body: `{"type":"ERROR","object":` + status + "}\n",
			opts: WatchOptions{StripTypeMeta: true},
			want: []Event{{Type: Error, Object: []byte(status)}},
		},
		{
			name: "object_before_type",
			body: `{"object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"3"}},"type":"ADDED"}`,
			opts: WatchOptions{StripTypeMeta: true},
			want: []Event{{Type: Added, Object: []byte(`{"metadata":{"resourceVersion":"3"}}`), ResourceVersion: "3"}},
		},
		{
			name: "error_object_before_type",
			body: `{"object":` + status + `,"type":"ERROR"}`,
			opts: WatchOptions{StripTypeMeta: true},
			want: []Event{{Type: Error, Object: []byte(status)}},
		},
		{
			name: "no_newlines_and_spaces",
			body: ` {"type":"MODIFIED","object":{"metadata":{"resourceVersion":"4"}}}{"type":"BOOKMARK", "object":{"metadata":{"resourceVersion":"5"}}} `,
			want: []Event{
				{Type: Modified, Object: []byte(`{"metadata":{"resourceVersion":"4"}}`), ResourceVersion: "4"},
				{Type: Bookmark, Object: []byte(`{"metadata":{"resourceVersion":"5"}}`), ResourceVersion: "5"},
			},
		},
		{name: "empty", body: "", want: nil},
		{name: "unknown_type", body: `{"type":"FOO","object":{}}`, wantErr: ErrMalformed},
		{name: "missing_object", body: `{"type":"ADDED"}`, wantErr: ErrMalformed},
		{name: "object_not_object", body: `{"type":"ADDED","object":"x"}`, wantErr: ErrMalformed},
		{name: "truncated", body: `{"type":"ADDED","object":{"metadata":`, wantErr: io.ErrUnexpectedEOF},
		{name: "not_an_event", body: `[1]`, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewWatchDecoder(JSON, io.NopCloser(strings.NewReader(tc.body)), tc.opts)
			defer func() { _ = d.Close() }()
			var got []Event
			var err error
			for {
				var ev Event
				ev, err = d.Next()
				if err != nil {
					break
				}
				got = append(got, ev)
			}
			if tc.wantErr == nil && !errors.Is(err, io.EOF) {
				t.Fatalf("err = %v, want io.EOF", err)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if _, again := d.Next(); !errors.Is(again, err) {
					t.Errorf("error not sticky: %v then %v", err, again)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func protoFrame(eventType string, apiVersion, kind string, obj []byte) (hdr, ev []byte) {
	inner := appendUnknown(nil, apiVersion, kind, obj, "")
	var rawExt []byte
	rawExt = protowire.AppendTag(rawExt, 1, protowire.BytesType)
	rawExt = protowire.AppendBytes(rawExt, inner)
	ev = protowire.AppendTag(ev, 1, protowire.BytesType)
	ev = protowire.AppendString(ev, eventType)
	ev = protowire.AppendTag(ev, 2, protowire.BytesType)
	ev = protowire.AppendBytes(ev, rawExt)
	return binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev
}

func TestWatchDecoderProtobuf(t *testing.T) {
	status, err := (&metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410, Message: "too old"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	errFrame := frameOf(protoFrame("ERROR", "v1", "Status", status))
	// A frame wrapped in an Unknown (not what v1.36 sends) is accepted too.
	_, added := protoFrame("ADDED", "v1", "Pod", podWithRV("7"))
	wrapped := appendUnknown(nil, "v1", "WatchEvent", added, "")
	wrappedFrame := append(binary.BigEndian.AppendUint32(nil, uint32(len(wrapped))), wrapped...)

	tests := []struct {
		name    string
		body    []byte
		want    []Event
		wantErr error
	}{
		{"error_event", errFrame, []Event{{Type: Error, Object: status}}, nil},
		{"unknown_wrapped_frame", wrappedFrame, []Event{{Type: Added, Object: podWithRV("7"), ResourceVersion: "7"}}, nil},
		{"truncated_header", errFrame[:2], nil, io.ErrUnexpectedEOF},
		{"truncated_frame", errFrame[:len(errFrame)-1], nil, io.ErrUnexpectedEOF},
		{"huge_frame", []byte{0xff, 0xff, 0xff, 0xff}, nil, ErrMalformed},
		{"garbage_frame", []byte{0, 0, 0, 2, 0xff, 0xff}, nil, ErrMalformed},
		{"object_without_prefix", frameOf(func() ([]byte, []byte) {
			h, ev := protoFrame("ADDED", "v1", "Pod", nil)
			ev = bytes.Replace(ev, protoPrefix, []byte("k9s\x00"), 1)
			return h, ev
		}()), nil, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewWatchDecoder(Protobuf, io.NopCloser(bytes.NewReader(tc.body)), WatchOptions{})
			defer func() { _ = d.Close() }()
			var got []Event
			var err error
			for {
				var ev Event
				if ev, err = d.Next(); err != nil {
					break
				}
				got = append(got, ev)
			}
			if tc.wantErr == nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("err = %v, want io.EOF", err)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	st, err := DecodeStatus(Protobuf, status)
	if err != nil || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("DecodeStatus = %+v, %v", st, err)
	}
}

func frameOf(hdr, ev []byte) []byte { return append(hdr, ev...) }

// podWithRV is a protobuf Pod with only metadata.resourceVersion set.
func podWithRV(rv string) []byte {
	var om []byte
	om = protowire.AppendTag(om, 6, protowire.BytesType)
	om = protowire.AppendString(om, rv)
	var pod []byte
	pod = protowire.AppendTag(pod, 1, protowire.BytesType)
	return protowire.AppendBytes(pod, om)
}

func TestDecodeStatusJSON(t *testing.T) {
	st, err := DecodeStatus(JSON, []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410}`))
	if err != nil || st.Code != 410 {
		t.Errorf("DecodeStatus = %+v, %v", st, err)
	}
	if _, err := DecodeStatus(JSON, []byte(`{`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

// TestReaderErrorPropagates checks a transport error surfaces as itself.
func TestReaderErrorPropagates(t *testing.T) {
	boom := errors.New("connection reset")
	body := io.MultiReader(strings.NewReader(`{"kind":"PodList","items":[{"a":`), iotest.ErrReader(boom))
	if _, err := DecodeList(JSON, body, func([]byte) error { return nil }); !errors.Is(err, boom) {
		t.Errorf("DecodeList err = %v, want %v", err, boom)
	}
	d := NewWatchDecoder(JSON, io.NopCloser(io.MultiReader(strings.NewReader(`{"type":"ADDED"`), iotest.ErrReader(boom))), WatchOptions{})
	if _, err := d.Next(); !errors.Is(err, boom) {
		t.Errorf("Next err = %v, want %v", err, boom)
	}
}

func ExampleWriteList() {
	env := ListEnvelope{APIVersion: "v1", Kind: "PodList", ListMeta: ListMeta{ResourceVersion: "42"}}
	var out bytes.Buffer
	_ = WriteList(&out, JSON, env, [][]byte{[]byte(`{"metadata":{"name":"a"}}`)})
	fmt.Print(out.String())
	// Output: {"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a"}}]}
}

// writeRecorder keeps the whole output and every slice handed to Write.
type writeRecorder struct {
	out    bytes.Buffer
	writes [][]byte
}

func (w *writeRecorder) Write(b []byte) (int, error) {
	w.writes = append(w.writes, b)
	return w.out.Write(b)
}

// wroteInPlace reports whether some Write was handed memory of item itself
// rather than a copy.
func (w *writeRecorder) wroteInPlace(item []byte) bool {
	for _, b := range w.writes {
		if len(b) > 0 && &b[0] == &item[0] {
			return true
		}
	}
	return false
}

// TestWriteListPackedItems: items laid out by PackItems give the same bytes
// as items anywhere else; runs of them long enough are handed to the writer
// as they lie in memory. Mixed, repacked and wrongly packed items are
// written correctly too.
func TestWriteListPackedItems(t *testing.T) {
	big := func(n int, c byte) []byte { return []byte(`{"v":"` + strings.Repeat(string(c), n) + `"}`) }
	var items [][]byte
	for i := range 40 {
		items = append(items, big(4000+i*37, byte('a'+i%26)))
	}
	env := ListEnvelope{Kind: "PodList", APIVersion: "v1", ListMeta: ListMeta{ResourceVersion: "7"}}
	for _, f := range []Format{JSON, Protobuf, MetaJSON, MetaProtobuf} {
		mixed := append(append(PackItems(f, items[:20]), items[20]), PackItems(f, items[21:])...)
		other := Protobuf
		if f.IsProtobuf() {
			other = JSON
		}
		tests := []struct {
			name        string
			items       [][]byte
			inPlace     []int // indexes of items that must be written in place
			copiedFirst bool
		}{
			{"all_packed", PackItems(f, items), []int{0}, false},
			{"mixed", mixed, []int{0, 21}, false},
			{"packed_for_another_format", PackItems(other, items), nil, true},
			{"page_of_packed", PackItems(f, items)[5:30], []int{0}, false},
		}
		for _, tc := range tests {
			t.Run(f.String()+"/"+tc.name, func(t *testing.T) {
				var want bytes.Buffer
				if err := WriteList(&want, f, env, cloneItems(tc.items)); err != nil {
					t.Fatal(err)
				}
				var w writeRecorder
				if err := WriteList(&w, f, env, tc.items); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(w.out.Bytes(), want.Bytes()) {
					t.Fatalf("packed items written differently (%d bytes, want %d)", w.out.Len(), want.Len())
				}
				for _, i := range tc.inPlace {
					if !w.wroteInPlace(tc.items[i]) {
						t.Errorf("item %d was copied; want the run from it written in place", i)
					}
				}
				if tc.copiedFirst && w.wroteInPlace(tc.items[0]) {
					t.Errorf("items laid out for %v were written in place as %v", other, f)
				}
			})
		}
	}
}

// cloneItems copies every item into its own array.
func cloneItems(items [][]byte) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = bytes.Clone(it)
	}
	return out
}

func TestPackItemsKeepsBytes(t *testing.T) {
	items := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":22}`), []byte(`{"c":333}`)}
	for _, f := range []Format{JSON, Protobuf} {
		packed := PackItems(f, items)
		if diff := cmp.Diff(items, packed); diff != "" {
			t.Errorf("%v: packed items differ (-want +got):\n%s", f, diff)
		}
		run, n := laidOutRun(f, packed)
		var want bytes.Buffer
		if err := WriteList(&want, f, ListEnvelope{}, items); err != nil {
			t.Fatal(err)
		}
		if n != 3 || !bytes.Contains(want.Bytes(), run) {
			t.Errorf("%v: run of %d items %q is not in the list %q", f, n, run, want.Bytes())
		}
	}
}
