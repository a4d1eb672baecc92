package collection

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/sharding"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Verb is what a collection request asks for.
type Verb int

const (
	List Verb = iota
	Watch
)

// Reasons a request is not one a store can serve, before anything is
// resolved: the "reason" label of listproxy_lists_total and
// listproxy_watch_passed_through_total.
const (
	ReasonMethod    = "method"     // not a GET
	ReasonPath      = "path"       // not a resource collection
	ReasonResource  = "resource"   // not a cached resource
	ReasonMediaType = "media_type" // a representation listproxy does not store
	ReasonSelector  = "selector"   // a selector listproxy cannot evaluate
	// ReasonIncludeObject: a Table asking for whole objects
	// (includeObject=Object), which a Table store does not hold, or for
	// an includeObject the apiserver rejects.
	ReasonIncludeObject = "include_object"
)

// Request is a LIST or WATCH of a cached resource's collection, in a
// representation its store holds, with selectors listproxy evaluates.
type Request struct {
	Path
	Resource *catalog.Resource
	Format   wire.Format
	Labels   labels.Selector
	Fields   fields.Selector
	// Shard is the shard selector (shardSelector, KEP-5866); nil without
	// one, or when it did not parse (ShardErr).
	Shard sharding.Selector
	// ShardErr is why the shard selector did not parse: the request is
	// answered with the apiserver's error for it
	// (paging.InvalidShardSelectorError), in the apiserver's order of
	// checks.
	ShardErr error
	// shard is Shard's ranges as numbers, for matching.
	shard snapshot.Shard
	// Selective: a non-empty label, field or shard selector: the request
	// selects among the objects of its scope.
	Selective bool
	// Gzip: the client accepts a gzip-encoded response.
	Gzip bool
	// Table is set for format Table.
	Table TableOptions
}

// TableOptions are what a Table request asks of its rows.
type TableOptions struct {
	// GroupVersion is the Table's meta.k8s.io version: "v1" or "v1beta1".
	GroupVersion string
	// Include is the rows' object (includeObject).
	Include table.IncludeObject
}

// ResourceName names the request's resource as metrics do
// (resource.group); "" when the path named no cached resource.
func (r Request) ResourceName() string {
	if r.Resource == nil {
		return ""
	}
	return r.Resource.GVR.GroupResource().String()
}

// Match reports whether the request's selectors select e: its label and
// field selectors, and its shard selector.
func (r Request) Match(e *snapshot.Entry) bool {
	return r.Labels.Matches(e.Labels()) && r.Fields.Matches(e.Fields()) && r.inShard(e)
}

// Resources says which resources are cached and what discovery says of
// them: a catalog.Catalog, or the store registry, which reads one.
type Resources interface {
	Lookup(gvr schema.GroupVersionResource) (*catalog.Resource, bool)
}

// Parse decides whether r, with the given selectors (from its query; a
// shardSelector of "" is none), is a request of verb that a store could
// serve, and parses it. It has no side effects. When not, reason says why,
// and Resource is set when the path named a cached resource. A shard
// selector that does not parse is not a reason: it is Request.ShardErr.
func Parse(r *http.Request, resources Resources, verb Verb, labelSelector, fieldSelector, shardSelector string) (req Request, reason string, ok bool) {
	if r.Method != http.MethodGet {
		return Request{}, ReasonMethod, false
	}
	path, ok := ParsePath(r)
	if !ok {
		return Request{}, ReasonPath, false
	}
	res, ok := resources.Lookup(path.GVR)
	if !ok {
		return Request{}, ReasonResource, false
	}
	req = Request{Path: path, Resource: res}
	if path.Namespace != "" && !res.Namespaced {
		return req, ReasonPath, false
	}
	if req.Format, req.Table.GroupVersion, ok = negotiateTable(r, res.Custom, verb == Watch); !ok {
		return req, ReasonMediaType, false
	}
	if req.Format == wire.Table {
		if !res.TableServed {
			return req, ReasonMediaType, false
		}
		if req.Table.Include, ok = includeObject(r); !ok {
			return req, ReasonIncludeObject, false
		}
	}
	var err error
	if req.Labels, err = labels.Parse(labelSelector); err != nil {
		return req, ReasonSelector, false
	}
	req.Fields, err = fields.ParseSelector(fieldSelector)
	if err != nil || !res.Fields.Accepts(req.Fields, !catalog.FieldsFromObject(res, req.Format)) {
		return req, ReasonSelector, false
	}
	if shardSelector != "" && res.Aggregated {
		return req, ReasonShardSelector, false
	}
	req.parseShard(shardSelector)
	req.Selective = !req.Labels.Empty() || !req.Fields.Empty() || req.Shard != nil
	req.Gzip = AcceptsGzip(r)
	return req, "", true
}

// includeObject reads a Table request's includeObject: unset or Metadata,
// or None. Object, any other value and a repeated parameter are not
// served (the apiserver answers them).
func includeObject(r *http.Request) (table.IncludeObject, bool) {
	values := r.URL.Query()["includeObject"]
	if len(values) == 0 {
		return table.IncludeMetadata, true
	}
	if len(values) > 1 {
		return 0, false
	}
	switch values[0] {
	case "", "Metadata":
		return table.IncludeMetadata, true
	case "None":
		return table.IncludeNone, true
	}
	return 0, false
}

// AcceptsGzip reports whether r's Accept-Encoding lists gzip.
func AcceptsGzip(r *http.Request) bool {
	for _, token := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(token) == "gzip" {
			return true
		}
	}
	return false
}
