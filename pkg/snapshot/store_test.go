package snapshot

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var nodeName = NewFieldNames("spec.nodeName")

func entry(ns, name string, rv uint64, node string) *Entry {
	return NewEntry(ns, name, rv, map[string]string{"app": name}, nodeName, []string{node},
		[]byte(fmt.Sprintf(`{"n":%q,"rv":%d}`, name, rv)))
}

func keys(p Page) []string {
	out := []string{}
	for _, e := range p.Items {
		out = append(out, e.Key)
	}
	return out
}

func TestPage(t *testing.T) {
	s := NewStore(StoreConfig{IndexField: "spec.nodeName"})
	s.Replace([]*Entry{
		entry("a", "p1", 1, "n1"), entry("a", "p2", 2, "n2"), entry("a", "p3", 3, "n1"),
		entry("a-b", "p1", 4, "n1"), entry("b", "p1", 5, "n2"), entry("b", "p2", 6, "n1"),
	}, 10)
	snap, rv, err := s.Latest()
	if err != nil || rv != 10 {
		t.Fatalf("Latest() = rv %d, %v; want 10, nil", rv, err)
	}
	n1 := "n1"
	tests := []struct {
		name     string
		req      PageRequest
		want     []string
		wantMore bool
		wantLast string
	}{
		{name: "all", req: PageRequest{}, want: []string{"a-b/p1", "a/p1", "a/p2", "a/p3", "b/p1", "b/p2"}},
		{name: "limit_leaves_more", req: PageRequest{Limit: 2}, want: []string{"a-b/p1", "a/p1"}, wantMore: true, wantLast: "a/p1"},
		{name: "limit_exactly_at_end", req: PageRequest{Limit: 6}, want: []string{"a-b/p1", "a/p1", "a/p2", "a/p3", "b/p1", "b/p2"}, wantLast: "b/p2"},
		{name: "after", req: PageRequest{After: "a/p2", Limit: 2}, want: []string{"a/p3", "b/p1"}, wantMore: true, wantLast: "b/p1"},
		{name: "namespace_does_not_include_prefix_sibling", req: PageRequest{Namespace: "a"}, want: []string{"a/p1", "a/p2", "a/p3"}, wantLast: "a/p3"},
		{name: "namespace_limit", req: PageRequest{Namespace: "a", Limit: 2}, want: []string{"a/p1", "a/p2"}, wantMore: true, wantLast: "a/p2"},
		{name: "namespace_last_page", req: PageRequest{Namespace: "a", After: "a/p2", Limit: 1}, want: []string{"a/p3"}, wantLast: "a/p3"},
		// As the apiserver: once limit matches are found, any further object in
		// scope (matching or not) means a continue token.
		{name: "selector_more_even_if_rest_does_not_match", req: PageRequest{Namespace: "a", Limit: 1, Match: func(e *Entry) bool { return e.Name() == "p1" }}, want: []string{"a/p1"}, wantMore: true, wantLast: "a/p1"},
		{name: "selector_no_limit", req: PageRequest{Match: func(e *Entry) bool { return e.Name() == "p2" }}, want: []string{"a/p2", "b/p2"}, wantLast: "b/p2"},
		{name: "index", req: PageRequest{IndexValue: &n1}, want: []string{"a-b/p1", "a/p1", "a/p3", "b/p2"}, wantLast: "b/p2"},
		{name: "index_limit_after", req: PageRequest{IndexValue: &n1, After: "a/p1", Limit: 1}, want: []string{"a/p3"}, wantMore: true, wantLast: "a/p3"},
		// b/p2 is the last n1 object but not the last object in scope.
		{name: "index_more_in_index_ends_with_index", req: PageRequest{IndexValue: &n1, MoreInIndex: true, Namespace: "a", Limit: 2}, want: []string{"a/p1", "a/p3"}, wantLast: "a/p3"},
		{name: "index_more_in_scope", req: PageRequest{IndexValue: &n1, After: "a/p1", Limit: 3}, want: []string{"a/p3", "b/p2"}, wantLast: "b/p2"},
		{name: "index_filled_page_more_in_scope", req: PageRequest{IndexValue: &n1, Namespace: "a", Limit: 1}, want: []string{"a/p1"}, wantMore: true, wantLast: "a/p1"},
		{name: "index_filled_at_last_match_more_in_scope", req: PageRequest{IndexValue: &n1, Limit: 3, After: "a-b/p1"}, want: []string{"a/p1", "a/p3", "b/p2"}, wantLast: "b/p2"},
		{name: "index_filled_at_last_match_more_in_index", req: PageRequest{IndexValue: &n1, MoreInIndex: true, Limit: 2, After: "a/p1"}, want: []string{"a/p3", "b/p2"}, wantLast: "b/p2"},
		{name: "index_namespace", req: PageRequest{IndexValue: &n1, Namespace: "b"}, want: []string{"b/p2"}, wantLast: "b/p2"},
		{name: "scan_budget_ends_page_early", req: PageRequest{Limit: 5, ScanBudget: 3, Match: func(e *Entry) bool { return e.Name() == "p3" }}, want: []string{}, wantMore: true, wantLast: "a/p2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Index scans only visit entries whose key is in the namespace
			// prefix, which a scan starting at the prefix guarantees.
			p := snap.Page(tc.req)
			if diff := cmp.Diff(tc.want, keys(p)); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
			if p.More != tc.wantMore {
				t.Errorf("More = %v, want %v", p.More, tc.wantMore)
			}
			if tc.wantLast != "" && p.LastKey != tc.wantLast {
				t.Errorf("LastKey = %q, want %q", p.LastKey, tc.wantLast)
			}
		})
	}
	if got := snap.Count("a"); got != 3 {
		t.Errorf("Count(a) = %d, want 3", got)
	}
	if got := snap.Count(""); got != 6 {
		t.Errorf("Count() = %d, want 6", got)
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	s := NewStore(StoreConfig{History: time.Hour, IndexField: "spec.nodeName"})
	s.Replace([]*Entry{entry("a", "p1", 1, "n1")}, 5)
	before, _, _ := s.Latest()
	s.Apply(Change{Entry: entry("a", "p2", 6, "n1")}, 6)
	s.Apply(Change{Entry: entry("a", "p1", 7, "n2")}, 7)
	s.Apply(Change{Deleted: true, Entry: entry("a", "p2", 8, "")}, 8)

	if diff := cmp.Diff([]string{"a/p1"}, keys(before.Page(PageRequest{}))); diff != "" {
		t.Errorf("old snapshot changed (-want +got):\n%s", diff)
	}
	if e, _ := before.Get("a/p1"); e.RV != 1 {
		t.Errorf("old snapshot sees RV %d of a/p1, want 1", e.RV)
	}
	after, rv, _ := s.Latest()
	if rv != 8 || after.Len() != 1 || after.Count("a") != 1 {
		t.Errorf("latest: rv %d len %d count %d; want 8 1 1", rv, after.Len(), after.Count("a"))
	}
	n2 := "n2"
	if got := keys(after.Page(PageRequest{IndexValue: &n2})); len(got) != 1 {
		t.Errorf("index after update = %v, want [a/p1]", got)
	}
}

