package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shardSelector is a shard selector as the apiserver echoes it in
// metadata.shardInfo.selector (its canonical form).
const shardSelector = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"

// A sharded list's metadata.shardInfo is written as the apiserver writes
// it: in JSON by encoding/json after remainingItemCount (the apiserver's
// typed list encoder), in protobuf as ListMeta field 5, compared here with
// the generated marshalers; and read back only by DecodeShardedList.
func TestShardInfoListMeta(t *testing.T) {
	lm := ListMeta{ResourceVersion: "12", Continue: "c", ShardSelector: shardSelector}
	v1meta := metav1.ListMeta{ResourceVersion: "12", Continue: "c", ShardInfo: &metav1.ShardInfo{Selector: shardSelector}}

	wantJSON, err := json.Marshal(&corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: v1meta, Items: []corev1.Pod{}})
	if err != nil {
		t.Fatal(err)
	}
	var gotJSON bytes.Buffer
	if err := WriteList(&gotJSON, JSON, ListEnvelope{Kind: "PodList", APIVersion: "v1", ListMeta: lm}, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(gotJSON.String(), "\n"); got != string(wantJSON) {
		t.Errorf("JSON list:\n got %s\nwant %s", got, wantJSON)
	}

	wantProto, err := v1meta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got := appendProtoListMeta(nil, lm); !bytes.Equal(got, wantProto) {
		t.Errorf("protobuf ListMeta:\n got %x\nwant %x", got, wantProto)
	}

	items := [][]byte{[]byte(`{"metadata":{"name":"a"}}`)}
	for _, f := range []Format{JSON, Protobuf} {
		var body bytes.Buffer
		if err := WriteList(&body, f, ListEnvelope{Kind: "PodList", APIVersion: "v1", ListMeta: lm}, items); err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeList(f, bytes.NewReader(body.Bytes()), func([]byte) error { return nil }); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v: DecodeList of a sharded list: err %v, want ErrUnsupported", f, err)
		}
		env, err := DecodeShardedList(f, bytes.NewReader(body.Bytes()), func([]byte) error { return nil })
		if err != nil {
			t.Fatalf("%v: DecodeShardedList: %v", f, err)
		}
		if diff := cmp.Diff(lm, env.ListMeta); diff != "" {
			t.Errorf("%v: ListMeta (-want +got):\n%s", f, diff)
		}
	}
}

// ObjectUID reads the uid ExtractMetaUID reads, from every representation
// of the golden lists (typed and custom JSON, protobuf, metadata).
func TestObjectUID(t *testing.T) {
	for _, file := range []string{"pods.json", "pods.pb", "pods-meta.json", "pods-meta.pb", "widgets.json", "widgets-meta.json", "widgets-meta.pb"} {
		t.Run(file, func(t *testing.T) {
			_, items := decodeGolden(t, file)
			for _, it := range items {
				m, want, err := ExtractMetaUID(formatOf(file), it)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ObjectUID(formatOf(file), it)
				if err != nil {
					t.Fatal(err)
				}
				if got != want || got == "" {
					t.Errorf("%s: ObjectUID %q, ExtractMetaUID %q", m.Name, got, want)
				}
			}
		})
	}
	for _, tc := range []struct{ name, in, want string }{
		{"no_metadata", `{"kind":"Pod"}`, ""},
		{"null_metadata", `{"metadata":null}`, ""},
		{"no_uid", `{"metadata":{"name":"a"}}`, ""},
		{"null_uid", `{"metadata":{"uid":null}}`, ""},
		{"after_metadata_unread", `{"metadata":{"uid":"u-1"},"spec":`, "u-1"},
	} {
		got, err := ObjectUID(JSON, []byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%s: ObjectUID(%s) = %q, %v; want %q", tc.name, tc.in, got, err, tc.want)
		}
	}
	if _, err := ObjectUID(JSON, []byte(`{"metadata":{"uid":`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated uid: err %v, want ErrMalformed", err)
	}
}
