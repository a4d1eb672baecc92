package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Preload is one store started when listproxy starts (--preload): a
// resource, in its preferred version, in one representation.
type Preload struct {
	Resource schema.GroupResource
	// Format is the representation when Explicit; otherwise formatFor
	// chooses what client-go's typed clients ask for.
	Format   wire.Format
	Explicit bool
}

// String spells p as --preload does: RESOURCE[.GROUP][/FORMAT].
func (p Preload) String() string {
	if !p.Explicit {
		return p.Resource.String()
	}
	return p.Resource.String() + "/" + p.Format.String()
}

// formatFor is the representation of p's store for the resource info: the
// one named, or else protobuf for a built-in resource and JSON for a custom
// one, which is what client-go's typed clients and informers ask for
// (k8s.io/client-go/gentype prefers protobuf for built-in types; custom
// resources have no protobuf).
func (p Preload) formatFor(info *catalog.Resource) wire.Format {
	switch {
	case p.Explicit:
		return p.Format
	case info.Custom:
		return wire.JSON
	}
	return wire.Protobuf
}

// ParsePreload parses --preload entries, RESOURCE[.GROUP][/FORMAT] with
// FORMAT one of json, protobuf, meta-json, meta-protobuf and table; without one,
// the store is protobuf for a built-in resource and JSON for a custom one
// (what client-go's typed clients ask for). Duplicates are dropped.
func ParsePreload(names []string) ([]Preload, error) {
	var out []Preload
	seen := map[Preload]bool{}
	var errs []error
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		res, formatName, _ := strings.Cut(name, "/")
		var format wire.Format
		explicit := formatName != ""
		if explicit {
			found := false
			for _, f := range append(wire.Formats, wire.Table) {
				if f.String() == formatName {
					format, found = f, true
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("%q: unknown format %q (want json, protobuf, meta-json, meta-protobuf or table)", name, formatName))
				continue
			}
		}
		if res == "" || res == "*" || strings.ContainsAny(res, " /*") {
			errs = append(errs, fmt.Errorf("%q: want RESOURCE[.GROUP][/FORMAT]", name))
			continue
		}
		p := Preload{Resource: schema.ParseGroupResource(res), Format: format, Explicit: explicit}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// preloadState tracks whether every preloaded store has synced once.
type preloadState struct {
	// synced latches once every preloaded store has synced: a store that
	// relists later keeps serving its last snapshot, and one that is
	// rebuilt makes reads wait for it (ColdStoreWait) without taking the
	// replica out of its Service.
	synced atomic.Bool
	// missing is the number of preloaded resources discovery did not
	// report (or the filter excludes) at the last check, for logs.
	missing atomic.Int64
}

// Ready returns nil once Run has read discovery and every store named by
// Config.Preload has completed its first list, and an error saying what is
// missing otherwise; once nil it stays nil. Preloaded resources that
// discovery does not report are logged and not waited for. The edge's
// /readyz fails while it returns an error, so that a Service sends nothing
// to a replica that would pass every request through (before discovery
// listproxy knows no resource) or whose preloaded stores are cold.
func (reg *Registry) Ready() error {
	if reg.preload.synced.Load() {
		return nil
	}
	reg.mu.RLock()
	started := reg.ctx != nil
	reg.mu.RUnlock()
	if !started {
		return errors.New("discovery not read yet")
	}
	for _, p := range reg.cfg.Preload {
		info, ok := reg.catalog.Preferred(p.Resource)
		if !ok || p.formatFor(info) == wire.Table && !info.TableServed {
			continue
		}
		reg.mu.RLock()
		e, ok := reg.stores[storeKey{gvr: info.GVR, format: p.formatFor(info)}]
		reg.mu.RUnlock()
		if !ok || !e.store.Synced() {
			return fmt.Errorf("store %s has not synced yet", p)
		}
	}
	reg.preload.synced.Store(true)
	klog.InfoS("Preloaded stores synced", "stores", len(reg.cfg.Preload)-int(reg.preload.missing.Load()))
	return nil
}

// ensurePreloaded starts every preloaded store that is not running (at
// start, and again when discovery changed a resource and its store was
// dropped) and marks it never idle.
func (reg *Registry) ensurePreloaded() {
	var missing int64
	for _, p := range reg.cfg.Preload {
		info, ok := reg.catalog.Preferred(p.Resource)
		if ok && p.formatFor(info) == wire.Table && !info.TableServed {
			// Its Tables pass through: no store to keep.
			ok = false
		}
		if !ok {
			missing++
			klog.V(1).InfoS("Preloaded resource not served: not in discovery, not list+watch, excluded by --resources, or a Table listproxy has no rules for", "resource", p.String())
			continue
		}
		if e, _, ok := reg.storeFor(context.Background(), info, p.formatFor(info), true); ok {
			// Marked while held: the idle loop cannot drop it first.
			e.preloaded.Store(true)
			reg.releaseHold(e)
		}
	}
	if old := reg.preload.missing.Swap(missing); old != missing && missing > 0 {
		klog.InfoS("Some preloaded resources are not served (not in discovery, not list+watch, or excluded by --resources)", "count", missing)
	}
}
