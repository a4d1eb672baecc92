package snapshot

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	s := NewStore(StoreConfig{History: 150 * time.Second, HistoryMaxBytes: 1 << 30, HistoryMaxRatio: 0.1})
	s.Replace([]*Entry{big(1)}, 1)
	before := heapInUse()
	for rv := uint64(2); rv <= updates+1; rv++ {
		s.Apply(Change{Entry: big(rv)}, rv)
	}
	retained := int64(heapInUse()) - int64(before)
	runtime.KeepAlive(s)
	// History and the feed may each hold the bound (4 MiB here); the slack
	// is for the trees and events.
	if limit := int64(3 * HistoryMinBytes); retained > limit {
		t.Errorf("after %d updates of a %d-byte object the heap grew by %d bytes, want at most %d", updates, size, retained, limit)
	}
}
