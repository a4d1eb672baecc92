package freshness

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors of VerifyPrefix; test with errors.Is.
var (
	// ErrPrefixUnproven: the snapshot holds no object, so nothing under a
	// prefix can show that the prefix is the resource's (an empty wrong
	// prefix would match an empty resource). Verify again once it has one.
	ErrPrefixUnproven = errors.New("etcd prefix cannot be verified against an empty resource")
	// ErrPrefixMismatch: the keys under the prefix are not the snapshot's
	// objects.
	ErrPrefixMismatch = errors.New("etcd prefix does not hold the resource's objects")
)

// KeyRevision is one object as a snapshot holds it: its key relative to the
// resource's prefix ("namespace/name" or "name") and its resourceVersion,
// which the apiserver takes from the key's etcd mod revision.
type KeyRevision struct {
	Key         string
	ModRevision int64
}

// PrefixContents describes what a snapshot at one revision holds: how many
// objects, and its first and last in key order.
type PrefixContents struct {
	Count       int64
	First, Last KeyRevision
}

// VerifyPrefix checks that prefix (with its trailing "/") holds exactly
// the objects of a snapshot at revision rev: the same number of keys, and
// the same first and last keys with the same mod revisions. It cannot pass
// vacuously: a snapshot without objects gives ErrPrefixUnproven. A
// difference gives an error wrapping ErrPrefixMismatch; a compacted rev one
// wrapping ErrCompacted.
func (c *Checker) VerifyPrefix(ctx context.Context, prefix string, rev int64, want PrefixContents) error {
	if want.Count == 0 {
		return ErrPrefixUnproven
	}
	first, err := c.edgeKey(ctx, prefix, rev, clientv3.SortAscend)
	if err != nil {
		return err
	}
	if first.count != want.Count {
		return fmt.Errorf("%w: %d keys under %q at revision %d, %d objects", ErrPrefixMismatch, first.count, prefix, rev, want.Count)
	}
	if first.kr != want.First {
		return fmt.Errorf("%w: first key under %q at revision %d is %+v, first object %+v", ErrPrefixMismatch, prefix, rev, first.kr, want.First)
	}
	last, err := c.edgeKey(ctx, prefix, rev, clientv3.SortDescend)
	if err != nil {
		return err
	}
	if last.kr != want.Last {
		return fmt.Errorf("%w: last key under %q at revision %d is %+v, last object %+v", ErrPrefixMismatch, prefix, rev, last.kr, want.Last)
	}
	return nil
}

type edge struct {
	kr    KeyRevision
	count int64
}

// edgeKey reads the first (or last) key under prefix at rev, and the
// number of keys under it.
func (c *Checker) edgeKey(ctx context.Context, prefix string, rev int64, order clientv3.SortOrder) (edge, error) {
	resp, err := c.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithKeysOnly(),
		clientv3.WithLimit(1), clientv3.WithSort(clientv3.SortByKey, order))
	if err != nil {
		return edge{}, fmt.Errorf("read %q at revision %d: %w", prefix, rev, etcdError(err))
	}
	e := edge{count: resp.Count}
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		e.kr = KeyRevision{Key: string(kv.Key[len(prefix):]), ModRevision: kv.ModRevision}
	}
	return e, nil
}
