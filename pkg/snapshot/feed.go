package snapshot

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEventHistory is how many recent changes a store keeps for watchers
// (StoreConfig.EventHistory). It bounds both how far behind a watcher may
// fall before it is ended and how old a resourceVersion a re-watch may start
// from. The apiserver's watch cache starts at 100 events and grows to keep
// about 75 s; 1024 covers a minute of ~17 changes/s per resource. Not
// measured.
const DefaultEventHistory = 1024

// Errors a Cursor returns.
var (
	// ErrFeedReset: the store broke continuity (a relist, its resource
	// gone, or the store stopped) after the cursor was opened; the watcher
	// must be ended so that its client re-establishes its state.
	ErrFeedReset = errors.New("snapshot feed reset")
	// ErrFeedOverrun: the cursor fell more than EventHistory changes behind
	// and the changes it had not read were dropped.
	ErrFeedOverrun = errors.New("snapshot feed overrun")
)

// Event is one change as a store applied it, in resourceVersion order.
type Event struct {
	// Type is Added, Modified or Deleted (from whether the key was present
	// before, and the change).
	Type EventType
	// RV is the change's resourceVersion.
	RV uint64
	// Object is the object after the change; for Deleted, the deleted object
	// as the apiserver sent it (carrying RV).
	Object *Entry
	// Prev is the object before the change; nil when the key was absent.
	Prev *Entry
	// At is when the store applied the change (its clock).
	At time.Time
	// Shared holds what readers derive from the event once for all of
	// them (the watch server's encoded frame); nil in events the store
	// did not apply itself.
	Shared *Shared
}

// Shared is one value derived from an event, made by its first reader and
// shared by every later reader asking for it under the same key. It lives
// as long as the event stays in the store's history. Safe for concurrent
// use.
type Shared struct {
	v atomic.Pointer[sharedValue]
}

type sharedValue struct {
	key any
	val []byte
}

// Load returns the value stored under key, making it with mk when none is
// stored yet. A key other than the stored one gets mk's value, not stored.
// Concurrent first readers may each make it; one value is kept.
func (s *Shared) Load(key any, mk func() []byte) []byte {
	if v := s.v.Load(); v != nil {
		if v.key == key {
			return v.val
		}
		return mk()
	}
	val := mk()
	if !s.v.CompareAndSwap(nil, &sharedValue{key: key, val: val}) {
		if v := s.v.Load(); v.key == key {
			return v.val
		}
	}
	return val
}

// feed is a store's bounded, in-order history of changes since its last
// continuity break. The writer appends under Store.mu and never waits for
// readers; readers are Cursors.
type feed struct {
	// mu guards every field below. Readers hold it only to copy events out.
	mu sync.RWMutex
	// ring holds the last len(ring) events; seq numbers events from 0 since
	// the store was created, and event seq lives at ring[seq%len(ring)].
	ring []Event
	// next is the seq of the next event to append; first the oldest kept.
	next, first uint64
	// since: every change with an RV above it is in the ring (from first).
	since uint64
	// gen counts continuity breaks; a cursor of an older gen is reset.
	gen uint64
	// open is false until the first Replace and after Unsync or Stop.
	open bool
}

func newFeed(capacity int) *feed {
	if capacity <= 0 {
		capacity = DefaultEventHistory
	}
	return &feed{ring: make([]Event, capacity)}
}

// append adds ev; the caller holds Store.mu.
func (f *feed) append(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open {
		return
	}
	n := uint64(len(f.ring))
	if f.next-f.first == n {
		// The oldest is dropped: changes after it are still all kept.
		f.since = f.ring[f.first%n].RV
		f.ring[f.first%n] = Event{}
		f.first++
	}
	f.ring[f.next%n] = ev
	f.next++
}

// reset starts a new continuity at rv (open) or closes the feed.
func (f *feed) reset(rv uint64, open bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.ring)
	f.first = f.next
	f.since = rv
	f.gen++
	f.open = open
}

// Cursor reads a store's changes after a resourceVersion, in order. It is
// not safe for concurrent use.
type Cursor struct {
	f   *feed
	gen uint64
	seq uint64
}

// Subscribe returns a cursor at the first change after rv. The store must
// hold every change after rv: ErrNotRetained when rv is older than its
// history of changes (or from before its last relist). rv may be past the
// store's progress when the caller proved that no change of the resource
// lies between the two (a consistent read); the cursor then starts at the
// next change.
func (s *Store) Subscribe(rv uint64) (*Cursor, error) {
	f := s.feed
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.open {
		return nil, ErrNotSynced
	}
	if rv < f.since {
		return nil, ErrNotRetained
	}
	n := uint64(len(f.ring))
	count := int(f.next - f.first)
	i := sort.Search(count, func(i int) bool { return f.ring[(f.first+uint64(i))%n].RV > rv })
	return &Cursor{f: f, gen: f.gen, seq: f.first + uint64(i)}, nil
}

// Read appends to dst the changes after the cursor (at most cap(dst)-len(dst)
// when dst has spare capacity, else up to 64) and advances it. It returns dst
// unchanged when there is none yet: wait for Store.Changed (taken before
// Read) and read again. ErrFeedReset and ErrFeedOverrun end the cursor.
func (c *Cursor) Read(dst []Event) ([]Event, error) {
	f := c.f
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.gen != c.gen || !f.open {
		return dst, ErrFeedReset
	}
	if c.seq < f.first {
		return dst, ErrFeedOverrun
	}
	room := cap(dst) - len(dst)
	if room <= 0 {
		room = 64
	}
	n := uint64(len(f.ring))
	for ; c.seq < f.next && room > 0; room-- {
		dst = append(dst, f.ring[c.seq%n])
		c.seq++
	}
	return dst, nil
}
