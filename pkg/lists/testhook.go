package lists

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// StoreForTest is for tests only (e.g. with snapshot.Store.CorruptForTest):
// it returns the store of gvr in format, or nil if there is none. The store
// may be dropped and replaced at any time.
func (l *Lists) StoreForTest(gvr schema.GroupVersionResource, format wire.Format) *snapshot.Store {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if e, ok := l.stores[storeKey{gvr: gvr, format: format}]; ok {
		return e.store
	}
	return nil
}
