package paging

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestIsListproxyToken(t *testing.T) {
	k := mustKeyring(t, 1)
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "empty", in: "", want: false},
		{name: "prefix_only", in: TokenPrefix, want: false},
		{name: "sealed", in: mustSeal(t, k, sampleToken()), want: true},
		{name: "native_namespaced", in: NativeContinue(123, "ns/name"), want: false},
		{name: "native_latest", in: NativeContinueLatest("name"), want: false},
		// base64url of {"v":"meta.k8s.io/v1","rv":123,"start":"ns/name\u0000"}
		{name: "native_literal", in: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzLCJzdGFydCI6Im5zL25hbWVcdTAwMDAifQ", want: false},
		{name: "other_version", in: "lp2.AAAA", want: false},
		{name: "upper_case_prefix", in: "LP1.AAAA", want: false},
		{name: "garbage_with_prefix", in: "lp1.!!", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsListproxyToken(tc.in); got != tc.want {
				t.Errorf("IsListproxyToken(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestSelectorDigest(t *testing.T) {
	const shard = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	base := SelectorDigest("app=web", "", "")
	sharded := SelectorDigest("app=web", "", shard)
	tests := []struct {
		name                string
		label, field, shard string
		want                [32]byte
		wantSame            bool
	}{
		{name: "same_input", label: "app=web", want: base, wantSame: true},
		{name: "label_in_field", field: "app=web", want: base},
		{name: "shifted_boundary", label: "app=we", field: "b", want: base},
		{name: "other_label", label: "app=db", want: base},
		{name: "empty", want: base},
		{name: "shard_added", label: "app=web", shard: shard, want: base},
		{name: "same_shard", label: "app=web", shard: shard, want: sharded, wantSame: true},
		{name: "other_shard", label: "app=web", shard: "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')", want: sharded},
		{name: "shard_in_field", field: shard, want: SelectorDigest("", "", shard)},
		{name: "shard_in_label", label: shard, want: SelectorDigest("", "", shard)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SelectorDigest(tc.label, tc.field, tc.shard) == tc.want; got != tc.wantSame {
				t.Errorf("SelectorDigest(%q, %q, %q) equal: %v, want %v", tc.label, tc.field, tc.shard, got, tc.wantSame)
			}
		})
	}
}

// Without a shard selector the digest is the one tokens sealed before shard
// selectors were served carry: each selector length-prefixed, label then
// field, so that their tokens keep opening.
func TestSelectorDigestWithoutShardUnchanged(t *testing.T) {
	old := func(label, field string) [32]byte {
		var b []byte
		b = binary.AppendUvarint(b, uint64(len(label)))
		b = append(b, label...)
		b = binary.AppendUvarint(b, uint64(len(field)))
		b = append(b, field...)
		return sha256.Sum256(b)
	}
	for _, sel := range [][2]string{{"", ""}, {"app=web", ""}, {"app=web", "spec.nodeName=node-1"}, {strings.Repeat("a", 200), "metadata.name=x"}} {
		if got, want := SelectorDigest(sel[0], sel[1], ""), old(sel[0], sel[1]); got != want {
			t.Errorf("SelectorDigest(%q, %q, \"\") = %x, want %x", sel[0], sel[1], got, want)
		}
	}
}

func TestTokenMatches(t *testing.T) {
	tok := sampleToken()
	tests := []struct {
		name      string
		group     string
		resource  string
		namespace string
		digest    [32]byte
		wantErr   error
	}{
		{name: "match", resource: "pods", digest: tok.SelectorDigest},
		{name: "other_resource", resource: "secrets", digest: tok.SelectorDigest, wantErr: ErrTokenMismatch},
		{name: "other_group", group: "apps", resource: "pods", digest: tok.SelectorDigest, wantErr: ErrTokenMismatch},
		{name: "other_namespace", resource: "pods", namespace: "kube-system", digest: tok.SelectorDigest, wantErr: ErrTokenMismatch},
		{name: "other_selector", resource: "pods", digest: SelectorDigest("app=web", "", ""), wantErr: ErrTokenMismatch},
		{name: "other_shard_selector", resource: "pods", digest: SelectorDigest("app=web", "spec.nodeName=node-1", "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"), wantErr: ErrTokenMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tok.Matches(tc.group, tc.resource, tc.namespace, tc.digest)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Matches() = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil && !errors.Is(err, ErrInvalidToken) {
				t.Errorf("Matches() = %v, does not wrap ErrInvalidToken", err)
			}
		})
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tok  Token
	}{
		{name: "zero", tok: Token{}},
		{name: "sample", tok: sampleToken()},
		{name: "crd_namespaced_unknown_total", tok: Token{Group: "demo.listproxy.io", Resource: "widgets", Namespace: "team-a", RV: 1, StartKey: "team-a/w-1", Total: -1}},
		{name: "extremes", tok: Token{RV: ^uint64(0), Returned: -1 << 63, Total: 1<<63 - 1, IssuedAt: time.Unix(-1<<40, 999999999).UTC()}},
		{name: "unicode_and_nul", tok: Token{StartKey: "ns/\x00ü", Namespace: strings.Repeat("n", 300)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := unmarshalPayload(marshalPayload(tc.tok))
			if err != nil {
				t.Fatalf("unmarshalPayload: %v", err)
			}
			if diff := cmp.Diff(tc.tok, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshalPayloadErrors(t *testing.T) {
	good := marshalPayload(sampleToken())
	tests := []struct {
		name string
		in   []byte
	}{
		{name: "empty", in: nil},
		{name: "truncated_in_digest", in: good[:20]},
		{name: "truncated_last_byte", in: good[:len(good)-1]},
		{name: "trailing_byte", in: append(append([]byte{}, good...), 0)},
		{name: "string_longer_than_input", in: []byte{0x7f, 'a'}},
		{name: "overlong_varint", in: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unmarshalPayload(tc.in)
			if !errors.Is(err, ErrMalformedToken) {
				t.Errorf("unmarshalPayload() = %v, want %v", err, ErrMalformedToken)
			}
		})
	}
}
