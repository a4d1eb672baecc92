package snapshot

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/utils/clock"
)

// HistoryMinBytes is the least history a relative bound (HistoryMaxRatio)
// allows a store: about a thousand changes of small objects. Not measured.
const HistoryMinBytes = 4 << 20

// snapshotOverheadBytes estimates the tree nodes one applied change copies,
// which the snapshot before it keeps alive. Measured with BenchmarkApplyClone
// at 100k pods: 3.3 KB per event (the object tree's path at degree 32; the
// index and count trees change only when a value or namespace count does).
const snapshotOverheadBytes = 4 << 10

// Sentinel errors returned by Store readers.
var (
	// ErrNotSynced: the store has not completed its first list.
	ErrNotSynced = errors.New("snapshot store not synced")
	// ErrNotRetained: no snapshot at the requested resourceVersion is held.
	ErrNotRetained = errors.New("snapshot not retained")
	// ErrStopped: the store was stopped.
	ErrStopped = errors.New("snapshot store stopped")
	// ErrCompacted: the requested resourceVersion is older than etcd's
	// compacted revision (see Store.Compact); the apiserver answers 410.
	ErrCompacted = errors.New("snapshot resourceVersion compacted")
)

// DefaultPinMaxAge bounds how long a pin lives however often it is
// refreshed: kube-apiserver's default --etcd-compaction-interval, after
// which the apiserver's own continue tokens of the same age expire too.
const DefaultPinMaxAge = 5 * time.Minute

// StoreConfig configures a Store.
type StoreConfig struct {
	// IndexField names an Entry.Fields key whose values are indexed ("" for
	// none), e.g. "spec.nodeName" for pods.
	IndexField string
	// History is how long a superseded snapshot stays available for exact
	// reads. 0 keeps none.
	History time.Duration
	// HistoryMaxBytes bounds the bytes held only by history snapshots
	// (objects since replaced or deleted). 0 means no bound.
	HistoryMaxBytes int64
	// HistoryMaxRatio bounds the same bytes relative to the latest
	// snapshot's object bytes (0.1: history adds at most 10%), but never
	// below HistoryMinBytes, so that small stores keep some history. 0 means
	// no relative bound. The bytes that pinned snapshots alone keep alive
	// (objects superseded since, or a whole list replaced by a relist) count
	// against the same bounds: when history and pins exceed them, the oldest
	// pins are released first, and trimming history by size releases the
	// pins older than it. A released pin's continue tokens are handed to
	// the apiserver.
	HistoryMaxRatio float64
	// PinnedSnapshots is the size of the LRU of snapshots pinned by issued
	// continue tokens. 0 selects 128.
	PinnedSnapshots int
	// PinTTL is how long a pinned snapshot stays available after its last
	// pin; 0 selects History. Later continuations are handed to the apiserver.
	PinTTL time.Duration
	// PinMaxAge is how long a pinned snapshot stays available after its
	// first pin, however often a walk re-pins it; 0 selects
	// DefaultPinMaxAge.
	PinMaxAge time.Duration
	// Clock drives history retention; nil selects the real clock.
	Clock clock.PassiveClock
	// EventHistory is how many recent changes the store keeps for
	// watchers (Subscribe); 0 selects DefaultEventHistory.
	EventHistory int
	// EventRetention, when positive, makes the store keep at least the
	// changes of the last EventRetention (its clock), growing its history
	// beyond EventHistory up to EventHistoryMax changes (0 selects
	// DefaultEventHistoryMax) and shrinking it back as they age, as the
	// apiserver's watch cache does (DefaultEventRetention). 0 keeps
	// EventHistory changes.
	EventRetention  time.Duration
	EventHistoryMax int
	// FeedMaxBytes bounds the bytes only those changes hold (see
	// Stats.FeedBytes): beyond it the oldest are dropped, as beyond
	// EventHistory, down to the newest one. 0 selects the history's bound
	// in force (HistoryMaxBytes and HistoryMaxRatio), so that the feed may
	// hold as many superseded bytes as history and a store at most twice
	// that beyond its live objects; not measured. Negative means no byte
	// bound, as does 0 when history has none.
	FeedMaxBytes int64
	// OnPublish, when set, is called (without locks held) after every
	// published view, e.g. to update metrics.
	OnPublish func(Stats)
	// Pack, when set, lays out items (in key order) the way the store's
	// list responses write them, returning them with the same bytes in one
	// new array (wire.PackItems). A listed collection is packed so, and
	// kept packed as it changes (see pack.go). Nil packs nothing.
	Pack func(items [][]byte) [][]byte
	// UID reads the metadata.uid of an entry's object, which shard
	// selectors by uid hash (WaitShard). Nil: every change wakes every
	// shard by uid.
	UID func(*Entry) (string, error)
}

