package lists

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/paging"
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
	// Wake is a field value every object Match selects has (wakeKey);
	// zero for none.
	Wake snapshot.FieldValue
	// WatchListDefaults: the apiserver's release turns a watch from
	// resourceVersion "" or "0" into a watch-list (watch.Target).
	WatchListDefaults bool
	// WatchListGzip: the apiserver's release gzips watch-list responses
	// for clients that accept gzip.
	WatchListGzip bool
	// Consistent proves a consistent read with etcd; nil without etcd.
	Consistent func(ctx context.Context) (*snapshot.Snapshot, uint64, bool)
	// NotOlderThan finds the snapshot of a watch-list from resourceVersion
	// rv, as a NotOlderThan LIST does (freshness.Prover.NotOlderThan):
	// tooLarge is the apiserver's 504 Status when etcd itself had not
	// reached rv in time; a nil snapshot without it passes through.
	NotOlderThan func(ctx context.Context, rv uint64, wait time.Duration) (snap *snapshot.Snapshot, at uint64, tooLarge *metav1.Status)
	// Holds proves with etcd that the store holds every change up to rv
	// (freshness.Prover.Holds); false without etcd or when it cannot be
	// proven in time.
	Holds func(ctx context.Context, rv uint64) bool
	// Warnings are the deprecation texts of the resource's version.
	Warnings []string
	// Admit admits a watch-list's initial events through the LIST
	// admission (watch.Target.Admit).
	Admit func(ctx context.Context, weight int64) (release func(), deadline time.Time, rejected *apierrors.StatusError)
	// Release ends the watch's hold on the store.
	Release func()
	// Reject, set when ResolveWatch returns ok false for a store that did
	// not sync within Config.ColdStoreWait, writes the apiserver's answer
	// for an unready watch cache (429) instead of passing through.
	Reject func(http.ResponseWriter)
}

// CacheableWatch reports, without side effects, whether r is a watch of a
// known resource in a representation and with selectors a store serves;
// when not, reason says why and resource names the resource when known.
func (l *Lists) CacheableWatch(r *http.Request, labelSelector, fieldSelector string) (resource, reason string, ok bool) {
	req, reason, ok := l.parseWatch(r, labelSelector, fieldSelector)
	if req.info != nil {
		resource = req.info.GVR.GroupResource().String()
	}
	return resource, reason, ok
}

// ResolveWatch returns the synced store and scope of the watch r, starting
// the store on first demand if admitted (admission.go) and waiting for its first list up to
// Config.ColdStoreWait, or ok false (pass through, or Reject) and why. The store
// is held (never idle) until Release is called.
func (l *Lists) ResolveWatch(r *http.Request, labelSelector, fieldSelector string) (WatchTarget, string, bool) {
	req, reason, ok := l.parseWatch(r, labelSelector, fieldSelector)
	if !ok {
		t := WatchTarget{}
		if req.info != nil {
			t.Resource = req.info.GVR.GroupResource().String()
		}
		return t, reason, false
	}
	resource := req.info.GVR.GroupResource().String()
	entry, refused, ok := l.storeFor(r.Context(), req.info, req.format, false)
	if !ok {
		return WatchTarget{Resource: resource}, string(refused), false
	}
	if !awaitSynced(r.Context(), entry, l.cfg.ColdStoreWait) {
		// As the apiserver's unready watch cache: 429 (cold.go), unless the
		// store's list is failing.
		t := WatchTarget{Resource: resource}
		if !listFailing(entry) && r.Context().Err() == nil {
			t.Reject = writeNotReady(entry)
		}
		return t, string(ReasonNotSynced), false
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
		Warnings:          req.info.Warnings,
		Admit:             l.admitWatchList,
		Release: func() {
			entry.lastUsed.Store(time.Now().UnixNano())
			entry.watchers.Add(-1)
		},
	}
	if req.selectors {
		labelSel, fieldSel := req.labelSel, req.fieldSel
		t.Match = func(e *snapshot.Entry) bool { return labelSel.Matches(e.Labels) && fieldSel.Matches(e.Fields) }
		t.Wake = wakeKey(fieldSel)
	}
	t.NotOlderThan = func(ctx context.Context, rv uint64, wait time.Duration) (*snapshot.Snapshot, uint64, *metav1.Status) {
		snap, at, err := entry.prover.NotOlderThan(ctx, rv, wait)
		var tooLarge *freshness.TooLargeError
		if errors.As(err, &tooLarge) {
			status := paging.TooLargeResourceVersionError(tooLarge.RV, tooLarge.Current).ErrStatus
			return nil, 0, &status
		}
		return snap, at, nil
	}
	t.Holds = func(ctx context.Context, rv uint64) bool {
		return rv <= entry.store.Progress() || entry.prover.Holds(ctx, rv)
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

// wakeKey returns a field value that every object sel selects has: an
// exact requirement (= or ==) of sel, preferring metadata.name (a single
// object), then any other field but metadata.namespace (a node's pods),
// then metadata.namespace. Zero when sel requires none. A watcher waits
// for changes to objects with that value only (snapshot.Store.WaitOn),
// as the apiserver's watch cache dispatches a pod's change to the watchers
// of its node only.
func wakeKey(sel fields.Selector) snapshot.FieldValue {
	rank := func(field string) int {
		switch field {
		case snapshot.FieldName:
			return 0
		case snapshot.FieldNamespace:
			return 2
		}
		return 1
	}
	var key snapshot.FieldValue
	for _, req := range sel.Requirements() {
		if req.Operator != selection.Equals && req.Operator != selection.DoubleEquals {
			continue
		}
		if key.Field == "" || rank(req.Field) < rank(key.Field) {
			key = snapshot.FieldValue{Field: req.Field, Value: req.Value}
		}
	}
	return key
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
		return listRequest{info: info}, string(ReasonPath), false
	}
	format, ok := negotiateWatchFormat(r, info.Custom)
	if !ok {
		return listRequest{info: info}, string(ReasonMediaType), false
	}
	labelSel, err := labels.Parse(labelSelector)
	if err != nil {
		return listRequest{info: info}, string(ReasonSelector), false
	}
	fieldSel, err := fields.ParseSelector(fieldSelector)
	if err != nil || !info.Fields.accepts(fieldSel, format.IsMeta()) {
		return listRequest{info: info}, string(ReasonSelector), false
	}
	return listRequest{
		col: col, info: info, format: format,
		labelSel: labelSel, fieldSel: fieldSel,
		selectors: !labelSel.Empty() || !fieldSel.Empty(),
	}, "", true
}
