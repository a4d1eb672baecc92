package lists

// Warm start from a peer (Config.Peer): a replica reads each store's first
// list from another replica, marking every page with
// httpapi.HeaderPeerList. The replica asked answers it from a store it
// holds synced; it never starts a store for it, never waits for a store's
// sync, and never passes it through to the apiserver, but declines it at
// once (httpapi.DeclinePeerList; the edge declines what it would pass
// through before offering it here), and the asking replica lists from the
// apiserver itself. The waits of a served read remain and are bounded: a
// consistent read's freshness proof (stores.Config.ConsistentReadTimeout)
// and admission (Config.Admission: admission.Config.QueueWait, then 429).
// So a peer's list never costs the apiserver more than the asking
// replica's own list would, and a replica that a Service routes its own
// peer list to (it became ready, then started a store) declines instead of
// waiting for itself.

// ReasonPeerDeclined is the reason of the answer to a peer's list that
// listproxy does not serve from a synced snapshot.
const ReasonPeerDeclined Reason = "peer_declined"
