package snapshot

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// feedEvents is what a cursor read, as "TYPE key@rv (prev@rv)".
func feedEvents(evs []Event) []string {
	out := []string{}
	for _, ev := range evs {
		s := fmt.Sprintf("%s %s@%d", ev.Type, ev.Object.Key, ev.RV)
		if ev.Prev != nil {
			s += fmt.Sprintf(" prev@%d", ev.Prev.RV)
		}
		out = append(out, s)
	}
	return out
}

func TestFeed(t *testing.T) {
	tests := []struct {
		name     string
		history  int
		apply    func(s *Store)
		from     uint64
		wantSub  error
		want     []string
		wantRead error
	}{
		{
			name:    "changes_after_rv_in_order",
			history: 8,
			apply: func(s *Store) {
				s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11)
				s.Apply(Change{Entry: entry("a", "p3", 12, "")}, 12)
				s.Apply(Change{Deleted: true, Entry: entry("a", "p2", 13, "")}, 13)
			},
			from: 11,
			want: []string{"ADDED a/p3@12", "DELETED a/p2@13 prev@2"},
		},
		{
			name:    "modified_carries_prev",
			history: 8,
			apply:   func(s *Store) { s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11) },
			from:    10,
			want:    []string{"MODIFIED a/p1@11 prev@1"},
		},
		{
			name:    "from_replace_rv_is_retained",
			history: 8,
			from:    10,
			want:    []string{},
		},
		{
			name:    "before_replace_rv_not_retained",
			history: 8,
			from:    9,
			wantSub: ErrNotRetained,
		},
		{
			name:    "evicted_changes_not_retained",
			history: 2,
			apply: func(s *Store) {
				for rv := uint64(11); rv <= 14; rv++ {
					s.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv)
				}
			},
			from:    11,
			wantSub: ErrNotRetained,
		},
		{
			name:    "last_evicted_rv_is_the_start_of_what_is_kept",
			history: 2,
			apply: func(s *Store) {
				for rv := uint64(11); rv <= 14; rv++ {
					s.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv)
				}
			},
			from: 12,
			want: []string{"MODIFIED a/p1@13 prev@12", "MODIFIED a/p1@14 prev@13"},
		},
		{
			name:    "past_progress_starts_at_next_change",
			history: 8,
			from:    50,
			want:    []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: tc.history})
			s.Replace([]*Entry{entry("a", "p1", 1, ""), entry("a", "p2", 2, "")}, 10)
			if tc.apply != nil {
				tc.apply(s)
			}
			c, err := s.Subscribe(tc.from)
			if !errors.Is(err, tc.wantSub) {
				t.Fatalf("Subscribe(%d) = %v, want %v", tc.from, err, tc.wantSub)
			}
			if err != nil {
				return
			}
			got, err := c.Read(nil)
			if !errors.Is(err, tc.wantRead) {
				t.Fatalf("Read = %v, want %v", err, tc.wantRead)
			}
			if diff := cmp.Diff(tc.want, feedEvents(got)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// A cursor subscribed past the store's progress (the store's snapshot
// proven to be the state there) skips the changes up to its resourceVersion
// that the store receives afterwards, and reads those after it.
func TestSubscribePastProgressSkipsChangesUpToIt(t *testing.T) {
	s := NewStore(StoreConfig{EventHistory: 8})
	s.Replace(nil, 10)
	c, err := s.Subscribe(20)
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(Change{Entry: entry("a", "p1", 12, "")}, 12)
	s.Apply(Change{Deleted: true, Entry: entry("a", "p1", 20, "")}, 20)
	s.Apply(Change{Entry: entry("a", "p2", 21, "")}, 21)
	got, err := c.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ADDED a/p2@21"}, feedEvents(got)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestFeedEndsCursors(t *testing.T) {
	tests := []struct {
		name  string
		after func(s *Store)
		want  error
	}{
		{"relist", func(s *Store) { s.Replace(nil, 20) }, ErrFeedReset},
		{"unsync", func(s *Store) { s.Unsync() }, ErrFeedReset},
		{"stop", func(s *Store) { s.Stop() }, ErrFeedReset},
		{"overrun", func(s *Store) {
			for rv := uint64(11); rv <= 13; rv++ {
				s.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv)
			}
		}, ErrFeedOverrun},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: 2})
			s.Replace([]*Entry{entry("a", "p1", 1, "")}, 10)
			c, err := s.Subscribe(10)
			if err != nil {
				t.Fatal(err)
			}
			changed := s.Changed()
			tc.after(s)
			select {
			case <-changed:
			default:
				t.Error("Changed was not signalled")
			}
			if _, err := c.Read(nil); !errors.Is(err, tc.want) {
				t.Errorf("Read = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestFeedKeepsRetention: with EventRetention the store keeps every change
// of the last EventRetention, growing its history past EventHistory up to
// EventHistoryMax, so that a watcher stalled that long resumes with every
// change in order; beyond EventHistoryMax, or once its changes are older,
// the watcher is overrun. Aged changes shrink the history back.
func TestFeedKeepsRetention(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := NewStore(StoreConfig{EventHistory: 4, EventRetention: time.Minute, EventHistoryMax: 12, Clock: clk})
	s.Replace([]*Entry{entry("a", "p1", 1, "")}, 10)
	apply := func(from, to uint64, every time.Duration) {
		for rv := from; rv <= to; rv++ {
			clk.SetTime(clk.Now().Add(every))
			s.Apply(Change{Entry: entry("a", "p1", rv, "")}, rv)
		}
	}
	stalled, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}

	// 12 changes in 12 s: all kept, in order.
	apply(11, 22, time.Second)
	got, err := stalled.Read(make([]Event, 0, 32))
	if err != nil {
		t.Fatalf("Read after 12 changes in 12 s: %v, want every change (the history grows)", err)
	}
	var rvs []uint64
	for _, ev := range got {
		rvs = append(rvs, ev.RV)
	}
	want := []uint64{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}
	if diff := cmp.Diff(want, rvs); diff != "" {
		t.Fatalf("changes read (-want +got):\n%s", diff)
	}

	// Past EventHistoryMax the oldest go, young as they are.
	apply(23, 35, time.Second)
	if _, err := stalled.Read(nil); !errors.Is(err, ErrFeedOverrun) {
		t.Errorf("Read after 13 more changes = %v, want ErrFeedOverrun (EventHistoryMax is 12)", err)
	}

	// Changes older than the retention go once the history is full, and
	// the history shrinks back to EventHistory as they age.
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	old, err := s.Subscribe(35)
	if err != nil {
		t.Fatal(err)
	}
	apply(36, 39, time.Second)
	if _, err := old.Read(nil); err != nil {
		t.Fatalf("Read of 4 new changes: %v", err)
	}
	apply(40, 100, time.Second)
	if _, err := old.Read(nil); !errors.Is(err, ErrFeedOverrun) {
		t.Errorf("Read after 61 changes over 61 s = %v, want ErrFeedOverrun (at most 12 are kept)", err)
	}
	if n := len(s.feed.ring); n != 12 {
		t.Errorf("history holds room for %d changes, want EventHistoryMax (12)", n)
	}
	// One change every two minutes: a history of 4 keeps more than the
	// retention.
	apply(101, 120, 2*time.Minute)
	if n := len(s.feed.ring); n != 4 {
		t.Errorf("history of changes two minutes apart holds room for %d, want EventHistory (4)", n)
	}
}

func TestSubscribeBeforeSync(t *testing.T) {
	s := NewStore(StoreConfig{})
	if _, err := s.Subscribe(0); !errors.Is(err, ErrNotSynced) {
		t.Errorf("Subscribe = %v, want ErrNotSynced", err)
	}
}

// TestEventShared: a store's events carry one Shared value for all their
// readers: made once per key, and not stored for another key.
func TestEventShared(t *testing.T) {
	s := NewStore(StoreConfig{})
	s.Replace(nil, 1)
	s.Apply(Change{Entry: entry("ns", "a", 2, "n1")}, 2)
	var evs [2][]Event
	for i := range evs {
		c, err := s.Subscribe(1)
		if err != nil {
			t.Fatal(err)
		}
		if evs[i], err = c.Read(nil); err != nil || len(evs[i]) != 1 {
			t.Fatalf("Read: %v %v", evs[i], err)
		}
	}
	made := 0
	mk := func(v string) func() []byte { return func() []byte { made++; return []byte(v) } }
	if got := evs[0][0].Shared.Load("k", mk("first")); string(got) != "first" {
		t.Errorf("first Load = %q", got)
	}
	if got := evs[1][0].Shared.Load("k", mk("second")); string(got) != "first" {
		t.Errorf("second reader's Load = %q, want the first's value", got)
	}
	if got := evs[1][0].Shared.Load("other", mk("other")); string(got) != "other" {
		t.Errorf("Load of another key = %q", got)
	}
	if got := evs[0][0].Shared.Load("k", mk("again")); string(got) != "first" || made != 2 {
		t.Errorf("Load = %q after %d makes, want first after 2", got, made)
	}
}

// TestFeedBoundedByBytes: the feed keeps no more superseded object bytes
// than its byte bound, however few changes that is. One 256 KiB object
// updated 1,024 times once kept every version, a quarter of a GiB, while
// history reported its 4 MiB.
func TestFeedBoundedByBytes(t *testing.T) {
	const size, updates = 256 << 10, 1024
	big := func(rv uint64) *Entry {
		e := entry("a", "big", rv, "")
		e.Raw = make([]byte, size)
		return e
	}
	// The bounds lists gives every store.
	var got Stats
	s := NewStore(StoreConfig{History: 150 * time.Second, HistoryMaxBytes: 1 << 30, HistoryMaxRatio: 0.1, OnPublish: func(st Stats) { got = st }})
	s.Replace([]*Entry{big(1)}, 1)
	before := heapInUse()
	for rv := uint64(2); rv <= updates+1; rv++ {
		s.Apply(Change{Entry: big(rv)}, rv)
	}
	retained := int64(heapInUse()) - int64(before)
	runtime.KeepAlive(s)
	t.Logf("heap grew by %d bytes; stats: %+v", retained, got)
	// History and the feed may each hold the bound (4 MiB here); the slack
	// is for the trees and events.
	if limit := int64(3 * HistoryMinBytes); retained > limit {
		t.Errorf("after %d updates of a %d-byte object the heap grew by %d bytes, want at most %d", updates, size, retained, limit)
	}
	if got.FeedMaxBytes != HistoryMinBytes || got.FeedBytes > got.FeedMaxBytes || got.FeedBytes < got.FeedMaxBytes-size {
		t.Errorf("FeedBytes %d, FeedMaxBytes %d; want the bound %d, held to within one version", got.FeedBytes, got.FeedMaxBytes, HistoryMinBytes)
	}
	if got.HistoryBytes > got.HistoryMaxBytes {
		t.Errorf("HistoryBytes %d over HistoryMaxBytes %d", got.HistoryBytes, got.HistoryMaxBytes)
	}
	// What the stats count is what is held.
	if counted := got.Bytes + got.HistoryBytes + got.FeedBytes; retained > counted+HistoryMinBytes {
		t.Errorf("heap grew by %d bytes, the stats count %d", retained, counted)
	}
}

// sizedEntry is entry with size bytes of Raw.
func sizedEntry(ns, name string, rv uint64, size int) *Entry {
	e := entry(ns, name, rv, "")
	e.Raw = make([]byte, size)
	return e
}

// TestFeedBytes: the feed counts what only it holds: versions superseded
// before history's oldest snapshot, deleted objects as sent, and shared
// frames while their events are kept.
func TestFeedBytes(t *testing.T) {
	tests := []struct {
		name    string
		history time.Duration
		apply   func(s *Store)
		want    int64
	}{
		{
			name:    "history_holds_every_superseded_version",
			history: time.Hour,
			apply: func(s *Store) {
				s.Apply(Change{Entry: sizedEntry("a", "p1", 11, 100)}, 11)
				s.Apply(Change{Entry: sizedEntry("a", "p1", 12, 100)}, 12)
			},
			want: 0,
		},
		{
			name: "no_history",
			apply: func(s *Store) {
				s.Apply(Change{Entry: sizedEntry("a", "p1", 11, 100)}, 11) // supersedes the listed 1000
				s.Apply(Change{Entry: sizedEntry("a", "p1", 12, 100)}, 12)
			},
			want: 1000 + 100,
		},
		{
			name:    "deleted_object_as_sent",
			history: time.Hour,
			apply: func(s *Store) {
				s.Apply(Change{Deleted: true, Entry: sizedEntry("a", "p1", 11, 10)}, 11)
			},
			want: 10,
		},
		{
			name: "deleted_without_history",
			apply: func(s *Store) {
				s.Apply(Change{Deleted: true, Entry: sizedEntry("a", "p1", 11, 10)}, 11)
			},
			want: 1000 + 10,
		},
		{
			name: "count_bound_drops_the_oldest",
			apply: func(s *Store) {
				for rv := uint64(11); rv <= 14; rv++ { // each supersedes the one before
					s.Apply(Change{Entry: sizedEntry("a", "p1", rv, int(rv))}, rv)
				}
			},
			want: 11 + 12 + 13, // the last 3; 1000 was dropped with the first
		},
		{
			name: "relist_drops_everything",
			apply: func(s *Store) {
				s.Apply(Change{Entry: sizedEntry("a", "p1", 11, 100)}, 11)
				s.Replace([]*Entry{sizedEntry("a", "p1", 12, 100)}, 12)
			},
			want: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Stats
			s := NewStore(StoreConfig{History: tc.history, EventHistory: 3, OnPublish: func(st Stats) { got = st }})
			s.Replace([]*Entry{sizedEntry("a", "p1", 1, 1000)}, 10)
			tc.apply(s)
			if got.FeedBytes != tc.want {
				t.Errorf("FeedBytes = %d, want %d", got.FeedBytes, tc.want)
			}
		})
	}
}