// Stats describes the latest published view.
type Stats struct {
	Objects      int
	Bytes        int64
	HistoryDepth int
	HistoryBytes int64
	// HistoryMaxBytes is the byte bound on history now (the tighter of
	// HistoryMaxBytes and HistoryMaxRatio); 0 is no bound.
	HistoryMaxBytes int64
	// FeedBytes is what the feed of recent changes alone holds: the bytes
	// of the object versions its changes superseded that no history
	// snapshot holds any more (with the packed arrays and gzip chunks only
	// they keep, as history counts them), of deleted objects as the
	// apiserver sent them, and of the watch frames shared through its
	// events. Pins may hold some of the same versions.
	FeedBytes int64
	// FeedMaxBytes is the byte bound on FeedBytes now; 0 is no bound.
	FeedMaxBytes int64
	// GzipBytes is the compressed bytes of the gzip chunks cached on the
	// latest snapshot's objects (see Entry.Gzip). A replaced or deleted
	// object's chunks count as history from then on.
	GzipBytes int64
	RV        uint64
}

// view is what readers see; it is immutable once published.
type view struct {
	latest *Snapshot
	// progress is the resourceVersion up to which every change is in latest;
	// bookmarks move it past latest.rv.
	progress uint64
	// history holds superseded snapshots in ascending rv order followed by
	// latest. history[i] is the state for every rv in [history[i].rv, history[i+1].rv).
	history []*Snapshot
	synced  bool
	// next is closed when a newer view is published.
	next chan struct{}
}

// Store is one resource in one representation. One writer (the feeder)
// applies changes; any number of readers take snapshots without locks.
type Store struct {
	cfg   StoreConfig
	clock clock.PassiveClock
	pins  *lru.Cache[uint64, pin]
	// feed holds recent changes for watchers; appended under mu.
	feed *feed
	// wake wakes the watchers of one field value (WaitOn).
	wake *waker

	current atomic.Pointer[view]

	// mu serialises writers and guards the fields below.
	mu sync.Mutex
	// objects, counts and index are the writer's mutable trees; snapshots are
	// clones of them.
	objects *btree.BTreeG[*Entry]
	counts  *btree.BTreeG[nsCount]
	index   *btree.BTreeG[indexItem]
	bytes   int64
	// gzipBytes counts the gzip chunks of the objects tree's entries; a
	// new one per Replace (the old list's entries keep counting in the
	// old one).
	gzipBytes *atomic.Int64
	// supersededAt[i] and freed[i] belong to current.history[i]: when it was
	// superseded and how many object bytes only it (and older ones) hold.
	supersededAt []time.Time
	freed        []int64
	historyBytes int64
	stopped      bool
	pinsSwept    time.Time
	// gen counts Replace calls; freedTotal is the running total of bytes
	// superseded in this generation (see Snapshot.freedBefore).
	gen        uint64
	freedTotal int64
	// compacted is etcd's compacted revision as last told by Compact.
	compacted atomic.Uint64
	// lastBookmark is when MarkProgress was last called (Unix nanoseconds
	// of the store's clock), 0 if never.
	lastBookmark atomic.Int64
	// lastChange is when Apply was last called (Unix nanoseconds of the
	// store's clock), 0 if never.
	lastChange atomic.Int64
	// lastReplace is when Replace was last called, likewise.
	lastReplace atomic.Int64
}

