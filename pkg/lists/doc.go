// Package lists is listproxy's LIST server: it parses a LIST (the
// collection with pkg/collection, then its query), maps it onto the
// semantics table (resolve), takes its store from the registry
// (pkg/stores) and answers it from a snapshot (respond: admission, page,
// continue token, bytes, gzip), or leaves it to the apiserver, handing
// over its own continue tokens. Its responses are admitted for writing by
// the admission.Queue it is given (pkg/admission), which the watch server's
// watch-lists share.
//
// It is handed requests by the HTTP edge (pkg/proxy) through the edge's
// ListServer interface, and must not import pkg/proxy, pkg/auth or
// pkg/watch.
package lists
