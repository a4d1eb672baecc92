package stores

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

// Consistency returns the checker that compares the registry's stores with the
// apiserver (for the debug handler, consistency.Handler).
func (reg *Registry) Consistency() *consistency.Checker {
	return reg.consistency
}

// Store returns the store of gvr in format, or nil if there is none, for
// inspection from outside a request (e.g. test/framework, with
// pkg/snapshot/snapshottest). The store may be dropped and replaced at any
// time; a request reaches its store through Acquire.
func (reg *Registry) Store(gvr schema.GroupVersionResource, format wire.Format) *snapshot.Store {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	if e, ok := reg.stores[storeKey{gvr: gvr, format: format}]; ok {
		return e.store
	}
	return nil
}

// consistencyView shows the registry's stores to the consistency checker
// (consistency.Cache) and lets it read the apiserver (consistency.Lister).
type consistencyView struct{ reg *Registry }

// Resources returns the resources with stores.
func (v consistencyView) Resources() []schema.GroupVersionResource {
	v.reg.mu.RLock()
	defer v.reg.mu.RUnlock()
	var gvrs []schema.GroupVersionResource
	for k := range v.reg.stores {
		if !slices.Contains(gvrs, k.gvr) {
			gvrs = append(gvrs, k.gvr)
		}
	}
	return gvrs
}

// Stores returns the synced stores of gvr; nothing is served from the others.
func (v consistencyView) Stores(gvr schema.GroupVersionResource) []consistency.Store {
	v.reg.mu.RLock()
	defer v.reg.mu.RUnlock()
	var stores []consistency.Store
	for k, e := range v.reg.stores {
		if k.gvr != gvr || k.format == wire.Table {
			// A Table's clock cells differ from the apiserver's by
			// design; its rows are checked as they arrive (table.go).
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
	v.reg.mu.Lock()
	defer v.reg.mu.Unlock()
	for k, e := range v.reg.stores {
		if k.gvr == gvr {
			v.reg.dropLocked(k, e, why)
		}
	}
}

// List reads gvr from the apiserver with listproxy's own credentials.
func (v consistencyView) List(ctx context.Context, gvr schema.GroupVersionResource, format wire.Format, q url.Values) (io.ReadCloser, error) {
	src := &apiSource{client: v.reg.client, host: strings.TrimSuffix(v.reg.cfg.Upstream.Host, "/"), path: collectionPath(gvr), format: format}
	resp, err := src.do(ctx, q, format.ListAccept())
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
