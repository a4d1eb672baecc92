// Package collection parses a LIST or WATCH of a resource collection once,
// for both servers: the path, the cached resource it names (looked up in
// the catalog, or the store registry that reads one), the representation the apiserver would answer with
// (negotiated with the apiserver's own code), the label and field
// selectors against the resource's selectable fields, the shard selector
// (KEP-5866, parsed and matched with the apiserver's own code), and
// whether the client accepts gzip. A request it does not accept passes through, with
// the reason. Select then says where a request's objects lie in a snapshot
// (the scope, the single key, the index), for a LIST's pages and a
// watch-list's initial events alike.
package collection
