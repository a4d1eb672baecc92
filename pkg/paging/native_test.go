package paging

import (
	"encoding/base64"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/storage"
)

func TestRelativeKey(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		key       string
		want      string
	}{
		{name: "cluster_wide_list_of_namespaced", namespace: "", key: "kube-system/coredns", want: "kube-system/coredns"},
		{name: "namespaced_list", namespace: "kube-system", key: "kube-system/coredns", want: "coredns"},
		{name: "cluster_scoped", namespace: "", key: "node-1", want: "node-1"},
		{name: "namespace_is_prefix_of_other", namespace: "kube", key: "kube-system/coredns", want: "kube-system/coredns"},
		{name: "key_outside_namespace", namespace: "default", key: "kube-system/coredns", want: "kube-system/coredns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RelativeKey(tc.namespace, tc.key); got != tc.want {
				t.Errorf("RelativeKey(%q, %q) = %q, want %q", tc.namespace, tc.key, got, tc.want)
			}
		})
	}
}

// TestNativeContinue checks NativeContinue against the apiserver's own
// encoder (byte for byte) and decoder (k8s.io/apiserver/pkg/storage/continue.go).
func TestNativeContinue(t *testing.T) {
	tests := []struct {
		name      string
		keyPrefix string // the list's etcd key prefix, as the apiserver builds it
		namespace string
		key       string // listproxy key of the last item returned
		rv        uint64
		wantJSON  string
	}{
		{
			name:      "cluster_wide_pods",
			keyPrefix: "/registry/pods/",
			key:       "kube-system/coredns",
			rv:        123,
			wantJSON:  `{"v":"meta.k8s.io/v1","rv":123,"start":"kube-system/coredns\u0000"}`,
		},
		{
			name:      "namespaced_pods",
			keyPrefix: "/registry/pods/kube-system/",
			namespace: "kube-system",
			key:       "kube-system/coredns",
			rv:        123,
			wantJSON:  `{"v":"meta.k8s.io/v1","rv":123,"start":"coredns\u0000"}`,
		},
		{
			name:      "cluster_scoped_nodes",
			keyPrefix: "/registry/minions/",
			key:       "node-1",
			rv:        9007199254740993, // above 2^53: must not pass through a float
			wantJSON:  `{"v":"meta.k8s.io/v1","rv":9007199254740993,"start":"node-1\u0000"}`,
		},
		{
			name:      "crd_namespaced",
			keyPrefix: "/registry/demo.listproxy.io/widgets/team-a/",
			namespace: "team-a",
			key:       "team-a/w.1",
			rv:        7,
			wantJSON:  `{"v":"meta.k8s.io/v1","rv":7,"start":"w.1\u0000"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rel := RelativeKey(tc.namespace, tc.key)
			got := NativeContinue(tc.rv, rel)

			raw, err := base64.RawURLEncoding.DecodeString(got)
			if err != nil {
				t.Fatalf("not base64url without padding: %v", err)
			}
			if diff := cmp.Diff(tc.wantJSON, string(raw)); diff != "" {
				t.Errorf("token JSON (-want +got):\n%s", diff)
			}

			want, err := storage.EncodeContinue(tc.keyPrefix+rel+"\x00", tc.keyPrefix, int64(tc.rv))
			if err != nil {
				t.Fatalf("storage.EncodeContinue: %v", err)
			}
			if got != want {
				t.Errorf("NativeContinue() = %q, apiserver encodes %q", got, want)
			}

			fromKey, rv, err := storage.DecodeContinue(got, tc.keyPrefix)
			if err != nil {
				t.Fatalf("storage.DecodeContinue: %v", err)
			}
			if diff := cmp.Diff(tc.keyPrefix+rel+"\x00", fromKey); diff != "" {
				t.Errorf("decoded start key (-want +got):\n%s", diff)
			}
			if rv != int64(tc.rv) {
				t.Errorf("decoded rv = %d, want %d", rv, tc.rv)
			}
		})
	}
}

func TestNativeContinueLatest(t *testing.T) {
	const keyPrefix = "/registry/pods/"
	got := NativeContinueLatest("default/web-0")
	fromKey, rv, err := storage.DecodeContinue(got, keyPrefix)
	if err != nil {
		t.Fatalf("storage.DecodeContinue: %v", err)
	}
	if rv != -1 || fromKey != keyPrefix+"default/web-0\x00" {
		t.Errorf("DecodeContinue() = (%q, %d), want (%q, -1)", fromKey, rv, keyPrefix+"default/web-0\x00")
	}
}
