package collection

import (
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Selection is where a request's objects lie in a snapshot of its store and
// which of them it selects, found as the apiserver's watch cache finds a
// list's objects (k8s.io/apiserver/pkg/storage/cacher): a namespace the
// field selector pins scopes the scan, metadata.name reads one key, and
// spec.nodeName reads the pods store's index. The LIST server's pages and
// the watch server's initial events both find their objects with it, so
// that a watch-list's initial events are the items of a LIST with the same
// selectors.
//
// Whatever it uses, a Selection selects exactly the objects in the
// request's namespace ("" for all) that its selectors match.
type Selection struct {
	// Namespace scopes the objects to one namespace; "" to all.
	Namespace string
	// Single: the selection is at most the one object of key Key, read
	// directly (a selector on metadata.name).
	Single bool
	Key    string
	// IndexValue, when not nil, is the value of the store's indexed field
	// (spec.nodeName) that every selected object has: only the objects
	// with it are read, through the store's index.
	IndexValue *string
	// Match selects among the objects read; nil selects every one (no
	// selectors, or the index alone selects exactly).
	Match func(*snapshot.Entry) bool
}

// Select returns how r's objects are found in a snapshot of its store.
// first is false for a LIST's continuation page, which stays in the scope
// of its token (r's namespace) and resumes a scan: neither the namespace a
// field selector pins nor a single key applies to it; the index does.
func (r Request) Select(first bool) Selection {
	sel := Selection{Namespace: r.Namespace}
	if first && sel.Namespace == "" {
		// A cluster-wide request whose field selector pins one namespace
		// is scoped to it, as the apiserver's registry does.
		if ns, ok := r.Fields.RequiresExactMatch("metadata.namespace"); ok && len(validation.ValidateNamespaceName(ns, false)) == 0 {
			sel.Namespace = ns
		}
	}
	if r.Selective {
		sel.Match = r.Match
	}
	if first {
		// A selector on metadata.name reads that single key.
		if name, ok := r.Fields.RequiresExactMatch("metadata.name"); ok && (sel.Namespace != "" || !r.Resource.Namespaced) {
			sel.Single, sel.Key = true, snapshot.ObjectKey(sel.Namespace, name)
			return sel
		}
	}
	// The watch cache consults its spec.nodeName index; the registry
	// indexes a pods store whose objects carry their fields.
	if node, ok := r.Fields.RequiresExactMatch("spec.nodeName"); ok && r.Resource.GVR.GroupResource() == (schema.GroupResource{Resource: "pods"}) && catalog.FieldsFromObject(r.Resource, r.Format) {
		sel.IndexValue = &node
		if r.Labels.Empty() && len(r.Fields.Requirements()) == 1 && r.Shard == nil {
			sel.Match = nil // the index already selects exactly these
		}
	}
	return sel
}

// PageRequest returns a request for a page of sel's objects from the start,
// without a limit; the caller sets a page's position, limit and budget.
// sel must not be Single.
func (sel Selection) PageRequest() snapshot.PageRequest {
	return snapshot.PageRequest{Namespace: sel.Namespace, IndexValue: sel.IndexValue, Match: sel.Match}
}

// Get reads the one object of a Single selection: ok when it exists in
// snap and is selected.
func (sel Selection) Get(snap *snapshot.Snapshot) (*snapshot.Entry, bool) {
	e, found := snap.Get(sel.Key)
	if !found || (sel.Match != nil && !sel.Match(e)) {
		return nil, false
	}
	return e, true
}

// All returns every object sel selects in snap, in key order: the items of
// a LIST without a limit. It reads each object in its scope once (the
// index's, the single key's, or the namespace's).
func (sel Selection) All(snap *snapshot.Snapshot) []*snapshot.Entry {
	if sel.Single {
		if e, ok := sel.Get(snap); ok {
			return []*snapshot.Entry{e}
		}
		return nil
	}
	return snap.Page(sel.PageRequest()).Items
}
