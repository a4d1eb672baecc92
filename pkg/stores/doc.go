// Package stores is the registry of listproxy's snapshot stores: one per
// cacheable resource and representation. It keeps discovery fresh through
// a catalog.Catalog (resources, their selectable fields, deprecation
// warnings, the apiserver's feature gates) and drops the stores of the
// resources a refresh changed, starts a store on the first demand of a caller admitted to start
// it (admission.go) or because it is preloaded, feeds it from the
// apiserver (its first list optionally from a peer replica), proves its
// freshness with etcd or through the apiserver (a freshness.Prover per
// store), restarts its watch
// when it lags or stalls, applies etcd's compaction, shows the stores to
// the consistency checker, and drops a store when it is idle or discovery
// changes.
//
// The servers reach a store only through Registry.Acquire, which returns
// a Handle held until the request (or the watch) ends; a store held is
// never idle. It serves nothing itself and imports neither server.
package stores
