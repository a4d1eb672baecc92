package lists

import (
	"context"
	"io"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/consistency"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Consistency returns the checker that compares Lists' stores with the
// apiserver (for the debug handler, consistency.Handler).
func (l *Lists) Consistency() *consistency.Checker {
	return l.consistency
}

// Store returns the store of gvr in format, or nil if there is none, for
// inspection from outside a request (e.g. test/framework, with
// pkg/snapshot/snapshottest). The store may be dropped and replaced at any
// time; a LIST reaches its store through storeFor.
func (l *Lists) Store(gvr schema.GroupVersionResource, format wire.Format) *snapshot.Store {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if e, ok := l.stores[storeKey{gvr: gvr, format: format}]; ok {
		return e.store
	}
	return nil
}

// consistencyView shows Lists' stores to the consistency checker
// (consistency.Cache) and lets it read the apiserver (consistency.Lister).
type consistencyView struct{ l *Lists }

// Resources returns the resources with stores.
func (v consistencyView) Resources() []schema.GroupVersionResource {
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	var gvrs []schema.GroupVersionResource
	for k := range v.l.stores {
		if !slices.Contains(gvrs, k.gvr) {
			gvrs = append(gvrs, k.gvr)
		}
	}
	return gvrs
}

// Stores returns the synced stores of gvr; nothing is served from the others.
func (v consistencyView) Stores(gvr schema.GroupVersionResource) []consistency.Store {
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	var stores []consistency.Store
	for k, e := range v.l.stores {
		if k.gvr != gvr {
			continue
		}
		snap, progress, err := e.store.Latest()
		if err != nil {
			continue
		}
		stores = append(stores, consistency.Store{Format: k.format, Snapshot: snap, Progress: progress})
	}
	return stores
}

// Drop drops every store of gvr; the next LIST of gvr passes through and
// starts a fresh store, which serves once it has synced.
func (v consistencyView) Drop(gvr schema.GroupVersionResource, why string) {
	v.l.mu.Lock()
	defer v.l.mu.Unlock()
	for k, e := range v.l.stores {
		if k.gvr == gvr {
			v.l.dropLocked(k, e, why)
		}
	}
}

// List reads gvr from the apiserver with listproxy's own credentials.
func (v consistencyView) List(ctx context.Context, gvr schema.GroupVersionResource, format wire.Format, q url.Values) (io.ReadCloser, error) {
	src := &apiSource{client: v.l.client, host: strings.TrimSuffix(v.l.cfg.Upstream.Host, "/"), path: collectionPath(gvr), format: format}
	resp, err := src.do(ctx, q, format.ListAccept())
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
