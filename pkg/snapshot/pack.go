package snapshot

// Packing lays the bytes of a store's objects out in large arrays, in key
// order, the way list responses write them (StoreConfig.Pack), so that a
// response can hand a run of consecutive objects to the socket in one write
// instead of copying each.
//
// An array lives as long as any of its objects does. When an object is
// replaced or deleted, its bytes in the array are dead; once more than
// packMaxDeadFraction of an array is dead, its live objects are moved to a
// new array (the store's latest snapshot gets copies of their entries; older
// snapshots keep the old ones). So the arrays hold at most a third more than
// the live bytes they pack.

// packTargetBytes is the size at which a packed array is closed and the
// next one begun. Each array a page of a response spans is a write of its
// own, and writes cost: a static Go server writing a 2.8 MiB page as four
// writes spent about 10% more CPU than as one (loopback, 2026-11-26). At
// 4 MiB a 500-object page of a list (about 2.9 MiB of pods) is one array, so
// a walk in pages of the feeder's size writes each page's items at once.
// Moving an array's live objects copies at most 3 MiB.
const packTargetBytes = 4 << 20

// packMaxDeadFraction is how much of a packed array may be dead before its
// live objects are moved (see above).
const packMaxDeadFraction = 0.25

// pack is one packed array's accounting, guarded by the store's mu.
type pack struct {
	// first and last are the keys of its first and last object; every
	// object still in it lies between them in key order.
	first, last string
	// bytes is the sum of its objects' Raw lengths; dead is the part of it
	// replaced or deleted since.
	bytes, dead int64
}

// Pack lays out the bytes of entries as StoreConfig.Pack does, so that
// Replace need not: a feeder packs each page of a list as it arrives, and the
// bytes the page was decoded into can be collected before the list ends.
// entries must be in no store yet, best in key order (as lists give them).
// Without StoreConfig.Pack it does nothing.
func (s *Store) Pack(entries []*Entry) {
	if s.cfg.Pack != nil {
		s.packEntries(entries)
	}
}

// packEntries packs entries, which no published snapshot holds, into new
// arrays of about packTargetBytes, replacing their Raw and setting their
// pack. It returns the number of bytes packed.
func (s *Store) packEntries(entries []*Entry) int64 {
	var total int64
	for len(entries) > 0 {
		n, size := 0, int64(0)
		for n < len(entries) && size < packTargetBytes {
			size += int64(len(entries[n].Raw))
			n++
		}
		chunk := entries[:n]
		entries = entries[n:]
		items := make([][]byte, len(chunk))
		p := &pack{first: chunk[0].Key, last: chunk[0].Key, bytes: size}
		for i, e := range chunk {
			items[i] = e.Raw
			p.first, p.last = min(p.first, e.Key), max(p.last, e.Key)
		}
		for i, raw := range s.cfg.Pack(items) {
			chunk[i].Raw = raw
			chunk[i].pack = p
		}
		total += size
	}
	return total
}

// packAllLocked packs the objects of the writer's tree that are not packed
// yet; no published snapshot holds the tree's entries (see Replace).
func (s *Store) packAllLocked() {
	if s.cfg.Pack == nil {
		return
	}
	var unpacked []*Entry
	s.objects.Ascend(func(e *Entry) bool {
		if e.pack != nil {
			s.packEntries(unpacked)
			unpacked = unpacked[:0]
			return true
		}
		unpacked = append(unpacked, e)
		return true
	})
	s.packEntries(unpacked)
}

// supersededLocked notes that prev, an entry of the latest snapshot, was
// replaced or deleted in the writer's tree. When that leaves too much of its
// array dead, the array's live objects are moved to a new one; it returns
// the bytes moved, which only older snapshots now hold in the old array.
func (s *Store) supersededLocked(prev *Entry) int64 {
	p := prev.pack
	if p == nil {
		return 0
	}
	p.dead += int64(len(prev.Raw))
	if float64(p.dead) <= packMaxDeadFraction*float64(p.bytes) {
		return 0
	}
	var live []*Entry
	s.objects.AscendRange(&Entry{Key: p.first}, &Entry{Key: p.last + "\x00"}, func(e *Entry) bool {
		if e.pack == p {
			live = append(live, e.movedCopy())
		}
		return true
	})
	if len(live) == 0 {
		return 0
	}
	moved := s.packEntries(live)
	for _, e := range live {
		old, _ := s.objects.ReplaceOrInsert(e)
		moved += old.detachGzip() // older snapshots keep its chunks
		e.attachGzip(s.gzipBytes)
	}
	return moved
}

// movedCopy is a copy of e, for the same object version, to be given new Raw
// bytes by packEntries. Its gzip cache starts empty.
func (e *Entry) movedCopy() *Entry {
	return e.WithRV(e.RV)
}
