package lists

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseListQuery(t *testing.T) {
	tests := []struct {
		query  string
		want   listQuery
		wantOK bool
	}{
		{query: "", wantOK: true},
		{query: "limit=500&resourceVersion=0", want: listQuery{limit: 500, resourceVersion: "0"}, wantOK: true},
		{query: "labelSelector=app%3Da&fieldSelector=spec.nodeName%3Dn1&continue=x&resourceVersionMatch=Exact", want: listQuery{labelSelector: "app=a", fieldSelector: "spec.nodeName=n1", continueToken: "x", resourceVersionMatch: "Exact"}, wantOK: true},
		{query: "watch=false&timeoutSeconds=30", wantOK: true},
		{query: "shardSelector=shardRange%28object.metadata.uid%2C%270x0%27%2C%270x8%27%29", want: listQuery{shardSelector: "shardRange(object.metadata.uid,'0x0','0x8')"}, wantOK: true},
		{query: "shardSelector=a&shardSelector=b"},
		{query: "watch=true"},
		{query: "watch=1"},
		{query: "limit=abc"},
		{query: "limit=-1"},
		{query: "limit=1&limit=2"},
		{query: "pretty=true"},
		{query: "allowWatchBookmarks=true"},
		{query: "sendInitialEvents=true"},
		{query: "unknown=1"},
		{query: "%zz"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			got, ok := parseListQuery(tc.query, false)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(listQuery{})); ok && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
