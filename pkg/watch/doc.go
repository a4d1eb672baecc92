// Package watch serves cacheable WATCH requests, watch-lists included
// (KEP-3157, https://kubernetes.io/docs/reference/using-api/api-concepts/#streaming-lists),
// from a snapshot store: the initial state as ADDED events from one
// snapshot, the end-of-initial-events BOOKMARK, then the store's own feed of
// changes, fanned out to every watcher of the store. It mirrors the
// apiserver's watch cache (k8s.io/apiserver/pkg/storage/cacher): selector
// transitions, bookmarks, deadlines, and byte-identical frames.
//
// Decide is the "serve or pass through?" decision over a watch's query. The
// edge resolves the store and selectors into a Target and authorizes the
// caller; this package imports snapshot, wire, gzstitch and httpapi.
package watch