func TestAtExactResourceVersion(t *testing.T) {
	s := NewStore(StoreConfig{History: time.Hour})
	s.Replace([]*Entry{entry("a", "p1", 1, "")}, 10)
	s.Apply(Change{Entry: entry("a", "p2", 12, "")}, 12)
	s.Apply(Change{Entry: entry("a", "p3", 15, "")}, 15)
	s.MarkProgress(20)

	tests := []struct {
		rv      uint64
		want    []string
		wantErr error
	}{
		{rv: 9, wantErr: ErrNotRetained}, // before the list: unknown
		{rv: 10, want: []string{"a/p1"}},
		{rv: 11, want: []string{"a/p1"}},
		{rv: 12, want: []string{"a/p1", "a/p2"}},
		{rv: 14, want: []string{"a/p1", "a/p2"}},
		{rv: 15, want: []string{"a/p1", "a/p2", "a/p3"}},
		{rv: 20, want: []string{"a/p1", "a/p2", "a/p3"}}, // bookmark proved no change
		{rv: 21, wantErr: ErrNotRetained},                // not seen yet
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("rv_", tc.rv), func(t *testing.T) {
			snap, err := s.At(tc.rv)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("At(%d) error = %v, want %v", tc.rv, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, keys(snap.Page(PageRequest{}))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHistoryRetention(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := NewStore(StoreConfig{History: 10 * time.Second, PinTTL: 90 * time.Second, Clock: clk})
	s.Replace(nil, 10)
	s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11)
	clk.SetTime(clk.Now().Add(20 * time.Second))
	s.Apply(Change{Entry: entry("a", "p2", 12, "")}, 12)
	// The snapshot at 10 was superseded 20s ago: dropped. The one at 11 was
	// superseded just now: kept.
	if _, err := s.At(10); !errors.Is(err, ErrNotRetained) {
		t.Errorf("At(10) error = %v, want ErrNotRetained", err)
	}
	if _, err := s.At(11); err != nil {
		t.Errorf("At(11) error = %v, want nil", err)
	}

	// A pinned snapshot survives retention for the pin TTL, then goes.
	snap11, _ := s.At(11)
	s.Pin(11, snap11)
	clk.SetTime(clk.Now().Add(time.Minute))
	s.Apply(Change{Entry: entry("a", "p3", 13, "")}, 13)
	if got, err := s.At(11); err != nil || got != snap11 {
		t.Errorf("At(11) after pin = %p, %v; want the pinned snapshot", got, err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	s.Apply(Change{Entry: entry("a", "p4", 14, "")}, 14)
	if _, err := s.At(11); !errors.Is(err, ErrNotRetained) {
		t.Errorf("At(11) past the pin TTL error = %v, want ErrNotRetained", err)
	}
}

func TestHistoryByteBound(t *testing.T) {
	s := NewStore(StoreConfig{History: time.Hour, HistoryMaxBytes: 3*snapshotOverheadBytes + 200})
	s.Replace([]*Entry{entry("a", "p1", 1, "")}, 10)
	for rv := uint64(11); rv < 20; rv++ {
		s.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv) // each replaces ~20 bytes
	}
	if _, err := s.At(15); !errors.Is(err, ErrNotRetained) {
		t.Errorf("At(15) error = %v, want ErrNotRetained (history over its byte bound)", err)
	}
	if _, err := s.At(18); err != nil {
		t.Errorf("At(18) error = %v, want nil", err)
	}
}

// A relative bound keeps history under a fraction of the live bytes (but
// never under HistoryMinBytes), and releases pins the trimmed history no
// longer covers, so that neither can hold more than the bound.
func TestHistoryRatioBound(t *testing.T) {
	big := func(name string, rv uint64) *Entry {
		e := entry("a", name, rv, "")
		e.Raw = make([]byte, 1<<20)
		return e
	}
	var live []*Entry
	for i := range 100 {
		live = append(live, big(fmt.Sprintf("p%03d", i), uint64(i+1)))
	}
	s := NewStore(StoreConfig{History: time.Hour, HistoryMaxRatio: 0.1})
	s.Replace(live, 100)
	snap100, _ := s.At(100)
	s.Pin(100, snap100)
	// 100 MiB live: the bound is 10 MiB, about ten 1 MiB replacements.
	for rv := uint64(101); rv <= 130; rv++ {
		s.Apply(Change{Entry: big("p000", rv)}, rv)
		if s.historyBytes > 10<<20 {
			t.Fatalf("after rv %d: history %d bytes, over 10%% of %d", rv, s.historyBytes, s.bytes)
		}
	}
	if _, err := s.At(100); !errors.Is(err, ErrNotRetained) {
		t.Errorf("At(100) error = %v, want ErrNotRetained (pin released with the trimmed history)", err)
	}
	if _, err := s.At(125); err != nil {
		t.Errorf("At(125) error = %v, want nil", err)
	}

	// A small store keeps HistoryMinBytes of history.
	small := NewStore(StoreConfig{History: time.Hour, HistoryMaxRatio: 0.1})
	small.Replace([]*Entry{entry("a", "p1", 1, "")}, 1)
	for rv := uint64(2); rv <= 100; rv++ {
		small.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv)
	}
	if _, err := small.At(2); err != nil {
		t.Errorf("small store At(2) error = %v, want nil (within HistoryMinBytes)", err)
	}
}

func TestWaitFor(t *testing.T) {
	s := NewStore(StoreConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan uint64)
	go func() {
		_, rv, err := s.WaitFor(ctx, 12)
		if err != nil {
			t.Errorf("WaitFor: %v", err)
		}
		done <- rv
	}()
	s.Replace(nil, 10)
	s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11)
	select {
	case rv := <-done:
		t.Fatalf("WaitFor returned at rv %d before progress reached 12", rv)
	default:
	}
	s.MarkProgress(13)
	if rv := <-done; rv != 13 {
		t.Errorf("WaitFor served rv %d, want 13", rv)
	}

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, _, err := s.WaitFor(cctx, 100); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitFor on cancelled ctx = %v, want context.Canceled", err)
	}
}

// AdvanceProgress keeps a revision proven elsewhere (no change in
// (held, rv]) only while the store holds every change up to held: never for
// an unsynced store, nor after a relist moved it back below held.
func TestAdvanceProgress(t *testing.T) {
	s := NewStore(StoreConfig{})
	if s.AdvanceProgress(0, 5) {
		t.Fatal("an unsynced store advanced")
	}
	s.Replace(nil, 10)
	s.Apply(Change{Entry: entry("a", "p1", 12, "")}, 12)
	if s.AdvanceProgress(13, 20) {
		t.Error("advanced to 20 while holding only up to 12, proven for 13")
	}
	if got := s.Progress(); got != 12 {
		t.Fatalf("progress = %d, want 12", got)
	}
	if !s.AdvanceProgress(12, 20) || s.Progress() != 20 {
		t.Fatalf("AdvanceProgress(12, 20): progress %d, want 20", s.Progress())
	}
	if !s.AdvanceProgress(11, 15) || s.Progress() != 20 {
		t.Errorf("AdvanceProgress(11, 15) moved progress to %d, want it kept at 20", s.Progress())
	}
	if s.BookmarkedWithin(time.Hour) {
		t.Error("a proven revision counted as the feed's bookmark")
	}
	// A relist from an instance behind moves the store back to 11.
	s.Replace([]*Entry{entry("a", "p1", 11, "")}, 11)
	if s.AdvanceProgress(12, 30) || s.Progress() != 11 {
		t.Errorf("after a relist to 11, AdvanceProgress(12, 30): progress %d, want 11", s.Progress())
	}
	s.MarkProgress(11)
	if !s.BookmarkedWithin(time.Hour) {
		t.Error("the feed's bookmark was not recorded")
	}
}

// FedWithin: a relist, a change or a bookmark shows the feed alive for a
// while; nothing else does.
func TestFedWithin(t *testing.T) {
	const d = time.Minute
	clk := clocktesting.NewFakeClock(time.Now())
	s := NewStore(StoreConfig{Clock: clk})
	if s.FedWithin(d) {
		t.Fatal("a store never listed fed")
	}
	for name, feed := range map[string]func(){
		"relist":   func() { s.Replace(nil, 10) },
		"change":   func() { s.Apply(Change{Entry: entry("a", "p1", 12, "")}, 12) },
		"bookmark": func() { s.MarkProgress(20) },
	} {
		clk.Step(2 * d)
		if s.FedWithin(d) {
			t.Fatalf("before the %s: fed %v ago", name, 2*d)
		}
		feed()
		clk.Step(d - time.Second)
		if !s.FedWithin(d) {
			t.Errorf("the %s did not show the feed alive", name)
		}
	}
}

// Published stats carry the history bound in force, so that metrics can
// show how close history is to it.
func TestStatsHistoryMaxBytes(t *testing.T) {
	big := func(name string, rv uint64) *Entry {
		e := entry("a", name, rv, "")
		e.Raw = make([]byte, 1<<20)
		return e
	}
	var live []*Entry
	for i := range 100 {
		live = append(live, big(fmt.Sprintf("p%03d", i), uint64(i+1)))
	}
	tests := []struct {
		name    string
		cfg     StoreConfig
		entries []*Entry
		want    int64
	}{
		{name: "no_bound", cfg: StoreConfig{History: time.Hour}, entries: live, want: 0},
		{name: "bytes", cfg: StoreConfig{History: time.Hour, HistoryMaxBytes: 5 << 20}, entries: live, want: 5 << 20},
		{name: "ratio", cfg: StoreConfig{History: time.Hour, HistoryMaxRatio: 0.1}, entries: live, want: int64(0.1 * float64(100<<20))},
		{name: "ratio_floor", cfg: StoreConfig{History: time.Hour, HistoryMaxRatio: 0.1}, entries: []*Entry{entry("a", "p1", 1, "")}, want: HistoryMinBytes},
		{name: "tighter_of_both", cfg: StoreConfig{History: time.Hour, HistoryMaxRatio: 0.1, HistoryMaxBytes: 6 << 20}, entries: live, want: 6 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Stats
			tc.cfg.OnPublish = func(s Stats) { got = s }
			s := NewStore(tc.cfg)
			s.Replace(tc.entries, 100)
			if got.HistoryMaxBytes != tc.want {
				t.Errorf("HistoryMaxBytes = %d, want %d (live bytes %d)", got.HistoryMaxBytes, tc.want, got.Bytes)
			}
		})
	}
}

