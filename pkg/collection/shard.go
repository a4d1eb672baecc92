package collection

import (
	shardparser "k8s.io/apiserver/pkg/sharding"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Shard selectors (KEP-5866, the apiserver's ShardedListAndWatch gate,
// alpha in 1.37): shardSelector=shardRange(object.metadata.uid, 'S', 'E')
// [|| shardRange(...)] selects the objects whose key (metadata.uid or
// metadata.namespace) hashes (64-bit FNV-1a) into [S, E) of one of the
// ranges. listproxy parses and matches it with the apiserver's own code
// (k8s.io/apiserver/pkg/sharding, k8s.io/apimachinery/pkg/sharding), as
// the 1.37 apiserver with the gate on does, whatever the apiserver's gate:
// an apiserver without it (1.31, or the gate off) ignores the parameter.

// ReasonShardSelector is the pass-through reason of a shard selector on a
// resource of an aggregated API, whose server answers it as it knows (the
// kube-apiserver only proxies it); the servers also pass shard selectors
// through with it when serving them is off.
const ReasonShardSelector = "shard_selector"

// parseShard parses the shardSelector parameter into r: "" is none, as the
// apiserver takes an empty parameter; one that does not parse is kept in
// ShardErr for the servers to answer with the apiserver's error
// (paging.InvalidShardSelectorError) in its order of checks.
func (r *Request) parseShard(shardSelector string) {
	if shardSelector == "" {
		return
	}
	sel, err := shardparser.Parse(shardSelector)
	if err != nil {
		r.ShardErr = err
		return
	}
	shard, err := snapshot.NewShard(sel)
	if err != nil {
		r.ShardErr = err
		return
	}
	r.Shard, r.shard = sel, shard
}

// inShard reports whether e's object is in r's shard; true without a
// shard selector. It hashes the key the selector names as the apiserver
// does: the namespace from e's key, or the uid read from e's stored bytes
// (a Table row's object) once per entry (snapshot.Entry.UIDHash), and
// compares the hash with the selector's ranges as numbers
// (snapshot.Shard), as the apiserver's selector compares them in hex. An
// object whose uid cannot be read is in no shard, as the apiserver leaves
// out an object its selector fails on. A watcher of a shard is woken only
// for the changes to its shard's objects (snapshot.Store.WaitShard).
func (r Request) inShard(e *snapshot.Entry) bool {
	if r.Shard == nil {
		return true
	}
	return r.shard.Contains(e, func(e *snapshot.Entry) (string, error) { return stores.ObjectUID(r.Format, e) })
}

// ShardInfo is what a LIST response's metadata.shardInfo.selector echoes,
// "" for no shardInfo: the canonical form of r's shard selector
// (sharding.Selector.String) on a list of a built-in resource's objects
// (JSON, protobuf). The apiserver sets it on no other list: a custom
// resource's (an UnstructuredList), PartialObjectMetadata lists and Tables
// carry none.
func (r Request) ShardInfo() string {
	if r.Shard == nil || r.Resource.Custom || (r.Format != wire.JSON && r.Format != wire.Protobuf) {
		return ""
	}
	return r.Shard.String()
}

// GzipCache is how a gzip response of r's selected entries caches the
// chunks it compresses (snapshot.GzipEntries): for the whole collection's
// entries without a selector, for one shard's under the shard's key with a
// shard selector alone, not at all for other selections, whose neighbours
// would not be the next response's.
func (r Request) GzipCache() snapshot.GzipCache {
	switch {
	case !r.Selective:
		return snapshot.GzipCache{Build: true}
	case r.Shard != nil && r.Labels.Empty() && r.Fields.Empty():
		return snapshot.GzipCache{Build: true, Key: snapshot.GzipKey(r.Shard.String())}
	}
	return snapshot.GzipCache{}
}
