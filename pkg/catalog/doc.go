// Package catalog is listproxy's view of the apiserver's discovery: which
// resources it serves and which of them listproxy caches (Resource: kind,
// scope, selectable fields, a CRD version's deprecation warning and Table
// columns, a built-in kind's deprecation in the apiserver's release,
// aggregated API groups, the watch-cache default, how Table rows are
// served), each group's preferred version, and the apiserver's feature
// gates that change what a watch means (watch-list defaults, watch-list
// gzip). Catalog.Refresh re-reads it all from the apiserver and says which
// resources changed; the store registry calls it and drops their stores,
// and the request parser looks resources up in it. It holds no store, and
// of ours imports only table and wire.
package catalog
