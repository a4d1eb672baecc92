package snapshot

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"k8s.io/apimachinery/pkg/sharding"
)

// Shard keys: the fields a shard selector (KEP-5866) may hash.
const (
	ShardKeyUID       = "object.metadata.uid"
	ShardKeyNamespace = "object.metadata.namespace"
)

// ShardHash is the hash of value that shard selectors compare: 64-bit
// FNV-1a, as k8s.io/apimachinery/pkg/sharding.HashField computes it (which
// renders it in hex).
func ShardHash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value))
	return h.Sum64()
}

// Shard is a shard selector's ranges as numbers, to match many objects
// quickly. The apiserver's selector (sharding.Selector.Matches) renders
// each hash as "0x" and 16 hex digits and compares it with the ranges'
// bounds, which the parser requires to be exactly that or 2^64
// ("0x10000000000000000"), longer strings comparing greater
// (sharding.HexLess): the same order as the numbers'.
type Shard struct {
	// ByUID: the ranges are over metadata.uid's hash, else over
	// metadata.namespace's.
	ByUID  bool
	ranges []hashRange
}

// hashRange is [start, end), end 2^64 when toTop.
type hashRange struct {
	start, end uint64
	toTop      bool
}

// hashTop is the exclusive upper bound of the hash space, 2^64.
const hashTop = "0x10000000000000000"

// NewShard returns sel's ranges as numbers. sel comes from the apiserver's
// parser (k8s.io/apiserver/pkg/sharding.Parse): one key for all ranges.
func NewShard(sel sharding.Selector) (Shard, error) {
	reqs := sel.Requirements()
	if len(reqs) == 0 {
		return Shard{}, fmt.Errorf("a shard selector without ranges")
	}
	s := Shard{ByUID: reqs[0].Key == ShardKeyUID}
	for _, r := range reqs {
		if r.Key != reqs[0].Key {
			return Shard{}, fmt.Errorf("inconsistent shard keys: %q vs %q", reqs[0].Key, r.Key)
		}
		start, err := parseBound(r.Start)
		if err != nil {
			return Shard{}, err
		}
		hr := hashRange{start: start, toTop: r.End == hashTop}
		if !hr.toTop {
			if hr.end, err = parseBound(r.End); err != nil {
				return Shard{}, err
			}
		}
		s.ranges = append(s.ranges, hr)
	}
	return s, nil
}

// parseBound parses a bound of 16 hex digits after "0x".
func parseBound(b string) (uint64, error) {
	if len(b) != 18 || b[:2] != "0x" {
		return 0, fmt.Errorf("shard range bound %q: want 0x and 16 hex digits", b)
	}
	return strconv.ParseUint(b[2:], 16, 64)
}

// Holds reports whether hash h is in one of the ranges.
func (s Shard) Holds(h uint64) bool {
	for _, r := range s.ranges {
		if h >= r.start && (r.toTop || h < r.end) {
			return true
		}
	}
	return false
}

// Contains reports whether e's object is in the shard, its key hashed as
// the apiserver hashes it: the namespace from e's key, or the uid, read
// with uid once per entry (Entry.UIDHash). An object whose uid cannot be
// read is in no shard, as the apiserver leaves out an object its selector
// fails on.
func (s Shard) Contains(e *Entry, uid func(*Entry) (string, error)) bool {
	if !s.ByUID {
		return s.Holds(ShardHash(e.Namespace()))
	}
	h, err := e.UIDHash(uid)
	return err == nil && s.Holds(h)
}

// UIDHash returns ShardHash of the uid of e's object, read with uid the
// first time and kept with e's gzip chunks (entries are immutable but for
// such caches, which only entries a shard selector or a gzip response used
// allocate).
func (e *Entry) UIDHash(uid func(*Entry) (string, error)) (uint64, error) {
	d := e.derived()
	// 0 marks "not read yet"; an object whose hash is 0 is read again.
	if h := d.uidHash.Load(); h != 0 {
		return h, nil
	}
	u, err := uid(e)
	if err != nil {
		return 0, err
	}
	h := ShardHash(u)
	d.uidHash.Store(h)
	return h, nil
}