// An unlimited list is never cut short by the scan budget, whatever the
// store's size: the apiserver never paginates a list without a limit. The
// budget only shortens limited, selective pages (KEP-365).
func TestPageScanBudgetOnlyForLimitedSelectiveLists(t *testing.T) {
	const n = 150000
	entries := make([]*Entry, n)
	for i := range entries {
		entries[i] = entry(fmt.Sprintf("ns%03d", i%100), fmt.Sprintf("p%06d", i), uint64(i+1), "")
	}
	s := NewStore(StoreConfig{})
	s.Replace(entries, n+1)
	snap, _, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	none := func(*Entry) bool { return false }
	some := func(e *Entry) bool { return e.Name() == "p149999" }
	tests := []struct {
		name      string
		req       PageRequest
		wantItems int
		wantMore  bool
	}{
		{name: "unlimited_unselective", req: PageRequest{ScanBudget: 100000}, wantItems: n},
		{name: "unlimited_selective", req: PageRequest{ScanBudget: 100000, Match: some}, wantItems: 1},
		{name: "unlimited_selective_none", req: PageRequest{ScanBudget: 100000, Match: none}},
		{name: "limited_unselective", req: PageRequest{ScanBudget: 10, Limit: 500}, wantItems: 500, wantMore: true},
		{name: "limited_selective_shortened", req: PageRequest{ScanBudget: 100000, Limit: 500, Match: some}, wantMore: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page := snap.Page(tc.req)
			if len(page.Items) != tc.wantItems || page.More != tc.wantMore {
				t.Errorf("Page() = %d items, more %v; want %d items, more %v", len(page.Items), page.More, tc.wantItems, tc.wantMore)
			}
		})
	}
}

