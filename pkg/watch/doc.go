// Package watch serves cacheable WATCH requests, watch-lists included
// (KEP-3157, https://kubernetes.io/docs/reference/using-api/api-concepts/#streaming-lists),
// from a snapshot store: the initial state as ADDED events from one
// snapshot, the end-of-initial-events BOOKMARK, then the store's own feed of
// changes, fanned out to every watcher of the store. It mirrors the
// apiserver's watch cache (k8s.io/apiserver/pkg/storage/cacher): selector
// transitions, bookmarks, deadlines, and byte-identical frames.
//
// Decide is the "serve or pass through?" decision over a watch's query.
// Handler, the edge's watch server (the edge authorizes the caller),
// parses the rest with pkg/collection, takes the store from the registry
// (pkg/stores), holds it until the watch ends, and hands the Server a
// Target: the store, the scope and selectors, the freshness proofs, and
// the Admitter of watch-lists' initial events (the command's
// admission.Queue, which LIST responses share). Server serves a Target and
// knows nothing of the registry. Why a watch passes through, or how a
// served one starts, is a Reason (a metric label).
package watch