// TestFeedFrameBytes: frames shared through events count while their
// events are kept, and a frame made for an event already dropped is not
// stored.
func TestFeedFrameBytes(t *testing.T) {
	s := NewStore(StoreConfig{History: time.Hour, EventHistory: 2})
	s.Replace(nil, 10)
	s.Apply(Change{Entry: entry("a", "p1", 11, "")}, 11)
	c, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := c.Read(nil)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Read = %v, %v", feedEvents(evs), err)
	}
	evs[0].Shared.Load("k", func() []byte { return make([]byte, 500) })
	if got := s.feed.bytes(); got != 500 {
		t.Errorf("with a frame: %d bytes, want 500", got)
	}
	for rv := uint64(12); rv <= 13; rv++ {
		s.Apply(Change{Entry: entry("a", "p2", rv, "")}, rv)
	}
	if got := s.feed.bytes(); got != 0 {
		t.Errorf("after its event was dropped: %d bytes, want 0", got)
	}
	if got := evs[0].Shared.Load("k", func() []byte { return []byte("late") }); string(got) != "late" {
		t.Errorf("Load after the drop = %q, want a value made for the reader", got)
	}
	if got := s.feed.bytes(); got != 0 {
		t.Errorf("after a late Load: %d bytes, want 0", got)
	}
}

