package consistency

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// keyRV is what a consistency check compares of one object: its key
// ("namespace/name" or "name", as snapshot.ObjectKey) and resourceVersion.
type keyRV struct {
	key string
	rv  uint64
}

// hashKeys digests objects given in key order: sha256 over "key\x00rv\n" for
// each, hex-encoded. Equal digests mean the same objects at the same
// resourceVersions.
func hashKeys(objects iter.Seq[keyRV]) string {
	h := sha256.New()
	var buf []byte
	for o := range objects {
		buf = appendKeyRV(buf[:0], o)
		h.Write(buf)
	}
	return hexSum(h)
}

func appendKeyRV(dst []byte, o keyRV) []byte {
	dst = append(dst, o.key...)
	dst = append(dst, 0)
	dst = strconv.AppendUint(dst, o.rv, 10)
	return append(dst, '\n')
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// snapshotKeys yields a snapshot's objects in key order.
func snapshotKeys(snap *snapshot.Snapshot) iter.Seq[keyRV] {
	return func(yield func(keyRV) bool) {
		snap.Ascend(func(e *snapshot.Entry) bool { return yield(keyRV{key: e.Key, rv: e.RV}) })
	}
}

// sortKeys sorts objects by key, the order hashKeys and diffKeys expect.
func sortKeys(objects []keyRV) {
	slices.SortFunc(objects, func(a, b keyRV) int { return cmp.Compare(a.key, b.key) })
}

// KeyDiff is how a snapshot differs from the apiserver: counts of each kind of
// difference, with the first few keys of each as examples.
type KeyDiff struct {
	// Missing are keys the apiserver has and the snapshot lacks.
	Missing      []string `json:"missing,omitempty"`
	MissingCount int      `json:"missingCount"`
	// Extra are keys the snapshot has and the apiserver does not.
	Extra      []string `json:"extra,omitempty"`
	ExtraCount int      `json:"extraCount"`
	// Different are keys both have at different resourceVersions.
	Different      []RVDifference `json:"different,omitempty"`
	DifferentCount int            `json:"differentCount"`
}

// RVDifference is one object held at different resourceVersions.
type RVDifference struct {
	Key       string `json:"key"`
	Snapshot  uint64 `json:"snapshotResourceVersion,string"`
	APIServer uint64 `json:"apiserverResourceVersion,string"`
}

// Empty reports whether there is no difference.
func (d KeyDiff) Empty() bool {
	return d.MissingCount == 0 && d.ExtraCount == 0 && d.DifferentCount == 0
}

// String summarises d for logs, e.g.
// `missing 1 [ns/a], extra 0 [], different 1 [ns/b snapshot=7 apiserver=9]`.
func (d KeyDiff) String() string {
	different := make([]string, len(d.Different))
	for i, x := range d.Different {
		different[i] = fmt.Sprintf("%s snapshot=%d apiserver=%d", x.Key, x.Snapshot, x.APIServer)
	}
	return fmt.Sprintf("missing %d [%s], extra %d [%s], different %d [%s]",
		d.MissingCount, strings.Join(d.Missing, " "), d.ExtraCount, strings.Join(d.Extra, " "),
		d.DifferentCount, strings.Join(different, ", "))
}

// diffKeys compares a snapshot's objects with the apiserver's, both in key
// order, keeping at most examples keys of each kind of difference.
func diffKeys(snap, apiserver []keyRV, examples int) KeyDiff {
	var d KeyDiff
	i, j := 0, 0
	for i < len(snap) || j < len(apiserver) {
		switch {
		case j == len(apiserver) || (i < len(snap) && snap[i].key < apiserver[j].key):
			d.ExtraCount++
			if len(d.Extra) < examples {
				d.Extra = append(d.Extra, snap[i].key)
			}
			i++
		case i == len(snap) || apiserver[j].key < snap[i].key:
			d.MissingCount++
			if len(d.Missing) < examples {
				d.Missing = append(d.Missing, apiserver[j].key)
			}
			j++
		default:
			if snap[i].rv != apiserver[j].rv {
				d.DifferentCount++
				if len(d.Different) < examples {
					d.Different = append(d.Different, RVDifference{Key: snap[i].key, Snapshot: snap[i].rv, APIServer: apiserver[j].rv})
				}
			}
			i++
			j++
		}
	}
	return d
}
