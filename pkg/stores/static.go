package stores

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/freshness"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// StaticStore is a running store given to NewStatic.
type StaticStore struct {
	Resource *catalog.Resource
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
func NewStatic(ctx context.Context, cfg Config, resources []*catalog.Resource, stores ...StaticStore) (*Registry, error) {
	running := ctx
	if cfg.Upstream == nil {
		cfg.Upstream, running = &rest.Config{Host: "http://127.0.0.1:1"}, nil
	}
	cfg.Freshness = nil
	client, err := rest.HTTPClientFor(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	known := slices.Clone(resources)
	for _, s := range stores {
		known = append(known, s.Resource)
	}
	reg := &Registry{
		cfg:          cfg,
		clock:        clockOrReal(cfg.Clock),
		client:       client,
		catalog:      catalog.NewStatic(known...),
		stores:       map[storeKey]*storeEntry{},
		tableRefused: map[schema.GroupVersionResource]time.Time{},
		ctx:          running,
	}
	for _, s := range stores {
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
