// Package snapshottest helps tests that need a snapshot store in a state
// no apiserver would produce. It uses only pkg/snapshot's exported API and
// must not be imported outside tests.
package snapshottest

import (
	"errors"
	"fmt"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Corrupt makes s differ from the apiserver the way a lost or misapplied
// watch event would, for tests of consistency checks. It removes the
// objects with the keys in remove and gives the objects with the keys in
// setRV those resourceVersions (their bytes are unchanged), then installs
// the result as the latest snapshot at the same resourceVersion and
// progress. As after a relist (Store.Replace), the store's history is
// dropped and its watchers start over; later changes apply on top of the
// corrupted state. A change the store's feeder applies while Corrupt
// runs may be lost with the rest: corrupt a store whose resource does not
// change meanwhile. Corrupt fails, changing nothing, if s is not synced or
// a key is not held.
func Corrupt(s *snapshot.Store, remove []string, setRV map[string]uint64) error {
	snap, progress, err := s.Latest()
	if err != nil {
		return err
	}
	drop := map[string]bool{}
	for _, key := range remove {
		if _, ok := snap.Get(key); !ok {
			return fmt.Errorf("corrupt %q: not in the store", key)
		}
		drop[key] = true
	}
	for key := range setRV {
		if _, ok := snap.Get(key); !ok {
			return fmt.Errorf("corrupt %q: not in the store", key)
		}
	}
	var entries []*snapshot.Entry
	snap.Ascend(func(e *snapshot.Entry) bool {
		if rv, ok := setRV[e.Key]; ok {
			// Entries are immutable (and not copyable): replace, never modify.
			e = e.WithRV(rv)
		}
		if !drop[e.Key] {
			entries = append(entries, e)
		}
		return true
	})
	if latest, _, err := s.Latest(); err != nil || latest != snap {
		return errors.New("corrupt: the store changed meanwhile")
	}
	s.Replace(entries, snap.RV())
	s.MarkProgress(progress)
	return nil
}
