// Package lists is listproxy's LIST server: it decides which LIST requests
// it can answer (parsing the collection path and query, negotiating the
// representation), keeps one snapshot store per resource and representation
// (preloaded, or started on the first demand of a caller admitted to start
// it: admission.go; dropped when idle or when discovery changes),
// maps each cacheable LIST onto the semantics table (resolve) and answers it
// from a snapshot (respond: admission, page, continue token, bytes, gzip), or
// leaves it to the apiserver, handing over its own continue tokens.
//
// It is handed requests by the HTTP edge (pkg/proxy) through the edge's
// ListServer interface, and must not import pkg/proxy or pkg/auth. It may
// import pkg/consistency, pkg/freshness, pkg/paging, pkg/snapshot,
// pkg/wire, pkg/gzstitch and pkg/httpapi.
package lists
