package snapshot

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEventHistory is how many recent changes a store keeps for watchers
// (StoreConfig.EventHistory), and the least it keeps when it grows to keep
// EventRetention of them. It bounds both how far behind a watcher may fall
// before it is ended and how old a resourceVersion a re-watch may start
// from. StoreConfig.FeedMaxBytes may keep fewer.
const DefaultEventHistory = 1024

// DefaultEventRetention and DefaultEventHistoryMax are the apiserver's
// watch cache's: it keeps the changes of the last 75 s (one periodic
// bookmark's interval and a margin), growing its history up to 100 × 1024
// events (eventFreshDuration, defaultUpperBoundCapacity).
const (
	DefaultEventRetention  = 75 * time.Second
	DefaultEventHistoryMax = 100 * 1024
)

// Errors a Cursor returns.
var (
	// ErrFeedReset: the store broke continuity (a relist, its resource
	// gone, or the store stopped) after the cursor was opened; the watcher
	// must be ended so that its client re-establishes its state.
	ErrFeedReset = errors.New("snapshot feed reset")
	// ErrFeedOverrun: the cursor fell behind the changes the feed keeps
	// (EventHistory of them, fewer when they hold more than FeedMaxBytes)
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
// as long as the event stays in the store's feed. Safe for concurrent
// use.
type Shared struct {
	v atomic.Pointer[sharedValue]
	// bytes, when set, counts the bytes of the stored value (the feed's
	// frame bytes); set before the event is published.
	bytes *atomic.Int64
}

type sharedValue struct {
	key any
	val []byte
}

// droppedKey marks a Shared whose event left the feed: it stores nothing
// more, so that what readers still make with it is not counted.
type droppedKey struct{}

var droppedShared = &sharedValue{key: droppedKey{}}

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
		return val
	}
	if s.bytes != nil {
		s.bytes.Add(int64(len(val)))
	}
	return val
}

// drop releases the stored value and stores nothing more; its bytes are
// no longer counted.
func (s *Shared) drop() {
	if old := s.v.Swap(droppedShared); old != nil && old != droppedShared && s.bytes != nil {
		s.bytes.Add(-int64(len(old.val)))
	}
}

// feed is a store's bounded, in-order history of changes since its last
// continuity break. The writer appends under Store.mu and never waits for
// readers; readers are Cursors.
//
// It is bounded by count (its ring) and by bytes: the bytes only it holds
// (see Stats.FeedBytes) are those of the object versions its events
// superseded before the oldest history snapshot (held by no snapshot), of
// deleted objects as the apiserver sent them, and of the frames readers
// shared through its events. Beyond either bound the oldest events are
// dropped, the newest is always kept.
type feed struct {
	// mu guards every field below. Readers hold it only to copy events out.
	mu sync.RWMutex
	// ring holds the last len(ring) events; seq numbers events from 0 since
	// the store was created, and event seq lives at ring[seq%len(ring)].
	// It grows and shrinks between minEvents and maxEvents (resizeLocked).
	ring []Event
	// sizes[i] is what ring[i] holds beyond the live snapshot.
	sizes []eventSize
	// next is the seq of the next event to append; first the oldest kept.
	next, first uint64
	// since: every change with an RV above it is in the ring (from first).
	since uint64
	// gen counts continuity breaks; a cursor of an older gen is reset.
	gen uint64
	// open is false until the first Replace and after Unsync or Stop.
	open bool
	// uncovered is the first seq whose superseded version history may
	// still hold; superseded counts the bytes of those before it (from
	// first), owned the bytes of every kept event's own object.
	uncovered         uint64
	superseded, owned int64
	frames            atomic.Int64
	// retention, when positive, is how long a change is kept at least (up
	// to maxEvents of them); minEvents is the ring's least size.
	retention            time.Duration
	minEvents, maxEvents int
}

// eventSize is what an event holds beyond the live snapshot.
type eventSize struct {
	// superseded: the bytes of the version it replaced or deleted (with
	// the packed array that version alone keeps, and its gzip chunks);
	// history holds them too while it holds the state before the event.
	superseded int64
	// owned: the bytes of a deleted object as the apiserver sent it, which
	// no snapshot holds.
	owned int64
}

// newFeed returns a closed feed of capacity events (0: DefaultEventHistory)
// that, with a positive retention, grows to keep that long of changes, up
// to maxEvents (0: DefaultEventHistoryMax).
func newFeed(capacity int, retention time.Duration, maxEvents int) *feed {
	if capacity <= 0 {
		capacity = DefaultEventHistory
	}
	if maxEvents <= 0 {
		maxEvents = DefaultEventHistoryMax
	}
	return &feed{
		ring: make([]Event, capacity), sizes: make([]eventSize, capacity),
		retention: retention, minEvents: capacity, maxEvents: max(maxEvents, capacity),
	}
}

// resizeLocked sizes the ring, when it is full, to keep at least retention
// of changes before now, as the apiserver's watch cache sizes its history
// (resizeCacheLocked): it doubles, up to maxEvents, while its oldest change
// is younger than retention; it halves, down to minEvents, dropping the
// oldest half, once even the newest quarter starts with an older change.
// Without retention the ring keeps its size.
func (f *feed) resizeLocked(now time.Time) {
	n := uint64(len(f.ring))
	if f.retention <= 0 || f.next-f.first < n {
		return
	}
	switch {
	case len(f.ring) < f.maxEvents && now.Sub(f.ring[f.first%n].At) < f.retention:
		f.relayoutLocked(min(2*len(f.ring), f.maxEvents))
	case len(f.ring) > f.minEvents && now.Sub(f.ring[(f.next-n/4)%n].At) > f.retention:
		size := max(len(f.ring)/2, f.minEvents)
		for f.next-f.first > uint64(size) {
			f.evictLocked()
		}
		f.relayoutLocked(size)
	}
}

