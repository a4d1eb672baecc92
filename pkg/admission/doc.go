// Package admission admits snapshot-served responses for writing: the
// in-flight bounds in front of every LIST response and every watch-list's
// initial events that listproxy writes from a snapshot (docs/design.md "A
// request's path", "A watch-list's initial events").
//
// A Queue (NewQueue, by Config) bounds the responses being written at once
// and the sum of their weights (the encoded bytes of their items), admits
// them in arrival order, queues the rest up to Config.QueueWait and then
// answers them with the apiserver's 429 and Retry-After; an admitted
// response gets a write deadline (Config.WriteTimeout). The LIST server
// (pkg/lists) calls Queue.Admit and writes through the Slot it gets; the
// watch server (pkg/watch) calls Queue.AdmitWatchList through its
// watch.Admitter. The command builds one Queue and hands it to both, so
// that a storm of LISTs and watch-lists shares one bound. Metrics (named
// listproxy_lists_* for history) count both.
//
// It decides nothing about which requests are served from snapshots, and
// it is not store admission: who may start a snapshot store, and within
// which byte budget, is pkg/stores's (stores/admission.go).
//
// It imports nothing of listproxy's.
package admission
