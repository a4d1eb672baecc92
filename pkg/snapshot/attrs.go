package snapshot

import (
	"encoding/binary"
	"slices"
	"sort"
	"strings"
	"unique"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Compact, interned label and field sets for entries.
//
// A store holds one Entry per object per representation, and selectors read
// only a handful of short strings from each. labels.Set and fields.Set maps
// cost ~1.2 KB per pod entry (BenchmarkStoreMemory, 100k pods: 1284
// entry-bytes/obj with maps); sorted slices of interned strings cost a
// fraction of that, and the repeated strings (label keys and values, node
// names, phases) are shared by every entry and every representation.

// Labels is an immutable label set: interned key/value pairs sorted by key.
// It implements labels.Labels.
type Labels struct {
	pairs []unique.Handle[string] // key0, value0, key1, value1, …
}

var _ labels.Labels = Labels{}

// NewLabels returns the compact, interned form of m.
func NewLabels(m map[string]string) Labels {
	if len(m) == 0 {
		return Labels{}
	}
	return Labels{pairs: appendLabels(make([]unique.Handle[string], 0, 2*len(m)), m)}
}

// appendLabels appends m's interned pairs, sorted by key, to pairs.
func appendLabels(pairs []unique.Handle[string], m map[string]string) []unique.Handle[string] {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		pairs = append(pairs, unique.Make(k), unique.Make(m[k]))
	}
	return pairs
}

// Has reports whether key is set.
func (l Labels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get returns the value of key, or "".
func (l Labels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// Lookup returns the value of key and whether it is set.
func (l Labels) Lookup(key string) (string, bool) {
	// Label sets are small: a linear scan beats a binary search.
	for i := 0; i < len(l.pairs); i += 2 {
		if l.pairs[i].Value() == key {
			return l.pairs[i+1].Value(), true
		}
	}
	return "", false
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

// Fields is an immutable set of field values of one entry. It implements
// fields.Fields for the entry's metadata.name, metadata.namespace and the
// names of its FieldNames.
type Fields struct {
	names *FieldNames
	// key is the entry's key (ObjectKey), which holds its namespace and
	// name.
	key string
	// values[i] belongs to names.names[i]; zero for a per-object field.
	// The entry's label pairs follow them (see entryLabels).
	values []unique.Handle[string]
	// own holds the values of the per-object fields in order, each
	// preceded by its length as a uvarint.
	own string
}

var _ fields.Fields = (*Fields)(nil)

// NewFields returns the field set of an object; values[i] is the value of
// names' i-th field.
func NewFields(names *FieldNames, namespace, name string, values []string) *Fields {
	return newFields(names, ObjectKey(namespace, name), values, nil)
}

// newFields returns the field set of an object, with its labels' pairs
// after the field values, in the same array.
func newFields(names *FieldNames, key string, values []string, labelMap map[string]string) *Fields {
	f := &Fields{names: names, key: key}
	n := 0
	if names != nil {
		n = len(names.names)
	}
	if n+len(labelMap) == 0 {
		return f
	}
	f.values = make([]unique.Handle[string], n, n+2*len(labelMap))
	var own []byte
	for i := range f.values {
		v := ""
		if i < len(values) {
			v = values[i]
		}
		if names.perObject[i] {
			own = binary.AppendUvarint(own, uint64(len(v)))
			own = append(own, v...)
			continue
		}
		f.values[i] = unique.Make(v)
	}
	f.own = string(own)
	f.values = appendLabels(f.values, labelMap)
	return f
}

// entryLabels is the label set of an entry built by NewEntry: the pairs
// after its field values. A pointer to it is a labels.Labels without an
// allocation of its own.
type entryLabels Fields

var _ labels.Labels = (*entryLabels)(nil)

func (l *entryLabels) pairs() Labels {
	n := 0
	if l.names != nil {
		n = len(l.names.names)
	}
	return Labels{pairs: l.values[n:]}
}

// Has reports whether key is set.
func (l *entryLabels) Has(key string) bool { return l.pairs().Has(key) }

// Get returns the value of key, or "".
func (l *entryLabels) Get(key string) string { return l.pairs().Get(key) }

// Lookup returns the value of key and whether it is set.
func (l *entryLabels) Lookup(key string) (string, bool) { return l.pairs().Lookup(key) }

// Has reports whether field is one of the set's fields.
func (f *Fields) Has(field string) bool {
	_, ok := f.lookup(field)
	return ok
}

// Get returns the value of field, or "".
func (f *Fields) Get(field string) string {
	v, _ := f.lookup(field)
	return v
}

func (f *Fields) lookup(field string) (string, bool) {
	switch field {
	case "metadata.name":
		return f.key[strings.IndexByte(f.key, '/')+1:], true
	case "metadata.namespace":
		if i := strings.IndexByte(f.key, '/'); i >= 0 {
			return f.key[:i], true
		}
		return "", true
	}
	if f.names == nil {
		return "", false
	}
	own := f.own
	for i, n := range f.names.names {
		if !f.names.perObject[i] {
			if n == field {
				return f.values[i].Value(), true
			}
			continue
		}
		var v string
		v, own = nextOwn(own)
		if n == field {
			return v, true
		}
	}
	return "", false
}

// nextOwn splits the first value off own (see Fields.own).
func nextOwn(own string) (v, rest string) {
	size, shift, i := 0, 0, 0
	for ; own[i] >= 0x80; i++ {
		size |= int(own[i]&0x7f) << shift
		shift += 7
	}
	size |= int(own[i]) << shift
	i++
	return own[i : i+size], own[i+size:]
}

// NewEntry builds the entry of one object: its key, interned labels and
// field values (values[i] for names' i-th field), and a copy of raw.
func NewEntry(namespace, name string, rv uint64, labelMap map[string]string, names *FieldNames, values []string, raw []byte) *Entry {
	key := ObjectKey(namespace, name)
	f := newFields(names, key, values, labelMap)
	return &Entry{
		Key:    key,
		RV:     rv,
		Labels: (*entryLabels)(f),
		Fields: f,
		Raw:    append([]byte(nil), raw...),
	}
}
