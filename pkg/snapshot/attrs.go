package snapshot

import (
	"encoding/binary"
	"slices"
	"sort"
	"unique"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Compact, interned label and field sets for entries.
//
// A store holds one Entry per object per representation, and selectors read
// only a handful of short strings from each. labels.Set and fields.Set maps
// cost ~1.2 KB per pod entry (BenchmarkStoreMemory, 100k pods: 1284
// entry-bytes/obj with maps). An entry instead keeps its labels as one
// string and its field values as another, each interned whole: the pods of
// one ReplicaSet share their labels' string, the pods of one node in one
// phase their fields' string, so that most entries hold two handles and
// no strings of their own (TestEntryOverhead). Values that differ per
// object (a pod's IP) are kept apart, in the entry.

// attrs are what selectors read from an entry besides its key.
type attrs struct {
	// names are the resource's selectable fields; nil for an entry known
	// by its key only (a deletion's), which has no fields.
	names *FieldNames
	// shared holds the values of names' fields that are not per-object,
	// in order; labels the label pairs sorted by key, key then value. Each
	// string is preceded by its length as a uvarint (appendString); the
	// zero handle is the empty string.
	shared, labels unique.Handle[string]
	// own holds the values of the per-object fields in order, encoded as
	// shared is.
	own string
}

// noFieldNames are the selectable fields of an entry whose resource has
// none besides metadata.name and metadata.namespace.
var noFieldNames = &FieldNames{}

// newAttrs returns the attributes of an object; values[i] is the value of
// names' i-th field ("" when missing).
func newAttrs(names *FieldNames, values []string, labelMap map[string]string) attrs {
	if names == nil {
		names = noFieldNames
	}
	a := attrs{names: names}
	var shared, own []byte
	for i, perObject := range names.perObject {
		v := ""
		if i < len(values) {
			v = values[i]
		}
		if perObject {
			own = appendString(own, v)
		} else {
			shared = appendString(shared, v)
		}
	}
	a.shared = intern(shared)
	a.own = string(own)
	if len(labelMap) > 0 {
		keys := make([]string, 0, len(labelMap))
		for k := range labelMap {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var pairs []byte
		for _, k := range keys {
			pairs = appendString(appendString(pairs, k), labelMap[k])
		}
		a.labels = intern(pairs)
	}
	return a
}

// intern returns the handle of b's string; the zero handle when b is
// empty.
func intern(b []byte) unique.Handle[string] {
	if len(b) == 0 {
		return unique.Handle[string]{}
	}
	return unique.Make(string(b))
}

// value returns h's string; "" for the zero handle.
func value(h unique.Handle[string]) string {
	if h == (unique.Handle[string]{}) {
		return ""
	}
	return h.Value()
}

// appendString appends s preceded by its length as a uvarint.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// nextString splits the first string off b, which appendString wrote.
func nextString(b string) (s, rest string) {
	size, shift, i := 0, 0, 0
	for ; b[i] >= 0x80; i++ {
		size |= int(b[i]&0x7f) << shift
		shift += 7
	}
	size |= int(b[i]) << shift
	i++
	return b[i : i+size], b[i+size:]
}

// FieldNames is the fixed list of selectable fields a resource's entries
// carry values for, shared by all of them. metadata.name and
// metadata.namespace are answered from the entry itself and are not listed.
type FieldNames struct {
	names []string
	// perObject[i] is set when names[i]'s values differ per object (a
	// pod's IP): they are kept with the entry, not interned, since an
	// interned string costs about 200 B beside its bytes until no entry
	// holds it.
	perObject []bool
}

// NewFieldNames returns a field list; names must not contain metadata.name or
// metadata.namespace.
func NewFieldNames(names ...string) *FieldNames {
	return NewFieldNamesPerObject(names, nil)
}

// NewFieldNamesPerObject returns a field list whose fields named in
// perObject have values that differ per object.
func NewFieldNamesPerObject(names, perObject []string) *FieldNames {
	n := &FieldNames{names: append([]string(nil), names...), perObject: make([]bool, len(names))}
	for i, name := range names {
		n.perObject[i] = slices.Contains(perObject, name)
	}
	return n
}

// entryLabels is an entry seen as its label set. A pointer to it is a
// labels.Labels without an allocation of its own.
type entryLabels Entry

var _ labels.Labels = (*entryLabels)(nil)

// Has reports whether key is set.
func (l *entryLabels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get returns the value of key, or "".
func (l *entryLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// Lookup returns the value of key and whether it is set.
func (l *entryLabels) Lookup(key string) (string, bool) {
	// Label sets are small: a linear scan beats a binary search.
	for pairs := value(l.attrs.labels); pairs != ""; {
		var k, v string
		k, pairs = nextString(pairs)
		v, pairs = nextString(pairs)
		if k == key {
			return v, true
		}
	}
	return "", false
}

// entryFields is an entry seen as its field set: metadata.name,
// metadata.namespace and the fields of its FieldNames. A pointer to it is
// a fields.Fields without an allocation of its own.
type entryFields Entry

var _ fields.Fields = (*entryFields)(nil)

// Has reports whether field is one of the set's fields.
func (f *entryFields) Has(field string) bool {
	_, ok := f.lookup(field)
	return ok
}

// Get returns the value of field, or "".
func (f *entryFields) Get(field string) string {
	v, _ := f.lookup(field)
	return v
}

func (f *entryFields) lookup(field string) (string, bool) {
	switch field {
	case FieldName:
		return (*Entry)(f).Name(), true
	case FieldNamespace:
		return (*Entry)(f).Namespace(), true
	}
	names := f.attrs.names
	if names == nil {
		return "", false
	}
	shared, own := value(f.attrs.shared), f.attrs.own
	for i, n := range names.names {
		var v string
		if names.perObject[i] {
			v, own = nextString(own)
		} else {
			v, shared = nextString(shared)
		}
		if n == field {
			return v, true
		}
	}
	return "", false
}

// NewEntry builds the entry of one object: its key, interned labels and
// field values (values[i] for names' i-th field), and a copy of raw.
func NewEntry(namespace, name string, rv uint64, labelMap map[string]string, names *FieldNames, values []string, raw []byte) *Entry {
	return &Entry{
		Key:   ObjectKey(namespace, name),
		RV:    rv,
		Raw:   append([]byte(nil), raw...),
		attrs: newAttrs(names, values, labelMap),
	}
}
