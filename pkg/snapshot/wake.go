package snapshot

import (
	"sync"

	"k8s.io/apimachinery/pkg/sharding"
)

// FieldNamespace and FieldName are the selectable fields every entry has.
const (
	FieldNamespace = "metadata.namespace"
	FieldName      = "metadata.name"
)

// FieldValue is one value of one selectable field (metadata.name,
// metadata.namespace, or a field of the entry's FieldNames): a watcher
// whose selector requires it waits for changes to objects that have it
// (Store.WaitOn).
type FieldValue struct {
	Field, Value string
}

// valueOf returns e's value of field and whether e carries field values
// at all: an entry known by its key only (a deletion) has none but its
// key's.
func valueOf(e *Entry, field string) (string, bool) {
	switch field {
	case FieldNamespace:
		return e.Namespace(), true
	case FieldName:
		return e.Name(), true
	}
	if e.attrs.names == nil {
		return "", false
	}
	// As a field selector reads it: a field the entry lacks is "".
	return e.Fields().Get(field), true
}

// Wait is a wait for the next change to an object with one field value
// (Store.WaitOn). Besides waking its watcher, it proves which changes of the
// feed the watcher need not read (Cursor.Skip), so that a watcher of one
// node's pods neither reads nor is woken by other nodes' changes, however
// many there are. The zero Wait proves nothing.
type Wait struct {
	sig *signal
	w   *waker
}

// Done is closed by the first change to an object that has, or had before
// the change, the Wait's field value, and by every continuity break.
func (w Wait) Done() <-chan struct{} { return w.sig.done }

// skipTo returns the feed sequence number up to which no change touched
// the Wait's field value since the Wait was made: the change that closed
// it, or the newest change while it is open. ok is false when it was
// closed by a continuity break or proves nothing.
func (w Wait) skipTo() (from, to uint64, ok bool) {
	if w.sig == nil {
		return 0, 0, false
	}
	w.w.mu.Lock()
	defer w.w.mu.Unlock()
	select {
	case <-w.sig.done:
		return w.sig.from, w.sig.at, w.sig.at != resetSeq
	default:
		return w.sig.from, w.w.head, true
	}
}

// signal is the shared wait of every watcher of one field value.
type signal struct {
	done chan struct{}
	// from is the feed's head when the signal was made: no change at or
	// after from touched the value before the change at `at`.
	from uint64
	// at is the sequence number of the change that closed done, or
	// resetSeq for a continuity break; set before done is closed.
	at uint64
}

const resetSeq = ^uint64(0)

// waker wakes the watchers of one field value (a namespace, a node name,
// an object's name) or of one shard only when a change touched that value
// or an object of that shard, rather than on every change of the store.
type waker struct {
	mu sync.Mutex
	// chans holds, per field and value, the signal closed at the value's
	// next change; made on demand, dropped when closed. A field is dropped
	// with its last value, so that a change looks up only the fields some
	// watcher waits on.
	chans map[string]map[string]*signal
	// shards holds, per shard selector (its canonical form), the signal
	// closed at the next change to an object of the shard; made on demand,
	// dropped when closed. A change hashes its object's key once and
	// checks each waited-on shard's ranges, so that it wakes the watchers
	// of its own shard only.
	shards map[string]*shardSignal
	// uid reads an entry's metadata.uid, the key of a shard by uid; nil,
	// or an entry it cannot read, wakes every shard by uid.
	uid func(*Entry) (string, error)
	// head is the sequence number after the last change the waker was told
	// of: every change before it that touched a waited-on value closed its
	// signal.
	head uint64
}

func newWaker(uid func(*Entry) (string, error)) *waker {
	return &waker{chans: map[string]map[string]*signal{}, shards: map[string]*shardSignal{}, uid: uid}
}

// waitOn returns the Wait for k's next change.
func (w *waker) waitOn(k FieldValue) Wait {
	w.mu.Lock()
	defer w.mu.Unlock()
	values, ok := w.chans[k.Field]
	if !ok {
		values = map[string]*signal{}
		w.chans[k.Field] = values
	}
	sig, ok := values[k.Value]
	if !ok {
		sig = &signal{done: make(chan struct{}), from: w.head}
		values[k.Value] = sig
	}
	return Wait{sig: sig, w: w}
}

// changed wakes the values and shards of cur and prev (nil when absent)
// after the change from prev to cur was appended to the feed at seq: a
// watcher of either value may see an event (an object entering or leaving
// its selection).
func (w *waker) changed(cur, prev *Entry, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.head = seq + 1
	w.changedShards(cur, prev, seq)
	for field, values := range w.chans {
		for _, e := range [2]*Entry{cur, prev} {
			if e == nil {
				continue
			}
			if v, ok := valueOf(e, field); ok {
				if sig, ok := values[v]; ok {
					sig.at = seq
					close(sig.done)
					delete(values, v)
				}
			}
		}
		if len(values) == 0 {
			delete(w.chans, field)
		}
	}
}

// wakeAll wakes every value and shard at a continuity break or a stop:
// nothing may be skipped, the cursors must read (and be told of the
// break).
func (w *waker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, sig := range w.shards {
		sig.at = resetSeq
		close(sig.done)
		delete(w.shards, key)
	}
	for field, values := range w.chans {
		for _, sig := range values {
			sig.at = resetSeq
			close(sig.done)
		}
		delete(w.chans, field)
	}
}

// shardSignal is the shared wait of every watcher of one shard.
type shardSignal struct {
	*signal
	shard Shard
}

// waitShard returns the Wait for the next change to an object of sel's
// shard (a selector the apiserver's parser made: one key for all ranges).
// A selector whose ranges do not read as numbers waits for every change.
func (w *waker) waitShard(sel sharding.Selector) Wait {
	key := sel.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	sig, ok := w.shards[key]
	if !ok {
		shard, err := NewShard(sel)
		if err != nil {
			shard = Shard{ranges: []hashRange{{toTop: true}}}
		}
		sig = &shardSignal{signal: &signal{done: make(chan struct{}), from: w.head}, shard: shard}
		w.shards[key] = sig
	}
	return Wait{sig: sig.signal, w: w}
}

// changedShards wakes the shards that hold cur's or prev's object: each
// entry's key is hashed once (a uid's hash is kept on its entry), whatever
// the number of shards. An entry whose uid cannot be read wakes every
// shard by uid, whose watchers then decide for themselves.
func (w *waker) changedShards(cur, prev *Entry, seq uint64) {
	if len(w.shards) == 0 {
		return
	}
	var uidHashes, nsHashes []uint64
	uidUnknown := false
	for _, e := range [2]*Entry{cur, prev} {
		if e == nil {
			continue
		}
		nsHashes = append(nsHashes, ShardHash(e.Namespace()))
		if w.uid == nil {
			uidUnknown = true
			continue
		}
		h, err := e.UIDHash(w.uid)
		if err != nil {
			uidUnknown = true
			continue
		}
		uidHashes = append(uidHashes, h)
	}
	for key, sig := range w.shards {
		hashes := nsHashes
		if sig.shard.ByUID {
			hashes = uidHashes
		}
		woken := sig.shard.ByUID && uidUnknown
		for _, h := range hashes {
			woken = woken || sig.shard.Holds(h)
		}
		if woken {
			sig.at = seq
			close(sig.done)
			delete(w.shards, key)
		}
	}
}