// NewStore returns an empty, unsynced store.
func NewStore(cfg StoreConfig) *Store {
	if cfg.PinnedSnapshots <= 0 {
		cfg.PinnedSnapshots = 128
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	pins, _ := lru.New[uint64, pin](cfg.PinnedSnapshots) // error only for size <= 0
	feed := newFeed(cfg.EventHistory, cfg.EventRetention, cfg.EventHistoryMax)
	s := &Store{cfg: cfg, clock: cfg.Clock, pins: pins, feed: feed, wake: newWaker(cfg.UID)}
	s.resetTreesLocked()
	empty := s.snapshotLocked(0)
	s.current.Store(&view{latest: empty, history: []*Snapshot{empty}, next: make(chan struct{})})
	return s
}

func (s *Store) resetTreesLocked() {
	s.objects = btree.NewG(btreeDegree, lessEntry)
	s.counts = btree.NewG(btreeDegree, lessCount)
	s.index = nil
	if s.cfg.IndexField != "" {
		s.index = btree.NewG(btreeDegree, lessIndex)
	}
	s.bytes = 0
	s.gzipBytes = new(atomic.Int64)
}

func (s *Store) snapshotLocked(rv uint64) *Snapshot {
	snap := &Snapshot{rv: rv, objects: s.objects.Clone(), counts: s.counts.Clone(), bytes: s.bytes, gen: s.gen, freedBefore: s.freedTotal}
	if s.index != nil {
		snap.index = s.index.Clone()
	}
	return snap
}

// Synced reports whether the store holds a complete list.
func (s *Store) Synced() bool { return s.current.Load().synced }

// Latest returns the newest snapshot and the resourceVersion to serve it at
// (its progress, which bookmarks may have moved past the snapshot's own RV).
func (s *Store) Latest() (*Snapshot, uint64, error) {
	v := s.current.Load()
	if !v.synced {
		return nil, 0, ErrNotSynced
	}
	return v.latest, v.progress, nil
}

// WaitFor waits until the store has every change up to minRV and returns the
// latest snapshot with the resourceVersion to serve it at (≥ minRV).
func (s *Store) WaitFor(ctx context.Context, minRV uint64) (*Snapshot, uint64, error) {
	for {
		v := s.current.Load()
		if v.synced && v.progress >= minRV {
			return v.latest, v.progress, nil
		}
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return nil, 0, ErrStopped
		}
		select {
		case <-v.next:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// Progress returns the resourceVersion up to which the store has every change.
func (s *Store) Progress() uint64 { return s.current.Load().progress }

// Changed returns a channel closed when the store publishes a newer view.
func (s *Store) Changed() <-chan struct{} { return s.current.Load().next }

// WaitOn returns a Wait for the next change to an object that has, or had
// before the change, the field value k; it is also done at every
// continuity break. Progress alone (bookmarks) does not end it, nor do
// changes to other objects, however many: Cursor.Skip passes over those
// without reading them. Take it before Cursor.Read, as Changed.
func (s *Store) WaitOn(k FieldValue) Wait { return s.wake.waitOn(k) }

// WaitIn is WaitOn for the objects of namespace ns.
func (s *Store) WaitIn(ns string) Wait {
	return s.WaitOn(FieldValue{Field: FieldNamespace, Value: ns})
}

// WaitShard is WaitOn for the objects of sel's shard (KEP-5866): a change
// wakes the watchers of the shards its object is in only, the key (uid,
// read with StoreConfig.UID, or namespace) hashed once per change. sel is
// a selector of the apiserver's parser (k8s.io/apiserver/pkg/sharding),
// its ranges all on one key.
func (s *Store) WaitShard(sel sharding.Selector) Wait { return s.wake.waitShard(sel) }

// At returns the snapshot holding the state at exactly rv: a pinned one, or
// the newest retained snapshot at or before rv, provided the store has seen
// every change up to rv. It fails with ErrCompacted for rv older than the
// compacted revision (Compact), as etcd would.
func (s *Store) At(rv uint64) (*Snapshot, error) {
	v := s.current.Load()
	if !v.synced {
		return nil, ErrNotSynced
	}
	if rv < s.compacted.Load() {
		return nil, ErrCompacted
	}
	if p, ok := s.pins.Get(rv); ok {
		if s.pinLive(p, s.clock.Now()) {
			return p.snap, nil
		}
		s.pins.Remove(rv)
	}
	if rv > v.progress || len(v.history) == 0 || rv < v.history[0].rv {
		return nil, ErrNotRetained
	}
	// Binary search for the last snapshot with rv <= the requested one.
	lo, hi := 0, len(v.history)
	for lo < hi {
		mid := (lo + hi) / 2
		if v.history[mid].rv <= rv {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return v.history[lo-1], nil
}

// Pin keeps snap available as the state at rv for continue tokens issued at
// rv, beyond the history window: for PinTTL after the last Pin and at most
// PinMaxAge after the first, bounded by an LRU and, with the history, by the
// store's byte bounds. It does nothing for rv older than the compacted
// revision.
func (s *Store) Pin(rv uint64, snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv < s.compacted.Load() {
		return
	}
	now := s.clock.Now()
	if p, ok := s.pins.Peek(rv); ok && p.snap == snap && s.pinLive(p, now) {
		// A walk's next page: the same snapshot stays pinned, so the
		// bytes pins hold are unchanged and need no bounding.
		s.pins.Add(rv, pin{snap: snap, at: now, first: p.first})
		return
	}
	s.pins.Add(rv, pin{snap: snap, at: now, first: now})
	s.boundPinsLocked(s.current.Load().history)
}

// pin is a snapshot kept for continue tokens, and when it was first and
// last pinned.
type pin struct {
	snap  *Snapshot
	at    time.Time
	first time.Time
}

func (s *Store) pinTTL() time.Duration {
	if s.cfg.PinTTL > 0 {
		return s.cfg.PinTTL
	}
	return s.cfg.History
}

func (s *Store) pinMaxAge() time.Duration {
	if s.cfg.PinMaxAge > 0 {
		return s.cfg.PinMaxAge
	}
	return DefaultPinMaxAge
}

// pinLive reports whether p is still within its TTL and maximum age.
func (s *Store) pinLive(p pin, now time.Time) bool {
	return now.Sub(p.at) <= s.pinTTL() && now.Sub(p.first) <= s.pinMaxAge()
}

// Compact records etcd's compacted revision rev: the states at revisions
// older than rev can no longer be read from etcd, so the store drops the
// history snapshots and pins that only hold such states and At answers
// ErrCompacted for them, as the apiserver answers 410.
func (s *Store) Compact(rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.compacted.Load() {
		return
	}
	s.compacted.Store(rev)
	for _, pinned := range s.pins.Keys() {
		if pinned < rev {
			s.pins.Remove(pinned)
		}
	}
	old := s.current.Load()
	// history[i] holds the states in [history[i].rv, history[i+1].rv): it
	// goes when all of them are compacted. The latest always stays.
	drop := 0
	for drop < len(old.history)-1 && old.history[drop+1].rv <= rev {
		drop++
	}
	if drop == 0 {
		return
	}
	history := s.dropHistoryLocked(old.history, drop)
	s.boundFeedLocked(history)
	s.publishLocked(&view{latest: old.latest, progress: old.progress, history: history, synced: old.synced})
}

// expirePinsLocked releases pinned snapshots past their TTL, at most once a
// second, so that finished walks do not keep old objects alive.
func (s *Store) expirePinsLocked() {
	now := s.clock.Now()
	if now.Sub(s.pinsSwept) < time.Second {
		return
	}
	s.pinsSwept = now
	for _, rv := range s.pins.Keys() {
		if p, ok := s.pins.Peek(rv); ok && !s.pinLive(p, now) {
			s.pins.Remove(rv)
		}
	}
}

// pinnedBytesLocked estimates the bytes that pins alone keep alive, beyond
// history (whose oldest snapshot is oldest): for pins of the current
// generation older than history, the bytes superseded between the oldest
// such pin and oldest; for each older generation (before a relist), its
// whole list plus what was superseded between its pins.
func (s *Store) pinnedBytesLocked(oldest *Snapshot) int64 {
	type span struct {
		bytes          int64
		minFreed, maxF int64
	}
	gens := map[uint64]*span{}
	var total int64
	currentMin := oldest.freedBefore
	for _, rv := range s.pins.Keys() {
		p, ok := s.pins.Peek(rv)
		if !ok {
			continue
		}
		if p.snap.gen == s.gen {
			currentMin = min(currentMin, p.snap.freedBefore)
			continue
		}
		g, ok := gens[p.snap.gen]
		if !ok {
			g = &span{minFreed: p.snap.freedBefore, maxF: p.snap.freedBefore}
			gens[p.snap.gen] = g
		}
		g.bytes = max(g.bytes, p.snap.bytes)
		g.minFreed = min(g.minFreed, p.snap.freedBefore)
		g.maxF = max(g.maxF, p.snap.freedBefore)
	}
	total += oldest.freedBefore - currentMin
	for _, g := range gens {
		total += g.bytes + g.maxF - g.minFreed
	}
	return total
}

// boundPinsLocked releases pins, those of older generations first and then
// the oldest, while history and pins together exceed the byte bound.
func (s *Store) boundPinsLocked(history []*Snapshot) {
	bound := s.historyMaxBytesLocked()
	if bound <= 0 || len(history) == 0 {
		return
	}
	for s.pins.Len() > 0 && s.historyBytes+s.pinnedBytesLocked(history[0]) > bound {
		var victim uint64
		var victimSnap *Snapshot
		for _, rv := range s.pins.Keys() {
			p, ok := s.pins.Peek(rv)
			if !ok {
				continue
			}
			if victimSnap == nil || p.snap.gen < victimSnap.gen || (p.snap.gen == victimSnap.gen && rv < victim) {
				victim, victimSnap = rv, p.snap
			}
		}
		if victimSnap == nil {
			return
		}
		s.pins.Remove(victim)
	}
}

// Change is one object change fed to the store.
type Change struct {
	Deleted bool
	Entry   *Entry
}

// Replace installs a complete list at rv, dropping history (changes between
// the old state and rv were not observed) and marks the store synced. The
// store takes entries over: packing replaces the Raw of those not packed
// yet (see Pack).
func (s *Store) Replace(entries []*Entry, rv uint64) {
	s.lastReplace.Store(s.clock.Now().UnixNano())
	s.mu.Lock()
	s.resetTreesLocked()
	for _, e := range entries {
		s.upsertLocked(e)
	}
	s.packAllLocked()
	s.gen++
	s.freedTotal = 0
	snap := s.snapshotLocked(rv)
	s.supersededAt, s.freed, s.historyBytes = nil, nil, 0
	// Changes between the old state and rv were not observed: watchers of
	// the old state must start over.
	s.feed.reset(rv, true)
	s.wake.wakeAll()
	// Pins from before keep the old list alive: they count against the
	// bounds of the new one.
	s.boundPinsLocked([]*Snapshot{snap})
	s.publishLocked(&view{latest: snap, progress: rv, history: []*Snapshot{snap}, synced: true})
	s.mu.Unlock()
}

// Apply applies one change at rv and publishes a new snapshot. Changes must
// arrive in resourceVersion order.
func (s *Store) Apply(c Change, rv uint64) {
	s.lastChange.Store(s.clock.Now().UnixNano())
	s.mu.Lock()
	old := s.current.Load()
	ev := Event{Type: Added, RV: rv, Object: c.Entry, At: s.clock.Now(), Shared: &Shared{}}
	// size is what the change leaves held only by older snapshots and the
	// feed: the version it superseded, with what that alone keeps.
	var size eventSize
	if c.Deleted {
		ev.Type = Deleted
		size.owned = int64(len(c.Entry.Raw))
		if prev, ok := s.deleteLocked(c.Entry.Key); ok {
			size.superseded = s.supersededBytesLocked(prev)
			ev.Prev = prev
		}
	} else if prev, ok := s.upsertLocked(c.Entry); ok {
		size.superseded = s.supersededBytesLocked(prev)
		ev.Type, ev.Prev = Modified, prev
	}
	if seq, ok := s.feed.append(ev, size); ok {
		s.wake.changed(c.Entry, ev.Prev, seq)
	}
	// Each snapshot also holds the tree nodes the change copied.
	freed := snapshotOverheadBytes + size.superseded
	s.freedTotal += freed
	snap := s.snapshotLocked(rv)
	// Appending to old.history rather than to a copy is intentional: views
	// sharing a backing array only ever grow at its end (Replace starts a new
	// one) and readers of old.history never index past its length, so using
	// the spare capacity under mu cannot change what they see.
	history := append(old.history, snap) //nolint:gocritic // appendAssign: intentional, see above
	s.supersededAt = append(s.supersededAt, s.clock.Now())
	s.freed = append(s.freed, freed)
	s.historyBytes += freed
	history = s.trimHistoryLocked(history)
	s.boundFeedLocked(history)
	s.expirePinsLocked()
	s.boundPinsLocked(history)
	s.publishLocked(&view{latest: snap, progress: max(rv, old.progress), history: history, synced: old.synced})
	s.mu.Unlock()
}

// MarkProgress records that every change up to rv has been applied (a
// bookmark of the store's feed; see BookmarkedWithin).
func (s *Store) MarkProgress(rv uint64) {
	s.lastBookmark.Store(s.clock.Now().UnixNano())
	s.mu.Lock()
	old := s.current.Load()
	if rv > old.progress {
		s.publishLocked(&view{latest: old.latest, progress: rv, history: old.history, synced: old.synced})
	}
	s.mu.Unlock()
}

// BookmarkedWithin reports whether MarkProgress was called within d of now
// (the store's clock): evidence that the store's feed carries bookmarks.
func (s *Store) BookmarkedWithin(d time.Duration) bool {
	return s.within(s.lastBookmark.Load(), d)
}

// ChangedWithin reports whether the store applied a change within d of now
// (the store's clock): a busy resource, whose feed is likely to show its
// next change soon.
func (s *Store) ChangedWithin(d time.Duration) bool {
	return s.within(s.lastChange.Load(), d)
}

// FedWithin reports whether the store's feed showed life within d of now
// (the store's clock): a bookmark, a change, or a (re)list, after which
// its watch starts.
func (s *Store) FedWithin(d time.Duration) bool {
	return s.BookmarkedWithin(d) || s.ChangedWithin(d) || s.within(s.lastReplace.Load(), d)
}

// within reports whether at (Unix nanoseconds of the store's clock, 0 for
// never) lies within d of now.
func (s *Store) within(at int64, d time.Duration) bool {
	return at != 0 && s.clock.Since(time.Unix(0, at)) <= d
}

// AdvanceProgress records that the store's state is also the state at rv,
// proven elsewhere: the resource had no change in (held, rv]. It does so
// only if the store is synced and holds every change up to held at the
// moment it advances (a relist may have moved it back), and reports whether
// progress is now at least rv. Unlike MarkProgress it is no evidence of
// the feed's bookmarks.
func (s *Store) AdvanceProgress(held, rv uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.current.Load()
	switch {
	case !old.synced || s.stopped || old.progress < held:
		return false
	case old.progress >= rv:
		return true
	}
	s.publishLocked(&view{latest: old.latest, progress: rv, history: old.history, synced: old.synced})
	return true
}

// Unsync marks the store as not holding a usable list (its resource is gone)
// until the next Replace. Readers get ErrNotSynced.
func (s *Store) Unsync() {
	s.mu.Lock()
	old := s.current.Load()
	if old.synced {
		s.feed.reset(old.progress, false)
		s.wake.wakeAll()
		s.publishLocked(&view{latest: old.latest, progress: old.progress, history: old.history})
	}
	s.mu.Unlock()
}

// Stop wakes every waiter with ErrStopped.
func (s *Store) Stop() {
	s.mu.Lock()
	s.stopped = true
	old := s.current.Load()
	s.feed.reset(old.progress, false)
	s.wake.wakeAll()
	s.publishLocked(&view{latest: old.latest, progress: old.progress, history: old.history, synced: old.synced})
	s.mu.Unlock()
}

// trimHistoryLocked drops superseded snapshots past the retention window or
// the byte bound. history[len-1] is the latest and is never dropped.
func (s *Store) trimHistoryLocked(history []*Snapshot) []*Snapshot {
	cutoff := s.clock.Now().Add(-s.cfg.History)
	maxBytes := s.historyMaxBytesLocked()
	drop, trimmedBySize := 0, false
	for drop < len(s.supersededAt) {
		tooOld := !s.supersededAt[drop].After(cutoff)
		tooBig := maxBytes > 0 && s.historyBytes > maxBytes
		if !tooOld && !tooBig {
			break
		}
		trimmedBySize = trimmedBySize || tooBig
		s.historyBytes -= s.freed[drop]
		drop++
	}
	if drop == 0 {
		return history
	}
	if trimmedBySize {
		s.releasePinsBeforeLocked(history[drop].rv)
	}
	s.supersededAt = s.supersededAt[drop:]
	s.freed = s.freed[drop:]
	// Reslice rather than copy (readers may still read the dropped entries
	// through older views, so they cannot be cleared). The dropped prefix is
	// released when a later append reallocates, which keeps trimming O(1)
	// amortised at the cost of up to one window of extra history in memory.
	return history[drop:]
}

// dropHistoryLocked drops the oldest n superseded snapshots of history
// (n < len(history)) with their accounting.
func (s *Store) dropHistoryLocked(history []*Snapshot, n int) []*Snapshot {
	for _, f := range s.freed[:n] {
		s.historyBytes -= f
	}
	s.supersededAt = s.supersededAt[:copy(s.supersededAt, s.supersededAt[n:])]
	s.freed = s.freed[:copy(s.freed, s.freed[n:])]
	return slices.Clone(history[n:])
}

// supersededBytesLocked returns the bytes prev, an entry of the latest
// snapshot replaced or deleted in the writer's tree, leaves to older
// snapshots and the feed: its own, the rest of its packed array when that
// is moved, and its gzip chunks.
func (s *Store) supersededBytesLocked(prev *Entry) int64 {
	return int64(len(prev.Raw)) + s.supersededLocked(prev) + prev.detachGzip()
}

// boundFeedLocked bounds the feed's bytes now that history is history.
func (s *Store) boundFeedLocked(history []*Snapshot) {
	s.feed.bound(history[0].rv, s.feedMaxBytesLocked())
}

// feedMaxBytesLocked is the byte bound on the feed now; 0 is no bound.
func (s *Store) feedMaxBytesLocked() int64 {
	switch {
	case s.cfg.FeedMaxBytes > 0:
		return s.cfg.FeedMaxBytes
	case s.cfg.FeedMaxBytes < 0:
		return 0
	}
	return s.historyMaxBytesLocked()
}

// historyMaxBytesLocked is the byte bound on history now: the tighter of
// HistoryMaxBytes and HistoryMaxRatio (with its floor); 0 is no bound.
func (s *Store) historyMaxBytesLocked() int64 {
	bound := s.cfg.HistoryMaxBytes
	if s.cfg.HistoryMaxRatio > 0 {
		relative := max(int64(s.cfg.HistoryMaxRatio*float64(s.bytes)), HistoryMinBytes)
		if bound == 0 || relative < bound {
			bound = relative
		}
	}
	return bound
}

// releasePinsBeforeLocked releases pinned snapshots older than rv: the
// objects they alone keep would exceed the history bound.
func (s *Store) releasePinsBeforeLocked(rv uint64) {
	for _, pinned := range s.pins.Keys() {
		if pinned < rv {
			s.pins.Remove(pinned)
		}
	}
}

func (s *Store) publishLocked(v *view) {
	v.next = make(chan struct{})
	old := s.current.Swap(v)
	close(old.next)
	if s.cfg.OnPublish != nil {
		stats := Stats{
			Objects: v.latest.Len(), Bytes: v.latest.bytes,
			HistoryDepth: len(v.history) - 1, HistoryBytes: s.historyBytes, HistoryMaxBytes: s.historyMaxBytesLocked(),
			FeedBytes: s.feed.bytes(), FeedMaxBytes: s.feedMaxBytesLocked(), GzipBytes: s.gzipBytes.Load(),
			RV: v.progress,
		}
		// OnPublish must not call back into the store; it runs under mu so
		// that metrics follow publication order.
		s.cfg.OnPublish(stats)
	}
}

func (s *Store) upsertLocked(e *Entry) (*Entry, bool) {
	prev, replaced := s.objects.ReplaceOrInsert(e)
	if replaced {
		s.bytes -= int64(len(prev.Raw))
	} else {
		s.addCountLocked(e.Namespace(), 1)
	}
	e.attachGzip(s.gzipBytes)
	s.bytes += int64(len(e.Raw))
	if s.index != nil {
		value := e.Fields().Get(s.cfg.IndexField)
		if replaced {
			prevValue := prev.Fields().Get(s.cfg.IndexField)
			if prevValue == value {
				return prev, replaced
			}
			s.index.Delete(indexItem{value: prevValue, key: prev.Key})
		}
		s.index.ReplaceOrInsert(indexItem{value: value, key: e.Key})
	}
	return prev, replaced
}

func (s *Store) deleteLocked(key string) (*Entry, bool) {
	prev, ok := s.objects.Delete(&Entry{Key: key})
	if !ok {
		return nil, false
	}
	s.bytes -= int64(len(prev.Raw))
	s.addCountLocked(prev.Namespace(), -1)
	if s.index != nil {
		s.index.Delete(indexItem{value: prev.Fields().Get(s.cfg.IndexField), key: prev.Key})
	}
	return prev, true
}

func (s *Store) addCountLocked(namespace string, delta int) {
	if namespace == "" {
		return
	}
	c, _ := s.counts.Get(nsCount{namespace: namespace})
	c.namespace = namespace
	c.n += delta
	if c.n <= 0 {
		s.counts.Delete(c)
		return
	}
	s.counts.ReplaceOrInsert(c)
}
