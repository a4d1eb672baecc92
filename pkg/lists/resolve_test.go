package lists

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// resolveFixture is a Lists without etcd whose JSON pods store holds
// snapshots at 10 and 20 (progress 20); its protobuf store does not exist.
func resolveFixture(t *testing.T) (*Lists, *paging.Keyring) {
	t.Helper()
	keys, err := paging.NewRandomKeyring()
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name string, rv uint64) *snapshot.Entry {
		return &snapshot.Entry{Key: "a/" + name, RV: rv, Raw: []byte("{}")}
	}
	store := snapshot.NewStore(snapshot.StoreConfig{History: time.Hour})
	store.Replace([]*snapshot.Entry{pod("p1", 5)}, 10)
	store.Apply(snapshot.Change{Entry: pod("p2", 20)}, 20)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := stores.NewStatic(ctx, stores.Config{}, nil, stores.StaticStore{
		Resource: stores.NewResource(podsGVR, "Pod", true, false), Format: wire.JSON, Store: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Stores: reg, Keys: keys, NotOlderThanWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return l, keys
}

// TestResolve walks the semantics table (docs/design.md "Semantics table")
// without etcd: every row that can be decided without it, and what the
// others do when etcd is absent.
func TestResolve(t *testing.T) {
	l, keys := resolveFixture(t)
	seal := func(rv uint64) string {
		t.Helper()
		s, err := keys.Seal(paging.Token{Resource: "pods", RV: rv, StartKey: "a/p1", SelectorDigest: selectorDigest("", ""), IssuedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name       string
		query      listQuery
		format     wire.Format // JSON unless set
		want       outcome
		wantReason Reason
		wantCode   int    // outcomeReject
		wantRV     uint64 // outcomeServe
	}{
		// Invalid options and foreign tokens.
		{name: "foreign_continue", query: listQuery{continueToken: "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"}, want: outcomePass, wantReason: "foreign_continue"},
		{name: "invalid_options", query: listQuery{resourceVersionMatch: "Exact"}, want: outcomePass, wantReason: "invalid_options"},
		{name: "invalid_options_with_our_token", query: listQuery{resourceVersionMatch: "Exact", continueToken: seal(10)}, want: outcomeReject, wantReason: "invalid_options", wantCode: http.StatusUnprocessableEntity},
		{name: "noncanonical_rv", query: listQuery{resourceVersion: "010"}, want: outcomePass, wantReason: "noncanonical_resource_version"},
		// Our continue tokens.
		{name: "continue", query: listQuery{continueToken: seal(10), limit: 1}, want: outcomeServe, wantReason: "continue", wantRV: 10},
		{name: "continue_invalid", query: listQuery{continueToken: paging.TokenPrefix + "AAAA"}, want: outcomeReject, wantReason: "invalid_continue", wantCode: http.StatusBadRequest},
		{name: "continue_with_rv", query: listQuery{continueToken: seal(10), resourceVersion: "10"}, want: outcomeReject, wantReason: "resource_version_with_continue", wantCode: http.StatusBadRequest},
		{name: "continue_not_retained", query: listQuery{continueToken: seal(30)}, want: outcomePass, wantReason: ReasonContinueNotRetained},
		// Consistent reads.
		{name: "consistent_without_etcd", query: listQuery{}, want: outcomePass, wantReason: ReasonNoProof},
		// resourceVersion="0".
		{name: "latest", query: listQuery{resourceVersion: "0"}, want: outcomeServe, wantReason: "latest", wantRV: 20},
		{name: "latest_not_synced", query: listQuery{resourceVersion: "0"}, format: wire.Protobuf, want: outcomePass, wantReason: ReasonNotSynced},
		// resourceVersion=N, NotOlderThan.
		{name: "not_older_than_met", query: listQuery{resourceVersion: "10", resourceVersionMatch: "NotOlderThan"}, want: outcomeServe, wantReason: "not_older_than", wantRV: 20},
		{name: "not_older_than_unset_match", query: listQuery{resourceVersion: "15"}, want: outcomeServe, wantReason: "not_older_than", wantRV: 20},
		{name: "not_older_than_ahead_without_etcd", query: listQuery{resourceVersion: "30", resourceVersionMatch: "NotOlderThan"}, want: outcomePass, wantReason: ReasonNotOlderThanTimeout},
		// resourceVersion=N, Exact.
		{name: "exact", query: listQuery{resourceVersion: "10", resourceVersionMatch: "Exact"}, want: outcomeServe, wantReason: "exact", wantRV: 10},
		{name: "exact_between_changes", query: listQuery{resourceVersion: "15", resourceVersionMatch: "Exact"}, want: outcomeServe, wantReason: "exact", wantRV: 15},
		{name: "legacy_exact_with_limit", query: listQuery{resourceVersion: "15", limit: 1}, want: outcomeServe, wantReason: "legacy_exact", wantRV: 15},
		{name: "exact_ahead", query: listQuery{resourceVersion: "30", resourceVersionMatch: "Exact"}, want: outcomePass, wantReason: ReasonSnapshotUnavailable},
	}
	pods, _ := l.stores.Lookup(podsGVR)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := listRequest{
				Request: collection.Request{
					Path: collection.Path{GVR: podsGVR}, Resource: pods,
					Format: tc.format, Labels: labels.Everything(), Fields: fields.Everything(),
				},
				query: tc.query,
			}
			v := l.resolve(context.Background(), req)
			if v.handle != nil {
				defer v.handle.Release()
			}
			if v.outcome != tc.want || v.reason != tc.wantReason {
				t.Fatalf("resolve = outcome %d reason %q, want %d %q", v.outcome, v.reason, tc.want, tc.wantReason)
			}
			switch v.outcome {
			case outcomeReject:
				if v.status == nil || int(v.status.Status().Code) != tc.wantCode {
					t.Errorf("status = %v, want code %d", v.status, tc.wantCode)
				}
			case outcomeServe:
				if v.snap == nil || v.rv != tc.wantRV || v.handle == nil {
					t.Errorf("serve rv %d (snapshot %v), want rv %d", v.rv, v.snap != nil, tc.wantRV)
				}
			}
		})
	}
}
