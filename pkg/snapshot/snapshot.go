// Package snapshot keeps per-resource, per-representation copies of the
// apiserver's objects as immutable, copy-on-write snapshots fed by LIST+WATCH.
//
// Objects are stored as the exact bytes the apiserver's own LIST response
// carries for that item (docs/design.md "Goals", rule 4); labels, selector field values
// and the resourceVersion are extracted once at ingest.
//
// It imports only pkg/gzstitch of listproxy's; in particular not pkg/wire
// (the server that fills a store knows the formats) nor anything above.
package snapshot

import (
	"strings"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// btreeDegree is the fan-out of every tree. Not yet measured; 32 is the value
// etcd's cache and google/btree's examples use.
const btreeDegree = 32

// Entry is one object in one representation. Entries are immutable once
// inserted into a tree.
type Entry struct {
	// Key orders entries the way etcd orders the apiserver's keys:
	// "namespace/name" for namespaced objects, "name" for cluster-scoped ones.
	Key string
	RV  uint64
	// Raw is the object exactly as an item of the apiserver's list response.
	// It is read only: once packed (see pack.go) its capacity reaches over
	// the entries packed after it, which an append would overwrite.
	Raw []byte
	// Extra is what the store's extractor derived from Raw for the
	// servers besides labels and fields (where a Table row's clock cells
	// lie); nil for most representations. Opaque to the store.
	Extra any
	// attrs are the object's labels and selectable field values (Labels,
	// Fields), set by NewEntry; an entry built otherwise has no labels and
	// only metadata.name and metadata.namespace.
	attrs attrs
	// gzip holds the item compressed for gzip responses once one needed it
	// (see Gzip); the only part of an Entry that changes after insertion.
	gzip gzipCache
	// pack is the packed array Raw lies in, if any (see pack.go); set by the
	// store before the entry is published.
	pack *pack
}

// ObjectKey returns the ordering key of an object.
func ObjectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Namespace is the object's namespace, "" when cluster-scoped: the part of
// Key before its "/" (neither part of a key contains one).
func (e *Entry) Namespace() string {
	if i := strings.IndexByte(e.Key, '/'); i >= 0 {
		return e.Key[:i]
	}
	return ""
}

// Name is the object's name: the part of Key after its "/", if any.
func (e *Entry) Name() string {
	return e.Key[strings.IndexByte(e.Key, '/')+1:]
}

// Labels returns the object's labels.
func (e *Entry) Labels() labels.Labels { return (*entryLabels)(e) }

// Fields returns the values of every field selector listproxy evaluates
// for the object's resource, metadata.name and metadata.namespace
// included.
func (e *Entry) Fields() fields.Fields { return (*entryFields)(e) }

// WithRV returns a new entry of e's object at rv, with e's bytes, labels,
// fields and Extra, and nothing cached.
func (e *Entry) WithRV(rv uint64) *Entry {
	return &Entry{Key: e.Key, RV: rv, Raw: e.Raw, Extra: e.Extra, attrs: e.attrs}
}

func lessEntry(a, b *Entry) bool { return a.Key < b.Key }

// nsCount is the number of objects in one namespace.
type nsCount struct {
	namespace string
	n         int
}

func lessCount(a, b nsCount) bool { return a.namespace < b.namespace }

// indexItem orders object keys by an indexed field value, then by key, so
// that a scan of one value yields objects in list order. It holds the key,
// not the entry: an update that keeps the indexed value (most updates) then
// leaves the index tree untouched, and a published snapshot copies only the
// object tree's path (BenchmarkApplyClone).
type indexItem struct {
	value string
	key   string
}

func lessIndex(a, b indexItem) bool {
	if a.value != b.value {
		return a.value < b.value
	}
	return a.key < b.key
}

// Snapshot is an immutable view of a store at one resourceVersion. It is safe
// for concurrent use by any number of readers.
type Snapshot struct {
	rv      uint64
	objects *btree.BTreeG[*Entry]
	counts  *btree.BTreeG[nsCount]
	index   *btree.BTreeG[indexItem] // nil when the store has no index
	bytes   int64
	// gen is the store's generation (Replace count) it belongs to; objects
	// of an older generation are shared with no newer snapshot.
	gen uint64
	// freedBefore is the store's running total of superseded bytes when
	// this snapshot was published: a snapshot alone keeps alive the bytes
	// superseded after it in its generation.
	freedBefore int64
}

// RV is the resourceVersion of the last change this snapshot contains.
func (s *Snapshot) RV() uint64 { return s.rv }

// Len is the number of objects.
func (s *Snapshot) Len() int { return s.objects.Len() }

// Bytes is the total size of the objects' encoded bytes.
func (s *Snapshot) Bytes() int64 { return s.bytes }

// Count returns the number of objects in namespace, or in total for "".
func (s *Snapshot) Count(namespace string) int {
	if namespace == "" {
		return s.objects.Len()
	}
	c, _ := s.counts.Get(nsCount{namespace: namespace})
	return c.n
}

// Get returns the entry with key.
func (s *Snapshot) Get(key string) (*Entry, bool) {
	return s.objects.Get(&Entry{Key: key})
}

// PageRequest selects one page of a list.
type PageRequest struct {
	// Namespace restricts the page to one namespace; "" lists every object.
	Namespace string
	// After is the key of the last object of the previous page; the page starts
	// strictly after it. "" starts at the beginning.
	After string
	// Limit is the maximum number of matching objects; 0 means no limit.
	Limit int
	// IndexValue, when non-nil, scans only the objects whose indexed field has
	// this value (the store must have an index).
	IndexValue *string
	// MoreInIndex decides what More means for an index scan that filled the
	// page: true, whether another object with the indexed value follows (the
	// apiserver's first page from its index); false, whether any object in
	// scope follows (its continuation pages and exact reads, which scan).
	MoreInIndex bool
	// Match selects objects; nil selects all.
	Match func(*Entry) bool
	// ScanBudget bounds how many objects a limited, selective page (Limit
	// > 0 and Match set) examines; 0 means no bound. When it runs out the
	// page ends early with More set, as KEP-365 allows. It never applies to
	// a page without a limit: the apiserver never paginates those.
	ScanBudget int
}

// Page is one page of a list.
type Page struct {
	Items []*Entry
	// More reports whether objects remain in scope after the last examined
	// one: the apiserver then returns a continue token, even if none of them
	// would match.
	More bool
	// LastKey is the key a continuation starts after: the last returned item,
	// or the last examined one when the scan budget ran out.
	LastKey string
}

// Page returns the objects of req in key order. It costs O(log n + examined).
func (s *Snapshot) Page(req PageRequest) Page {
	var page Page
	if req.Limit > 0 {
		page.Items = make([]*Entry, 0, min(req.Limit, 1024))
	}
	prefix := ""
	if req.Namespace != "" {
		prefix = req.Namespace + "/"
	}
	start := prefix
	if req.After != "" && req.After >= start {
		start = req.After + "\x00"
	}
	budget := req.ScanBudget
	if req.Limit <= 0 || req.Match == nil {
		budget = 0
	}
	examined, lastExamined, budgetSpent := 0, "", false
	visit := func(e *Entry) bool {
		if !strings.HasPrefix(e.Key, prefix) {
			return false
		}
		if req.Limit > 0 && len(page.Items) >= req.Limit {
			page.More = true
			return false
		}
		if budget > 0 && examined >= budget {
			page.More, budgetSpent = true, true
			return false
		}
		examined++
		lastExamined = e.Key
		if req.Match == nil || req.Match(e) {
			page.Items = append(page.Items, e)
			page.LastKey = e.Key
		}
		return true
	}
	if req.IndexValue != nil && s.index != nil {
		value := *req.IndexValue
		probe := &Entry{} // one lookup key for the scan: Get keeps no reference to it
		s.index.AscendGreaterOrEqual(indexItem{value: value, key: start}, func(it indexItem) bool {
			if it.value != value {
				return false
			}
			probe.Key = it.key
			e, ok := s.objects.Get(probe)
			if !ok {
				return true // unreachable: the index and objects trees change together
			}
			return visit(e)
		})
		if req.Limit > 0 && len(page.Items) == req.Limit && !req.MoreInIndex && !budgetSpent {
			page.More = s.hasAfter(prefix, page.LastKey)
		}
	} else {
		s.objects.AscendGreaterOrEqual(&Entry{Key: start}, visit)
	}
	if budgetSpent {
		page.LastKey = lastExamined
	}
	return page
}

// hasAfter reports whether an object with prefix follows key.
func (s *Snapshot) hasAfter(prefix, key string) bool {
	found := false
	s.objects.AscendGreaterOrEqual(&Entry{Key: key + "\x00"}, func(e *Entry) bool {
		found = strings.HasPrefix(e.Key, prefix)
		return false
	})
	return found
}

// Ascend calls fn for every object in key order until fn returns false.
func (s *Snapshot) Ascend(fn func(*Entry) bool) {
	s.objects.Ascend(fn)
}

// Ends returns the first and last objects in key order; ok is false for an
// empty snapshot.
func (s *Snapshot) Ends() (first, last *Entry, ok bool) {
	first, ok = s.objects.Min()
	if !ok {
		return nil, nil, false
	}
	last, _ = s.objects.Max()
	return first, last, true
}
