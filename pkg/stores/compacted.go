package stores

import (
	"context"
	"time"
)

// Compacted reports whether etcd has compacted revision rv; false without
// etcd.
func (reg *Registry) Compacted(ctx context.Context, rv uint64) bool {
	if reg.cfg.Freshness == nil {
		return false
	}
	if int64(rv) < reg.cfg.Freshness.CompactedRevision() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	compacted, err := reg.cfg.Freshness.RefreshCompaction(ctx)
	return err == nil && int64(rv) < compacted
}
