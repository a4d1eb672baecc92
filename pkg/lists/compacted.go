package lists

import (
	"context"
	"time"
)

// compacted reports whether etcd has compacted revision rv.
func (l *Lists) compacted(ctx context.Context, rv uint64) bool {
	if l.cfg.Freshness == nil {
		return false
	}
	if int64(rv) < l.cfg.Freshness.CompactedRevision() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	compacted, err := l.cfg.Freshness.RefreshCompaction(ctx)
	return err == nil && int64(rv) < compacted
}
