package lists

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// WatchTarget is the store and scope of a cacheable watch (ResolveWatch).
type WatchTarget struct {
	// Resource names the resource in metrics (group/resource); set
	// whenever the request resolved to a resource.
	Resource  string
	Format    wire.Format
	Type      wire.ObjectType
	Store     *snapshot.Store
	Namespace string
	// Match selects objects by the watch's selectors; nil selects all.
	Match func(*snapshot.Entry) bool
	// WatchListDefaults: the apiserver's release turns a watch from
	// resourceVersion "" or "0" into a watch-list (watch.Target).
	WatchListDefaults bool
	// WatchListGzip: the apiserver's release gzips watch-list responses
	// (watch.Target).
	WatchListGzip bool
	// Consistent proves a consistent read with etcd; nil without etcd.
	Consistent func(ctx context.Context) (*snapshot.Snapshot, uint64, bool)
	// Release ends the watch's hold on the store.
	Release func()
}

// CacheableWatch reports, without side effects, whether r is a watch of a
// known resource in a representation and with selectors a store serves.
func (l *Lists) CacheableWatch(r *http.Request, labelSelector, fieldSelector string) bool {
	_, _, ok := l.parseWatch(r, labelSelector, fieldSelector)
	return ok
}

// ResolveWatch returns the synced store and scope of the watch r, starting
// the store on first demand, or ok false (pass through) and why. The store
// is held (never idle) until Release is called.
func (l *Lists) ResolveWatch(r *http.Request, labelSelector, fieldSelector string) (WatchTarget, string, bool) {
	req, reason, ok := l.parseWatch(r, labelSelector, fieldSelector)
	if !ok {
		return WatchTarget{}, reason, false
	}
	resource := req.info.GVR.GroupResource().String()
	entry, ok := l.storeFor(req.info, req.format)
	if !ok || !entry.store.Synced() {
		return WatchTarget{Resource: resource}, string(ReasonNotSynced), false
	}
	entry.watchers.Add(1)
	t := WatchTarget{
		Resource:          resource,
		Format:            req.format,
		Type:              wire.ObjectType{GVK: req.info.GVR.GroupVersion().WithKind(req.info.Kind), Custom: req.info.Custom},
		Store:             entry.store,
		Namespace:         req.col.Namespace,
		WatchListDefaults: l.registry.watchListDefaults(),
		WatchListGzip:     l.registry.watchListGzip(),
		Release: func() {
			entry.lastUsed.Store(time.Now().UnixNano())
			entry.watchers.Add(-1)
		},
	}
	if req.selectors {
		labelSel, fieldSel := req.labelSel, req.fieldSel
		t.Match = func(e *snapshot.Entry) bool { return labelSel.Matches(e.Labels) && fieldSel.Matches(e.Fields) }
	}
	if l.cfg.Freshness != nil {
		// Proven exactly as a consistent LIST (freshness.Prover).
		t.Consistent = func(ctx context.Context) (*snapshot.Snapshot, uint64, bool) {
			snap, rv, _ := entry.prover.Consistent(ctx)
			return snap, rv, snap != nil
		}
	}
	return t, "", true
}

// parseWatch decides whether r is a watch of a known resource in a
// representation and with selectors listproxy serves.
func (l *Lists) parseWatch(r *http.Request, labelSelector, fieldSelector string) (listRequest, string, bool) {
	if r.Method != http.MethodGet {
		return listRequest{}, string(ReasonMethod), false
	}
	col, ok := parseCollection(r)
	if !ok {
		return listRequest{}, string(ReasonPath), false
	}
	info, ok := l.registry.lookup(col.GVR)
	if !ok {
		return listRequest{}, string(ReasonResource), false
	}
	if col.Namespace != "" && !info.Namespaced {
		return listRequest{}, string(ReasonPath), false
	}
	format, ok := negotiateWatchFormat(r, info.Custom)
	if !ok {
		return listRequest{}, string(ReasonMediaType), false
	}
	labelSel, err := labels.Parse(labelSelector)
	if err != nil {
		return listRequest{}, string(ReasonSelector), false
	}
	fieldSel, err := fields.ParseSelector(fieldSelector)
	if err != nil || !info.Fields.accepts(fieldSel, format.IsMeta()) {
		return listRequest{}, string(ReasonSelector), false
	}
	return listRequest{
		col: col, info: info, format: format,
		labelSel: labelSel, fieldSel: fieldSel,
		selectors: !labelSel.Empty() || !fieldSel.Empty(),
	}, "", true
}
