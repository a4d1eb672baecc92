package snapshot

import "fmt"

// CorruptForTest is for tests of consistency checks only: it makes the store
// differ from the apiserver the way a lost or misapplied watch event would.
// It removes the objects with the keys in remove and gives the objects with
// the keys in setRV those resourceVersions (their bytes are unchanged), then
// publishes the result as the latest snapshot at the same resourceVersion and
// progress, without a change event. Later changes apply on top of the
// corrupted state. It fails, changing nothing, if the store is not synced or
// a key is not held.
func (s *Store) CorruptForTest(remove []string, setRV map[string]uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.current.Load()
	if !old.synced {
		return ErrNotSynced
	}
	for _, key := range remove {
		if _, ok := s.objects.Get(&Entry{Key: key}); !ok {
			return fmt.Errorf("corrupt %q: not in the store", key)
		}
	}
	for key := range setRV {
		if _, ok := s.objects.Get(&Entry{Key: key}); !ok {
			return fmt.Errorf("corrupt %q: not in the store", key)
		}
	}
	for _, key := range remove {
		s.deleteLocked(key)
	}
	for key, rv := range setRV {
		if prev, ok := s.objects.Get(&Entry{Key: key}); ok {
			// Entries are immutable (and not copyable): replace, never modify.
			e := &Entry{Key: prev.Key, Namespace: prev.Namespace, Name: prev.Name, RV: rv, Labels: prev.Labels, Fields: prev.Fields, Raw: prev.Raw}
			s.upsertLocked(e)
		}
	}
	snap := s.snapshotLocked(old.latest.rv)
	// A new backing array: the latest snapshot is replaced, not appended.
	history := append(append([]*Snapshot(nil), old.history[:len(old.history)-1]...), snap)
	s.publishLocked(&view{latest: snap, progress: old.progress, history: history, synced: true})
	return nil
}