// TestFeedByteBoundOverruns: a cursor behind what the byte bound dropped is
// overrun and a subscription from before it is not retained, never a gap;
// a cursor that read everything survives even a change larger than the
// bound.
func TestFeedByteBoundOverruns(t *testing.T) {
	s := NewStore(StoreConfig{FeedMaxBytes: 350})
	s.Replace([]*Entry{sizedEntry("a", "p1", 1, 100)}, 10)
	behind, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	for rv := uint64(11); rv <= 15; rv++ {
		s.Apply(Change{Entry: sizedEntry("a", "p1", rv, 100)}, rv)
	}
	if got := s.feed.bytes(); got > 350 {
		t.Errorf("the feed holds %d bytes, over its bound of 350", got)
	}
	if _, err := behind.Read(nil); !errors.Is(err, ErrFeedOverrun) {
		t.Errorf("Read behind the dropped changes = %v, want ErrFeedOverrun", err)
	}
	if _, err := s.Subscribe(10); !errors.Is(err, ErrNotRetained) {
		t.Errorf("Subscribe(10) = %v, want ErrNotRetained", err)
	}
	kept, err := s.Subscribe(12)
	if err != nil {
		t.Fatalf("Subscribe(12) = %v, want the kept changes", err)
	}
	if evs, err := kept.Read(nil); err != nil || len(evs) != 3 {
		t.Errorf("Read from 12 = %v, %v; want 13 to 15", feedEvents(evs), err)
	}

	s.Apply(Change{Entry: sizedEntry("a", "p1", 16, 1000)}, 16)
	if _, err := kept.Read(nil); err != nil {
		t.Fatal(err)
	}
	s.Apply(Change{Entry: sizedEntry("a", "p1", 17, 100)}, 17) // supersedes 1000 bytes
	evs, err := kept.Read(nil)
	if err != nil {
		t.Fatalf("a cursor at the newest change: Read = %v after one over the bound", err)
	}
	if diff := cmp.Diff([]string{"MODIFIED a/p1@17 prev@16"}, feedEvents(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestStatsFeedMaxBytes: the feed's byte bound is FeedMaxBytes, else the
// history's bound in force; negative is none.
func TestStatsFeedMaxBytes(t *testing.T) {
	tests := []struct {
		name string
		cfg  StoreConfig
		want int64
	}{
		{name: "none", cfg: StoreConfig{}, want: 0},
		{name: "own", cfg: StoreConfig{FeedMaxBytes: 1 << 20, HistoryMaxBytes: 5 << 20}, want: 1 << 20},
		{name: "history_bytes", cfg: StoreConfig{HistoryMaxBytes: 5 << 20}, want: 5 << 20},
		{name: "history_ratio_floor", cfg: StoreConfig{HistoryMaxRatio: 0.1}, want: HistoryMinBytes},
		{name: "negative_is_none", cfg: StoreConfig{FeedMaxBytes: -1, HistoryMaxBytes: 5 << 20}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Stats
			tc.cfg.OnPublish = func(s Stats) { got = s }
			s := NewStore(tc.cfg)
			s.Replace([]*Entry{entry("a", "p1", 1, "")}, 10)
			if got.FeedMaxBytes != tc.want {
				t.Errorf("FeedMaxBytes = %d, want %d", got.FeedMaxBytes, tc.want)
			}
		})
	}
}
