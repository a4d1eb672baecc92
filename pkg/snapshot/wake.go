package snapshot

import "sync"

// nsWaker wakes the watchers of one namespace only when that namespace
// changed, rather than on every change of the store. So that such a
// watcher never falls more than the feed's capacity behind while it sleeps
// (its cursor would be overrun), every namespace is also woken once per
// sweepEvery changes, and on every continuity break.
type nsWaker struct {
	mu sync.Mutex
	// chans holds, per namespace, the channel closed at its next wake;
	// made on demand, dropped when closed.
	chans map[string]chan struct{}
	// since counts changes since every namespace was last woken.
	since, sweepEvery int
}

func newNSWaker(feedCapacity int) *nsWaker {
	return &nsWaker{chans: map[string]chan struct{}{}, sweepEvery: max(1, feedCapacity/4)}
}

// changedIn returns a channel closed at the next wake of namespace ns.
func (w *nsWaker) changedIn(ns string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.chans[ns]
	if !ok {
		ch = make(chan struct{})
		w.chans[ns] = ch
	}
	return ch
}

// changed wakes namespace ns after a change to it was appended to the feed.
func (w *nsWaker) changed(ns string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since++
	if w.since >= w.sweepEvery {
		w.wakeAllLocked()
		return
	}
	if ch, ok := w.chans[ns]; ok {
		close(ch)
		delete(w.chans, ns)
	}
}

// wakeAll wakes every namespace (a continuity break, a stop).
func (w *nsWaker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAllLocked()
}

func (w *nsWaker) wakeAllLocked() {
	for ns, ch := range w.chans {
		close(ch)
		delete(w.chans, ns)
	}
	w.since = 0
}
