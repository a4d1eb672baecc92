package snapshot

import (
	"fmt"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	shardparser "k8s.io/apiserver/pkg/sharding"
)

// TestShardMatchesTheAPIServer: for random selectors by uid and by
// namespace (one to three ranges, some ending at 2^64, some with a bound
// exactly at an object's hash) and random objects, Shard.Contains agrees
// with the apiserver's own selector (sharding.Selector.Matches), and the
// uid is read once per entry.
func TestShardMatchesTheAPIServer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hex := func(h uint64) string { return fmt.Sprintf("0x%016x", h) }
	var objects []*Entry
	uids := map[string]string{}
	for i := range 300 {
		e := NewEntry(fmt.Sprintf("ns-%d", i%17), fmt.Sprintf("o-%d", i), 1, nil, nil, nil, []byte("{}"))
		uids[e.Key] = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
		objects = append(objects, e)
	}
	reads := map[string]int{}
	uidOf := func(e *Entry) (string, error) {
		reads[e.Key]++
		return uids[e.Key], nil
	}
	for round := range 200 {
		key := ShardKeyUID
		if round%3 == 0 {
			key = ShardKeyNamespace
		}
		// Bounds: random, or an object's own hash (and one past it).
		var bounds []uint64
		for range 2 + rng.IntN(5) {
			if rng.IntN(2) == 0 {
				bounds = append(bounds, rng.Uint64())
				continue
			}
			o := objects[rng.IntN(len(objects))]
			h := ShardHash(uids[o.Key])
			if key == ShardKeyNamespace {
				h = ShardHash(o.Namespace())
			}
			bounds = append(bounds, h, h+1)
		}
		var expr string
		for i := 0; i+1 < len(bounds) && i < 6; i += 2 {
			lo, hi := min(bounds[i], bounds[i+1]), max(bounds[i], bounds[i+1])
			if lo == hi {
				continue
			}
			end := hex(hi)
			if rng.IntN(4) == 0 {
				end = hashTop
			}
			if expr != "" {
				expr += " || "
			}
			expr += fmt.Sprintf("shardRange(%s, '%s', '%s')", key, hex(lo), end)
		}
		if expr == "" {
			continue
		}
		sel, err := shardparser.Parse(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		shard, err := NewShard(sel)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		for _, e := range objects {
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace(), UID: types.UID(uids[e.Key])}}
			want, err := sel.Matches(obj)
			if err != nil {
				t.Fatal(err)
			}
			if got := shard.Contains(e, uidOf); got != want {
				t.Fatalf("%s: %s (uid %s): Contains = %v, the apiserver's selector %v", expr, e.Key, uids[e.Key], got, want)
			}
		}
	}
	for key, n := range reads {
		if n != 1 {
			t.Errorf("%s: uid read %d times, want once", key, n)
		}
	}
}
