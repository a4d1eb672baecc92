package stores

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// NewResource describes a built-in resource (or, with custom, a custom
// resource without selectable fields) as discovery would, for a registry
// built with NewStatic.
func NewResource(gvr schema.GroupVersionResource, kind string, namespaced, custom bool) *Resource {
	return &Resource{
		GVR: gvr, Kind: kind, Namespaced: namespaced, Custom: custom,
		Fields:      fieldsFor(gvr.GroupResource(), custom, namespaced, nil),
		fingerprint: fmt.Sprintf("%s/%v/%v", kind, namespaced, custom),
	}
}

// StaticStore is a running store given to NewStatic.
type StaticStore struct {
	Resource *Resource
	Format   wire.Format
	// Store is the store, synced or not; it has no feeder, so it changes
	// only as its owner changes it.
	Store *snapshot.Store
	// Envelope is the envelope of the apiserver's lists of the resource.
	Envelope wire.ListEnvelope
	// Bytes is what the store holds as last published (MaxStoreBytes): it
	// counts as listed, whether synced or not.
	Bytes int64
	// TableHead is the head of a Table store's responses (format
	// wire.Table); its entries' Extra are *TableRow.
	TableHead *TableHead
}

// NewStatic returns a registry that knows resources (and those of stores)
// without reading discovery, and runs stores without an apiserver behind
// them: for tests of the servers above it, and tools. With cfg.Upstream
// set it starts other stores on demand, listing from there; without, it
// starts none (ReasonNotStarted, as before Run). Every store stops with
// ctx. cfg.Freshness is ignored: consistent reads pass through.
func NewStatic(ctx context.Context, cfg Config, resources []*Resource, stores ...StaticStore) (*Registry, error) {
	running := ctx
	if cfg.Upstream == nil {
		cfg.Upstream, running = &rest.Config{Host: "http://127.0.0.1:1"}, nil
	}
	cfg.Freshness = nil
	client, err := rest.HTTPClientFor(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	reg := &Registry{
		cfg:          cfg,
		clock:        clockOrReal(cfg.Clock),
		client:       client,
		catalog:      &catalog{resources: map[schema.GroupVersionResource]*Resource{}},
		stores:       map[storeKey]*storeEntry{},
		tableRefused: map[schema.GroupVersionResource]time.Time{},
		ctx:          running,
	}
	for _, res := range resources {
		reg.catalog.resources[res.GVR] = res
	}
	for _, s := range stores {
		reg.catalog.resources[s.Resource.GVR] = s.Resource
		e := &storeEntry{store: s.Store, info: s.Resource, source: &apiSource{format: s.Format}, started: reg.clock.Now()}
		e.ctx, e.cancel = context.WithCancel(ctx)
		e.source.envelope.Store(&s.Envelope)
		if s.TableHead != nil {
			e.source.table = &tableFeed{rules: s.Resource.Table}
			e.source.table.head.Store(s.TableHead)
		}
		e.prover = freshness.NewProver(e.ctx, freshness.ProverConfig{Store: s.Store, Resource: s.Resource.GVR.GroupResource().String()})
		e.bytes.Store(s.Bytes)
		e.listed.Store(true)
		e.lastUsed.Store(reg.clock.Now().UnixNano())
		reg.stores[storeKey{gvr: s.Resource.GVR, format: s.Format}] = e
	}
	return reg, nil
}