// relayoutLocked moves the kept events into a ring of size events, which
// holds them all.
func (f *feed) relayoutLocked(size int) {
	ring, sizes := make([]Event, size), make([]eventSize, size)
	n, m := uint64(len(f.ring)), uint64(size)
	for seq := f.first; seq < f.next; seq++ {
		ring[seq%m], sizes[seq%m] = f.ring[seq%n], f.sizes[seq%n]
	}
	f.ring, f.sizes = ring, sizes
}

// append adds ev, which holds size beyond the live snapshot, and returns
// its sequence number; ok is false when the feed is closed. The caller
// holds Store.mu and bounds the feed's bytes next (bound).
func (f *feed) append(ev Event, size eventSize) (seq uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open {
		return 0, false
	}
	f.resizeLocked(ev.At)
	n := uint64(len(f.ring))
	if f.next-f.first == n {
		// The oldest is dropped: changes after it are still all kept.
		f.evictLocked()
	}
	if ev.Shared != nil {
		ev.Shared.bytes = &f.frames
	}
	f.ring[f.next%n] = ev
	f.sizes[f.next%n] = size
	f.owned += size.owned
	f.next++
	return f.next - 1, true
}

// bound notes that history holds no state before oldestRV (the RV of its
// oldest snapshot), then drops the oldest events while the feed holds more
// than maxBytes (none when maxBytes <= 0), keeping the newest. A cursor
// that had not read a dropped event is overrun (ErrFeedOverrun), unless a
// Wait proves the event was not its (Cursor.Skip).
func (f *feed) bound(oldestRV uint64, maxBytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open {
		return
	}
	n := uint64(len(f.ring))
	// The version an event at rv superseded is in history while history
	// holds a state before rv.
	for ; f.uncovered < f.next && f.ring[f.uncovered%n].RV <= oldestRV; f.uncovered++ {
		f.superseded += f.sizes[f.uncovered%n].superseded
	}
	if maxBytes <= 0 {
		return
	}
	for f.next-f.first > 1 && f.bytesLocked() > maxBytes {
		f.evictLocked()
	}
}

// evictLocked drops the oldest event.
func (f *feed) evictLocked() {
	i := f.first % uint64(len(f.ring))
	ev := f.ring[i]
	f.since = ev.RV
	if f.first < f.uncovered {
		f.superseded -= f.sizes[i].superseded
	}
	f.owned -= f.sizes[i].owned
	if ev.Shared != nil {
		ev.Shared.drop()
	}
	f.ring[i], f.sizes[i] = Event{}, eventSize{}
	f.first++
	f.uncovered = max(f.uncovered, f.first)
}

// bytesLocked returns the bytes only the feed holds.
func (f *feed) bytesLocked() int64 {
	return f.superseded + f.owned + f.frames.Load()
}

// bytes returns the bytes only the feed holds.
func (f *feed) bytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.bytesLocked()
}

// reset starts a new continuity at rv (open) or closes the feed.
func (f *feed) reset(rv uint64, open bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq := f.first; seq < f.next; seq++ {
		if sh := f.ring[seq%uint64(len(f.ring))].Shared; sh != nil {
			sh.drop()
		}
	}
	clear(f.ring)
	clear(f.sizes)
	f.first = f.next
	f.uncovered = f.next
	f.superseded, f.owned = 0, 0
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
	// after is the resourceVersion the cursor was subscribed at: changes
	// at or before it, appended later, are skipped.
	after uint64
}

// Subscribe returns a cursor at the first change after rv. The store must
// hold every change after rv: ErrNotRetained when rv is older than its
// history of changes (or from before its last relist). rv may be past the
// store's progress when the caller showed that the resource has reached
// rv, so that the store's watch will deliver every change after it; the
// cursor then starts at the first change after rv, skipping those up to
// rv that the store receives later.
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
	return &Cursor{f: f, gen: f.gen, seq: f.first + uint64(i), after: rv}, nil
}

// FeedSince returns the resourceVersion after which the feed holds every
// change (Subscribe takes any rv at or above it); false while the store
// is not synced.
func (s *Store) FeedSince() (uint64, bool) {
	f := s.feed
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.since, f.open
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
	for ; c.seq < f.next && room > 0; c.seq++ {
		if ev := f.ring[c.seq%n]; ev.RV > c.after {
			dst = append(dst, ev)
			room--
		}
	}
	return dst, nil
}

// Skip advances the cursor past the changes that w proves were not to
// objects with w's field value: those since w was taken up to the change
// that ended it, or up to the newest change while it waits. It returns
// the resourceVersion of the last change skipped, 0 when it skipped none.
// w must have been taken (Store.WaitOn) before the cursor last read every
// change it had, as a watcher takes it before it reads and waits; a Wait
// ended by a continuity break skips nothing, so that Read reports it.
func (c *Cursor) Skip(w Wait) uint64 {
	from, to, ok := w.skipTo()
	if !ok || c.seq < from || c.seq >= to {
		return 0
	}
	f := c.f
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.gen != c.gen || !f.open || to > f.next {
		return 0
	}
	c.seq = to
	// The last change skipped may have left the feed already; then the
	// feed's since is its RV when it was the last to leave, and otherwise
	// the cursor is overrun, as Read reports.
	switch last := to - 1; {
	case last >= f.first:
		return f.ring[last%uint64(len(f.ring))].RV
	case last+1 == f.first:
		return f.since
	}
	return 0
}
