package lists

import "testing"

// TestWatchListOnByDefault: the releases whose apiserver turns a watch from
// resourceVersion "" or "0" into a watch-list (WatchList on by default).
func TestWatchListOnByDefault(t *testing.T) {
	tests := []struct {
		major, minor int
		want         bool
	}{
		{0, 0, false}, // unknown: pass through
		{1, 31, false},
		{1, 32, true},
		{1, 33, false}, // switched back off for one release
		{1, 34, true},
		{1, 37, true},
	}
	for _, tt := range tests {
		if got := watchListOnByDefault(tt.major, tt.minor); got != tt.want {
			t.Errorf("watchListOnByDefault(%d, %d) = %v, want %v", tt.major, tt.minor, got, tt.want)
		}
	}
}
