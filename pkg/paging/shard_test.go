package paging

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/sharding"
)

// apiserverShardStatus is the apiserver's answer to a LIST or WATCH whose
// shardSelector fails to parse with parseErr: its registry's plain error
// (k8s.io/apiserver/pkg/registry/generic/registry/store.go), turned into a
// Status by its handler's own code.
func apiserverShardStatus(parseErr error) metav1.Status {
	s := responsewriters.ErrorToAPIStatus(fmt.Errorf("invalid shard selector: %w", parseErr))
	s.TypeMeta = metav1.TypeMeta{} // httpapi.WriteStatus sets it
	return *s
}

// InvalidShardSelectorError is the apiserver's Status, for each way a shard
// selector fails to parse: a 500 without a reason.
func TestInvalidShardSelectorError(t *testing.T) {
	for _, sel := range []string{
		"  ",
		"bogus",
		"shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
		"shardRange(object.metadata.uid, '0x0000000000000000')",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && true",
		"shardRange(",
	} {
		_, err := sharding.Parse(sel)
		if err == nil {
			t.Fatalf("%q parses", sel)
		}
		got := InvalidShardSelectorError(err).ErrStatus
		if diff := cmp.Diff(apiserverShardStatus(err), got); diff != "" {
			t.Errorf("%q: Status (-apiserver +listproxy):\n%s", sel, diff)
		}
		if got.Code != http.StatusInternalServerError || got.Reason != "" {
			t.Errorf("%q: code %d reason %q, want 500 and none", sel, got.Code, got.Reason)
		}
	}
}

// A shard selector that does not parse is reported where the apiserver
// with the ShardedListAndWatch gate reports it: after ListOptions
// validation (whose 422 comes first, or whose failure passes through
// without a token of ours), before the continue token and the
// resourceVersion, which storage reads after the registry parsed the
// selector; with or without a token of ours. A foreign token's request
// passes through, the apiserver's to answer.
func TestDecideShardSelector(t *testing.T) {
	_, parseErr := sharding.Parse("shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')")
	want := Decision{Action: Reject, Reason: "invalid_shard_selector", Err: InvalidShardSelectorError(parseErr)}
	for _, tc := range decideTable {
		t.Run(tc.name(), func(t *testing.T) {
			req := tc.request(t)
			req.ShardSelectorErr = parseErr
			got := Decide(req)
			switch tc.want.Reason {
			case "invalid_options", "foreign_continue":
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Decide() (-want +got):\n%s", diff)
				}
			default:
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Decide() (-want +got):\n%s", diff)
				}
			}
		})
	}
}