// Snapshots pinned before a relist keep the whole old list alive; they count
// against the store's byte bound, so that relists cannot multiply the
// memory a store holds.
func TestPinsAcrossRelistsCountAgainstBounds(t *testing.T) {
	list := func(gen int, size int) []*Entry {
		var out []*Entry
		for i := range 10 {
			e := entry("a", fmt.Sprintf("p%d", i), uint64(gen*100+i), "")
			e.Raw = make([]byte, size)
			out = append(out, e)
		}
		return out
	}
	tests := []struct {
		name     string
		size     int // bytes per object; 10 objects
		wantKept int // pins of earlier lists still served after 20 relists
	}{
		{name: "10MiB_store_4MiB_bound_keeps_none", size: 1 << 20, wantKept: 0},
		{name: "100KiB_store_4MiB_bound_keeps_some", size: 10 << 10, wantKept: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			s := NewStore(StoreConfig{History: time.Hour, HistoryMaxBytes: 4 << 20, Clock: clk})
			var pinned []uint64
			for gen := 1; gen <= 21; gen++ {
				rv := uint64(gen * 100)
				s.Replace(list(gen, tc.size), rv)
				if gen <= 20 {
					snap, err := s.At(rv)
					if err != nil {
						t.Fatalf("At(%d): %v", rv, err)
					}
					s.Pin(rv, snap)
					pinned = append(pinned, rv)
				}
			}
			kept := 0
			for _, rv := range pinned {
				if _, err := s.At(rv); err == nil {
					kept++
				} else if !errors.Is(err, ErrNotRetained) {
					t.Errorf("At(%d) error = %v, want nil or ErrNotRetained", rv, err)
				}
			}
			if tc.wantKept == 0 && kept != 0 {
				t.Errorf("%d pins of %d MiB lists kept alive past a 4 MiB bound", kept, 10*tc.size>>20)
			}
			if tc.wantKept > 0 && kept == 0 {
				t.Errorf("no pin kept, want pins that fit the bound kept")
			}
			if held := s.pinnedBytesLocked(s.current.Load().history[0]) + s.historyBytes; held > 4<<20 {
				t.Errorf("pins and history hold %d bytes, over the 4 MiB bound", held)
			}
		})
	}
}

