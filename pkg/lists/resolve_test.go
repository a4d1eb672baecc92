package lists

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/freshness"
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
	l := newTestLists(t, testListsOptions{
		cfg:   Config{Keys: keys, NotOlderThanWait: time.Millisecond},
		store: stores.StaticStore{Resource: catalog.NewResource(podsGVR, "Pod", true, false), Format: wire.JSON, Store: store},
	})
	return l, keys
}

// TestResolve walks the semantics table (docs/design.md "Semantics table")
// without etcd: every row that can be decided without it, and what the
// others do when etcd is absent.
func TestResolve(t *testing.T) {
	l, keys := resolveFixture(t)
	seal := func(rv uint64) string {
		t.Helper()
		s, err := keys.Seal(paging.Token{Resource: "pods", RV: rv, StartKey: "a/p1", SelectorDigest: selectorDigest("", "", ""), IssuedAt: time.Now()})
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

// A consistent LIST is small, and passes through when the store's own feed
// does not prove it at once, when its scope holds at most
// ConsistentPassThroughMaxObjects objects: its namespace's count, or the
// namespace its field selector pins, or the whole resource's; one object
// for a single name. Selectors and limit do not shrink the scope; 0 turns
// the rule off; a peer replica's list is never small.
func TestSmallScope(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	var entries []*snapshot.Entry
	for _, key := range []string{"a/p1", "a/p2", "a/p3", "b/p1"} {
		entries = append(entries, &snapshot.Entry{Key: key, RV: 5, Raw: []byte("{}")})
	}
	store.Replace(entries, 10)
	snap, _, err := store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	pods := catalog.NewResource(podsGVR, "Pod", true, false)
	tests := []struct {
		name      string
		namespace string
		labels    string
		fields    string
		limit     int64
		max       int
		peer      bool
		want      bool
	}{
		{name: "namespace_at_threshold", namespace: "b", max: 1, want: true},
		{name: "namespace_over_threshold", namespace: "a", max: 2, want: false},
		{name: "namespace_under_threshold", namespace: "a", max: 3, want: true},
		{name: "empty_namespace", namespace: "c", max: 1, want: true},
		{name: "cluster_over_threshold", max: 3, want: false},
		{name: "cluster_at_threshold", max: 4, want: true},
		{name: "pinned_namespace", fields: "metadata.namespace=b", max: 1, want: true},
		{name: "pinned_namespace_over_threshold", fields: "metadata.namespace=a", max: 2, want: false},
		{name: "single_name", namespace: "a", fields: "metadata.name=p1", max: 2, want: true},
		{name: "selector_does_not_shrink_the_scope", namespace: "a", labels: "app=x", max: 2, want: false},
		{name: "limit_does_not_shrink_the_scope", namespace: "a", limit: 1, max: 2, want: false},
		{name: "off", namespace: "b", max: 0, want: false},
		{name: "off_single_name", namespace: "a", fields: "metadata.name=p1", max: 0, want: false},
		{name: "off_empty_namespace", namespace: "c", max: 0, want: false},
		{name: "peer_list", namespace: "b", max: 1, peer: true, want: false},
		{name: "peer_list_cluster", max: 4, peer: true, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := labels.Parse(tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := fields.ParseSelector(tc.fields)
			if err != nil {
				t.Fatal(err)
			}
			l := &Lists{cfg: Config{ConsistentPassThroughMaxObjects: tc.max}}
			req := listRequest{
				Request: collection.Request{
					Path: collection.Path{GVR: podsGVR, Namespace: tc.namespace}, Resource: pods,
					Labels: ls, Fields: fs, Selective: tc.labels != "" || tc.fields != "",
				},
				query: listQuery{limit: tc.limit},
				peer:  tc.peer,
			}
			if got := l.smallScope(req, snap); got != tc.want {
				t.Errorf("smallScope = %v, want %v", got, tc.want)
			}
		})
	}
}

// A small read the prover passed through by choice (DirectCheaper) passes
// through with that reason, never the 429 of FallbackReject, which only a
// proof that ran out of time or failed gets.
func TestUnprovenConsistentRead(t *testing.T) {
	tests := []struct {
		outcome    freshness.Outcome
		reject     bool
		want       outcome
		wantReason Reason
	}{
		{outcome: freshness.DirectCheaper, reject: true, want: outcomePass, wantReason: "direct_cheaper"},
		{outcome: freshness.DirectCheaper, want: outcomePass, wantReason: "direct_cheaper"},
		{outcome: freshness.NoBookmarks, reject: true, want: outcomePass, wantReason: "no_bookmarks"},
		{outcome: freshness.PrefixUnverified, reject: true, want: outcomePass, wantReason: "prefix_unverified"},
		{outcome: freshness.ProgressTimeout, reject: true, want: outcomeReject, wantReason: "progress_timeout"},
		{outcome: freshness.ProbeFailed, reject: true, want: outcomeReject, wantReason: "probe_failed"},
		{outcome: freshness.ProgressTimeout, want: outcomePass, wantReason: "progress_timeout"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/reject=%v", tc.outcome, tc.reject), func(t *testing.T) {
			l := &Lists{cfg: Config{FallbackReject: tc.reject}}
			v := l.unproven(tc.outcome)
			if v.outcome != tc.want || v.reason != tc.wantReason {
				t.Fatalf("unproven(%q) = outcome %d reason %q, want %d %q", tc.outcome, v.outcome, v.reason, tc.want, tc.wantReason)
			}
			if v.outcome == outcomeReject && v.status.Status().Code != http.StatusTooManyRequests {
				t.Errorf("status code %d, want 429", v.status.Status().Code)
			}
		})
	}
}
