// Package freshness proves how fresh an apiserver-fed snapshot must be to
// answer a consistent LIST (resourceVersion unset) as the apiserver would:
// linearizably. Its Prover is one interface, whose implementation
// NewProver chooses once per store from its ProverConfig: etcdProver
// (etcdprover.go) proves with etcd where listproxy can reach it (below);
// apiserverProver (apiserverprover.go, over apiserver.go's APIServer: a
// name-scoped consistent LIST as the probe, then the store's own feed or an
// auxiliary watch) proves through the apiserver alone; unprovenProver
// proves nothing. An etcdProver proves an empty resource's reads, whose
// prefix cannot be verified, through an apiserverProver. What every
// implementation shares — the frames of its reads, the wait every proof
// ends with (holdAndKeep), the shared probe (probe.go) — is written once in
// prover.go and probe.go; every metric of the package is in metrics.go.
//
// The protocol mirrors the watch cache's consistent reads (KEP-2340,
// https://github.com/kubernetes/enhancements/tree/master/keps/sig-api-machinery/2340-Consistent-reads-from-cache):
//
//  1. Checker.CurrentRevision reads etcd's current revision E with a
//     linearizable read. Concurrent callers share a probe, but only one that
//     started after they arrived.
//  2. A Tracker watches the resource's key prefix and, while someone waits,
//     has the Checker send RequestProgress (at most once per
//     Config.ProgressInterval) until its watch has reported progress >= E.
//     Tracker.LastChangeAtOrBefore then returns L, the last revision <= E at
//     which anything under the prefix changed.
//  3. The caller waits until its snapshot's resourceVersion is >= L and
//     serves it with resourceVersion max(snapshot RV, E).
//
// The package also tracks etcd's compacted revision (CompactedRevision),
// counts keys under a prefix at a revision (Count, to verify a prefix
// against a snapshot) and knows where kube-apiserver stores each resource
// (DefaultPrefix).
//
// It owns the etcd and apiserver sides of freshness and, per store, the
// Prover whose prove-and-wait serves consistent, exact and not-older-than
// reads and watches ahead of the store; it may import pkg/snapshot and
// pkg/wire (the auxiliary watch's bytes) and must not import pkg/lists,
// pkg/proxy, pkg/auth, pkg/consistency or pkg/paging.
package freshness
