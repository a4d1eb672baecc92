package snapshot

import "sync"

// FieldNamespace and FieldName are the selectable fields every entry has.
const (
	FieldNamespace = "metadata.namespace"
	FieldName      = "metadata.name"
)

// FieldValue is one value of one selectable field (metadata.name,
// metadata.namespace, or a field of the entry's FieldNames): a watcher
// whose selector requires it waits for changes to objects that have it
// (Store.ChangedOn).
type FieldValue struct {
	Field, Value string
}

// valueOf returns e's value of field and whether e carries field values
// at all: an entry known by its key only (a deletion) has none but its
// key's.
func valueOf(e *Entry, field string) (string, bool) {
	switch field {
	case FieldNamespace:
		return e.Namespace, true
	case FieldName:
		return e.Name, true
	}
	if e.Fields == nil {
		return "", false
	}
	// As a field selector reads it: a field the entry lacks is "".
	return e.Fields.Get(field), true
}

// waker wakes the watchers of one field value (a namespace, a node name,
// an object's name) only when a change touched that value, rather than on
// every change of the store. So that such a watcher never falls more than
// the feed's capacity behind while it sleeps (its cursor would be
// overrun), every value is also woken once per sweepEvery changes, and on
// every continuity break.
type waker struct {
	mu sync.Mutex
	// chans holds, per field and value, the channel closed at the value's
	// next wake; made on demand, dropped when closed. A field is dropped
	// with its last value, so that a change looks up only the fields some
	// watcher waits on.
	chans map[string]map[string]chan struct{}
	// since counts changes since every value was last woken.
	since, sweepEvery int
}

func newWaker(feedCapacity int) *waker {
	return &waker{chans: map[string]map[string]chan struct{}{}, sweepEvery: max(1, feedCapacity/4)}
}

// changedOn returns a channel closed at the next wake of k.
func (w *waker) changedOn(k FieldValue) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	values, ok := w.chans[k.Field]
	if !ok {
		values = map[string]chan struct{}{}
		w.chans[k.Field] = values
	}
	ch, ok := values[k.Value]
	if !ok {
		ch = make(chan struct{})
		values[k.Value] = ch
	}
	return ch
}

// changed wakes the values of cur and prev (nil when absent) after a change
// from prev to cur was appended to the feed: a watcher of either value may
// see an event (an object entering or leaving its selection).
func (w *waker) changed(cur, prev *Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since++
	if w.since >= w.sweepEvery {
		w.wakeAllLocked()
		return
	}
	for field, values := range w.chans {
		for _, e := range [2]*Entry{cur, prev} {
			if e == nil {
				continue
			}
			if v, ok := valueOf(e, field); ok {
				if ch, ok := values[v]; ok {
					close(ch)
					delete(values, v)
				}
			}
		}
		if len(values) == 0 {
			delete(w.chans, field)
		}
	}
}

// wakeAll wakes every value (a continuity break, a stop).
func (w *waker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAllLocked()
}

func (w *waker) wakeAllLocked() {
	for field, values := range w.chans {
		for _, ch := range values {
			close(ch)
		}
		delete(w.chans, field)
	}
	w.since = 0
}
