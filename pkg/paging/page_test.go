package paging

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

func TestRemainingItemCount(t *testing.T) {
	tests := []struct {
		name           string
		total          int64
		returnedBefore int64
		thisPage       int64
		hasMore        bool
		selectorSet    bool
		want           *int64
	}{
		{name: "first_page", total: 1000, thisPage: 500, hasMore: true, want: ptr.To[int64](500)},
		{name: "middle_page", total: 1000, returnedBefore: 500, thisPage: 200, hasMore: true, want: ptr.To[int64](300)},
		{name: "last_page", total: 1000, returnedBefore: 500, thisPage: 500, hasMore: false, want: nil},
		{name: "selector_set", total: 1000, thisPage: 500, hasMore: true, selectorSet: true, want: nil},
		{name: "total_unknown", total: -1, thisPage: 500, hasMore: true, want: nil},
		{name: "total_disagrees", total: 500, thisPage: 500, hasMore: true, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RemainingItemCount(tc.total, tc.returnedBefore, tc.thisPage, tc.hasMore, tc.selectorSet)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RemainingItemCount() (-want +got):\n%s", diff)
			}
		})
	}
}