// Compaction drops the snapshots and pins that only hold compacted states;
// reads of them fail with ErrCompacted, as etcd's do.
func TestCompact(t *testing.T) {
	s := NewStore(StoreConfig{History: time.Hour})
	s.Replace(nil, 10)
	for rv := uint64(11); rv <= 20; rv++ {
		s.Apply(Change{Entry: entry("a", fmt.Sprintf("p%d", rv), rv, "")}, rv)
	}
	snap12, err := s.At(12)
	if err != nil {
		t.Fatal(err)
	}
	s.Pin(12, snap12)
	s.Compact(15)
	tests := []struct {
		rv      uint64
		wantErr error
	}{
		{rv: 10, wantErr: ErrCompacted},
		{rv: 12, wantErr: ErrCompacted}, // pinned, still compacted
		{rv: 14, wantErr: ErrCompacted},
		{rv: 15},
		{rv: 20},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.rv), func(t *testing.T) {
			if _, err := s.At(tc.rv); !errors.Is(err, tc.wantErr) {
				t.Errorf("At(%d) error = %v, want %v", tc.rv, err, tc.wantErr)
			}
		})
	}
	if got := len(s.current.Load().history); got != 6 {
		t.Errorf("history holds %d snapshots after compaction at 15, want 6 (15..20)", got)
	}
	if s.pins.Contains(12) {
		t.Error("pin at 12 kept after compaction at 15")
	}
	s.Pin(13, snap12)
	if s.pins.Contains(13) {
		t.Error("Pin at a compacted revision kept")
	}
}

// A walk that re-pins its snapshot page after page cannot hold it forever.
func TestPinMaxAge(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := NewStore(StoreConfig{History: time.Second, PinTTL: time.Minute, PinMaxAge: 5 * time.Minute, Clock: clk})
	s.Replace(nil, 10)
	snap, _ := s.At(10)
	s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11)
	s.Pin(10, snap)
	for range 9 { // a page every 30s for 4.5 minutes
		clk.SetTime(clk.Now().Add(30 * time.Second))
		got, err := s.At(10)
		if err != nil {
			t.Fatalf("At(10) within the max age: %v", err)
		}
		s.Pin(10, got)
	}
	clk.SetTime(clk.Now().Add(45 * time.Second))
	s.Apply(Change{Entry: entry("a", "p2", 12, "")}, 12)
	if _, err := s.At(10); !errors.Is(err, ErrNotRetained) {
		t.Errorf("At(10) past the pin's max age error = %v, want ErrNotRetained", err)
	}
}
