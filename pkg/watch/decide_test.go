package watch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		query string
		want  Decision
	}{
		{"informer_watch_list", "allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeout=6m37s&timeoutSeconds=397&watch=true",
			Decision{Action: InitialConsistent, Bookmarks: true, Timeout: 397 * time.Second, Reason: "initial_consistent"}},
		{"watch_list_rv0", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
			Decision{Action: InitialLatest, Reason: "initial_latest"}},
		{"watch_list_rv_n", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=42&allowWatchBookmarks=true",
			Decision{Action: InitialNotOlderThan, RV: 42, Bookmarks: true, Reason: "initial_not_older_than"}},
		{"plain_watch_defaults_to_watch_list", "watch=true&allowWatchBookmarks=true",
			Decision{Action: InitialConsistent, Bookmarks: true, Reason: "initial_consistent", Defaulted: true}},
		{"plain_watch_rv0_defaults_to_watch_list", "watch=true&resourceVersion=0&labelSelector=a%3Db",
			Decision{Action: InitialLatest, LabelSelector: "a=b", Reason: "initial_latest", Defaulted: true}},
		{"rewatch_from_rv", "watch=true&resourceVersion=17&allowWatchBookmarks=true&timeoutSeconds=300&fieldSelector=metadata.name%3Dp1",
			Decision{Action: From, RV: 17, Bookmarks: true, Timeout: 300 * time.Second, FieldSelector: "metadata.name=p1", Reason: "from"}},
		{"shard_selector_unparsed", "watch=1&resourceVersion=17&shardSelector=shardRange%28object.metadata.uid%2C%270x0%27%2C%270x8%27%29",
			Decision{Action: From, RV: 17, ShardSelector: "shardRange(object.metadata.uid,'0x0','0x8')", Reason: "from"}},
		{"shard_selector_repeated", "watch=1&shardSelector=a&shardSelector=b", Decision{Reason: "query"}},
		{"not_a_watch", "resourceVersion=0", Decision{Reason: "query"}},
		{"watch_false", "watch=false", Decision{Reason: "query"}},
		{"odd_bool_spelling", "watch=yes", Decision{Reason: "query"}},
		{"repeated_parameter", "watch=1&watch=1", Decision{Reason: "query"}},
		{"unknown_parameter", "watch=1&pretty=true", Decision{Reason: "query"}},
		{"limit", "watch=1&limit=5", Decision{Reason: "query"}},
		{"continue", "watch=1&continue=abc", Decision{Reason: "query"}},
		{"sie_without_rvm", "watch=1&sendInitialEvents=true", Decision{Reason: "invalid"}},
		{"sie_with_exact", "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact", Decision{Reason: "invalid"}},
		{"rvm_without_sie", "watch=1&resourceVersionMatch=NotOlderThan", Decision{Reason: "invalid"}},
		{"sie_false", "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan", Decision{Reason: "no_initial_events"}},
		{"bad_rv", "watch=1&resourceVersion=abc", Decision{Reason: "resource_version"}},
		{"rv_overflows_uint64", "watch=1&resourceVersion=18446744073709551616", Decision{Reason: "resource_version"}},
		// etcd's revisions are int64: past them the apiserver answers.
		{"rewatch_from_max_int64", "watch=1&resourceVersion=9223372036854775807",
			Decision{Action: From, RV: 1<<63 - 1, Reason: "from"}},
		{"rewatch_from_2^63", "watch=1&resourceVersion=9223372036854775808", Decision{Reason: "resource_version"}},
		{"watch_list_from_max_uint64", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=18446744073709551615",
			Decision{Reason: "resource_version"}},
		{"bad_timeout_seconds", "watch=1&timeoutSeconds=-1", Decision{Reason: "query"}},
		{"bad_timeout", "watch=1&timeout=soon", Decision{Reason: "query"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Decide(tc.query)); diff != "" {
				t.Errorf("Decide(%q) (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}

// FuzzDecide: any query decides without panicking, and a served decision
// only ever comes from a query that asks for a watch.
func FuzzDecide(f *testing.F) {
	for _, seed := range []string{
		"watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
		"watch=true&resourceVersion=17&timeoutSeconds=300",
		"watch=1&resourceVersion=0&labelSelector=a%3Db&fieldSelector=metadata.name%3Dx",
		"watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan",
		"%zz", "watch=1&watch=0", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		d := Decide(query)
		if d.Action == PassThrough {
			return
		}
		if d.Reason == "" {
			t.Errorf("Decide(%q) = %+v: served without a reason", query, d)
		}
		if d.Action == From && d.RV == 0 {
			t.Errorf("Decide(%q) = %+v: a watch from resourceVersion 0 is a watch-list", query, d)
		}
	})
}
