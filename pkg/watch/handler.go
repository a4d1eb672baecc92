package watch

import (
	"context"
	"errors"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Handler offers cacheable watches to a Server, resolving each to a store
// of a registry. Its methods make it the edge's watch server.
type Handler struct {
	srv    *Server
	stores *stores.Registry
	// admit admits watch-lists' initial events as LISTs are admitted
	// (Target.Admit); nil admits every one at once.
	admit Admitter
}

// NewHandler returns a Handler serving watches of reg's stores with srv;
// admit, when not nil, admits watch-lists' initial events (Target.Admit).
func NewHandler(srv *Server, reg *stores.Registry, admit Admitter) *Handler {
	return &Handler{srv: srv, stores: reg, admit: admit}
}

// parse decides, without side effects, whether r is a watch a store could
// serve; when not, reason says why (and req.Resource is set when known).
func (h *Handler) parse(r *http.Request) (d Decision, req collection.Request, reason Reason, ok bool) {
	d = Decide(r.URL.RawQuery)
	if d.Action == PassThrough {
		return d, req, d.Reason, false
	}
	if d.ShardSelector != "" && !h.srv.cfg.ServeShardSelectors {
		return d, req, ReasonShardSelector, false
	}
	req, why, ok := collection.Parse(r, h.stores, collection.Watch, d.LabelSelector, d.FieldSelector, d.ShardSelector)
	if ok && d.IncludeObject && req.Format != wire.Table {
		return d, req, ReasonQuery, false
	}
	return d, req, Reason(why), ok
}

// Cacheable reports, without side effects, whether r is a watch listproxy
// could serve (in service mode, only those are authorized by listproxy).
func (h *Handler) Cacheable(r *http.Request) bool {
	_, _, _, ok := h.parse(r)
	return ok
}

// PassedThrough counts the watch r that the edge passes through without
// offering it, for reason; "" names the reason Cacheable had.
func (h *Handler) PassedThrough(r *http.Request, reason string) {
	resource, why := "", Reason(reason)
	if reason == "" {
		var req collection.Request
		_, req, why, _ = h.parse(r)
		resource = req.ResourceName()
	}
	h.srv.PassedThrough(resource, why)
}

// ServeWatch serves r from a snapshot store, or returns false having
// written nothing, in which case r must pass through. The store is
// started on first demand if admitted, and held until the watch ends.
func (h *Handler) ServeWatch(w http.ResponseWriter, r *http.Request) bool {
	d, req, reason, ok := h.parse(r)
	resource := req.ResourceName()
	if !ok {
		h.srv.PassedThrough(resource, reason)
		return false
	}
	if req.ShardErr != nil {
		// The apiserver's registry refuses the shard selector before it
		// reads its store, with a Status, not an ERROR event.
		httpapi.SetAPIServerHeaders(w.Header(), r, req.Resource.Warnings)
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, paging.InvalidShardSelectorError(req.ShardErr))
		return true
	}
	handle, refused, ok := h.stores.Acquire(r.Context(), req.Resource, req.Format, false)
	if !ok {
		h.srv.PassedThrough(resource, Reason(refused))
		return false
	}
	defer handle.Release()
	if !handle.AwaitSynced(r.Context()) {
		// As the apiserver's unready watch cache: 429, unless the
		// store's list is failing or it was dropped
		// (stores.Handle.NotReady), or the client left.
		if status := handle.NotReady(); status != nil && r.Context().Err() == nil {
			w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
			httpapi.WriteStatus(w, status)
			return true
		}
		h.srv.PassedThrough(resource, ReasonNotSynced)
		return false
	}
	t := h.target(req, handle)
	if req.Format == wire.Table {
		head := handle.TableHead()
		if head == nil || head.Columns == nil {
			h.srv.PassedThrough(resource, ReasonNotSynced)
			return false
		}
		t.Table = &TableTarget{GroupVersion: req.Table.GroupVersion, Include: req.Table.Include, Columns: head.Columns, Bookmark: head.Bookmark}
	}
	served, reason := h.srv.Serve(w, r, d, t)
	if !served {
		h.srv.PassedThrough(resource, reason)
	}
	return served
}

// target is the Target of a parsed watch served from handle's store.
func (h *Handler) target(req collection.Request, handle *stores.Handle) Target {
	res := req.Resource
	t := Target{
		Resource:          req.ResourceName(),
		Format:            req.Format,
		Type:              wire.ObjectType{GVK: res.GVR.GroupVersion().WithKind(res.Kind), Custom: res.Custom},
		Store:             handle.Store(),
		Namespace:         req.Namespace,
		WatchListDefaults: h.stores.WatchListDefaults(),
		WatchListGzip:     h.stores.WatchListGzip(),
		Warnings:          res.Warnings,
		Admit:             h.admit,
	}
	if req.Selective {
		// Match checks the shard selector too, for each change the watcher
		// is woken for: by a field value (Wake), a namespace or its shard.
		t.Match = req.Match
		t.Wake = wakeKey(req.Fields)
		t.Shard = req.Shard
		t.ShardOnly = req.Labels.Empty() && req.Fields.Empty()
	}
	// A watch-list's initial events are a LIST's first page.
	initial := req.Select(true)
	t.Initial = &initial
	prover := handle.Prover()
	t.NotOlderThan = func(ctx context.Context, rv uint64, wait time.Duration) (*snapshot.Snapshot, uint64, *metav1.Status) {
		snap, at, err := prover.NotOlderThan(ctx, rv, wait)
		var tooLarge *freshness.TooLargeError
		if errors.As(err, &tooLarge) {
			status := paging.TooLargeResourceVersionError(tooLarge.RV, tooLarge.Current).ErrStatus
			return nil, 0, &status
		}
		return snap, at, nil
	}
	t.Holds = func(ctx context.Context, rv uint64) bool {
		return rv <= t.Store.Progress() || prover.Holds(ctx, rv)
	}
	t.Unchanged = prover.Unchanged
	if h.stores.ProvesConsistentReads() {
		// Proven exactly as a consistent LIST (freshness.Prover).
		t.Consistent = func(ctx context.Context) (*snapshot.Snapshot, uint64, bool) {
			snap, rv, _ := prover.Consistent(ctx)
			return snap, rv, snap != nil
		}
	}
	return t
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
