package snapshot

import (
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
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]unique.Handle[string], 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, unique.Make(k), unique.Make(m[k]))
	}
	return Labels{pairs: pairs}
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
}

// NewFieldNames returns a field list; names must not contain metadata.name or
// metadata.namespace.
func NewFieldNames(names ...string) *FieldNames {
	return &FieldNames{names: append([]string(nil), names...)}
}

// Fields is an immutable set of field values of one entry. It implements
// fields.Fields for the entry's metadata.name, metadata.namespace and the
// names of its FieldNames.
type Fields struct {
	names     *FieldNames
	namespace unique.Handle[string] // keeps the entry's interned namespace alive
	name      string
	values    []unique.Handle[string] // values[i] belongs to names.names[i]
}

var _ fields.Fields = (*Fields)(nil)

// NewFields returns the field set of an object; values[i] is the value of
// names' i-th field.
func NewFields(names *FieldNames, namespace, name string, values []string) *Fields {
	f := &Fields{names: names, namespace: unique.Make(namespace), name: name}
	if names != nil && len(names.names) > 0 {
		f.values = make([]unique.Handle[string], len(names.names))
		for i := range f.values {
			v := ""
			if i < len(values) {
				v = values[i]
			}
			f.values[i] = unique.Make(v)
		}
	}
	return f
}

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
		return f.name, true
	case "metadata.namespace":
		return f.namespace.Value(), true
	}
	if f.names == nil {
		return "", false
	}
	for i, n := range f.names.names {
		if n == field {
			return f.values[i].Value(), true
		}
	}
	return "", false
}

// NewEntry builds the entry of one object: its key, interned labels and
// field values (values[i] for names' i-th field), and a copy of raw.
func NewEntry(namespace, name string, rv uint64, labelMap map[string]string, names *FieldNames, values []string, raw []byte) *Entry {
	key := ObjectKey(namespace, name)
	f := NewFields(names, namespace, key[len(key)-len(name):], values)
	return &Entry{
		Key:       key,
		Namespace: f.namespace.Value(),
		Name:      f.name,
		RV:        rv,
		Labels:    NewLabels(labelMap),
		Fields:    f,
		Raw:       append([]byte(nil), raw...),
	}
}
