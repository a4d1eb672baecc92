package watch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// TestBookmarkNeverOvertakesEvents: under concurrent writes, every watch
// gets the events the apiserver sends it, and no BOOKMARK at N before an
// event at or before N: a bookmark at N promises the client every event up
// to N, as the watch cache's, whose bookmarks queue behind the events
// before them, and a client resuming from it would never see that event.
// The pods written move between nodes, change labels, are deleted and
// created again; the watches select all of them, by label, by node
// (spec.nodeName), by name (metadata.name), in one namespace, and so on:
// a watch of a node, a name or a namespace waits for changes to its own
// objects only and skips the others' (Store.WaitOn, Cursor.Skip). The
// bookmarks are periodic ones or the one shortly before a watch's
// deadline. The orders of a watcher's steps that concurrent writes reach
// only at times are taken one by one in TestBookmarkDueWithOwnChangesUnread.
func TestBookmarkNeverOvertakesEvents(t *testing.T) {
	all := []bookmarkWatch{{}}
	byLabel := []bookmarkWatch{{labelSelector: "app=a"}}
	keyed := []bookmarkWatch{
		{fieldSelector: "spec.nodeName=node-1"},
		{fieldSelector: "metadata.name=p3"},
		{namespace: "ns-1"},
		{namespace: "ns-1", labelSelector: "app=a"},
		{namespace: "ns-0", fieldSelector: "spec.nodeName=node-2"},
	}
	for _, tc := range []struct {
		name     string
		deadline bool // the deadline bookmark (fake clock), else periodic ones
		watches  []bookmarkWatch
		watchers int // each watches watches[i%len(watches)]
	}{
		{name: "periodic", watches: all, watchers: 4},
		{name: "periodic_selector", watches: byLabel, watchers: 4},
		{name: "periodic_keyed", watches: keyed, watchers: len(keyed)},
		{name: "deadline", deadline: true, watches: all, watchers: 40},
		{name: "deadline_selector", deadline: true, watches: byLabel, watchers: 40},
		{name: "deadline_keyed", deadline: true, watches: keyed, watchers: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes := newPodWrites()
			store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 1 << 18})
			store.Replace(writes.initial(), 10)
			cfg := Config{BookmarkInterval: time.Millisecond}
			timeout := "600"
			var clk *testingclock.FakeClock
			if tc.deadline {
				// Periodic bookmarks never come; the deadline bookmark
				// comes 2s before the 3s deadline, for every watcher at
				// the same instant of the writes.
				clk = testingclock.NewFakeClock(time.Now())
				cfg = Config{BookmarkInterval: time.Hour, Clock: clk}
				timeout = "3"
			}
			ts := serveSelected(t, store, cfg)
			watches := make([]bookmarkWatch, tc.watchers)
			decoders := make([]*wire.WatchDecoder, tc.watchers)
			for i := range decoders {
				watches[i] = tc.watches[i%len(tc.watches)]
				decoders[i] = open(t, watches[i].url(ts.URL, timeout))
				defer func(d *wire.WatchDecoder) { _ = d.Close() }(decoders[i])
			}

			// Each reader keeps the events of its watch until it ends.
			progress := newBookmarkProgress(tc.watchers)
			received := make([][]watchEvent, tc.watchers)
			var readers sync.WaitGroup
			for i, d := range decoders {
				readers.Go(func() {
					defer progress.end(i)
					received[i] = readWatch(t, d, func(rv uint64) { progress.saw(i, rv) })
				})
			}

			if tc.deadline {
				stop := make(chan struct{})
				var writer sync.WaitGroup
				writer.Go(func() {
					for rv := uint64(11); ; rv++ {
						select {
						case <-stop:
							return
						default:
						}
						store.Apply(writes.next(rv), rv)
					}
				})
				// Every watcher's deadline and bookmark timers are set.
				timersSet := func() {
					t.Helper()
					if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
						return clk.Waiters() == 2*tc.watchers, nil
					}); err != nil {
						t.Fatalf("timers of %d watchers: %d, want %d", tc.watchers, clk.Waiters(), 2*tc.watchers)
					}
				}
				timersSet()
				// Writes are under way, so that every bookmark has a
				// resourceVersion past the watch's start to carry.
				if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
					return store.Progress() > 100, nil
				}); err != nil {
					t.Fatal("the writes did not start")
				}
				clk.Step(time.Second + time.Millisecond) // the deadline bookmarks
				timersSet()                              // each watcher handled its bookmark timer
				close(stop)
				writer.Wait()
				clk.Step(2 * time.Second) // the deadlines
				readers.Wait()
			} else {
				// A watcher bookmarks only once it has read every change;
				// under writes without a pause it may never have. Every 500
				// writes, and after the last, the writes wait for each
				// watcher's bookmark at the latest (a bookmark timer firing
				// while nothing is written). After the last, every watcher
				// has had every event: its stream is closed.
				const last = 3010
				for rv := uint64(11); rv <= last; rv++ {
					store.Apply(writes.next(rv), rv)
					if rv%500 == 0 || rv == last {
						if !progress.waitAll(rv, time.Minute) {
							t.Fatalf("after the write at %d, not every watcher had a bookmark at it within a minute", rv)
						}
					}
				}
				for _, d := range decoders {
					_ = d.Close()
				}
				readers.Wait()
			}

			for i, w := range watches {
				want := wantEvents(writes.log, w.selects)
				if problem := checkWatch(received[i], want); problem != "" {
					t.Errorf("watch %d (%s): %s", i, w, problem)
				}
				if !slices.ContainsFunc(received[i], func(ev watchEvent) bool { return ev.Type == wire.Bookmark }) {
					t.Errorf("watch %d (%s): no bookmark; the test proves nothing", i, w)
				}
			}
		})
	}
}

// podState is a pod as TestBookmarkNeverOvertakesEvents writes it.
type podState struct {
	namespace, name, node, app string
}

// entry is the pod's entry at rv, as a store of pods holds it.
func (p *podState) entry(rv uint64) *snapshot.Entry {
	raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"labels":{"app":%q},"name":%q,"namespace":%q,"resourceVersion":"%d"},"spec":{"nodeName":%q}}`,
		p.app, p.name, p.namespace, rv, p.node)
	return snapshot.NewEntry(p.namespace, p.name, rv, map[string]string{"app": p.app}, podFields, []string{p.node}, []byte(raw))
}

// podChange is one change written: the pod before and after it, nil where
// it did not exist.
type podChange struct {
	rv        uint64
	prev, cur *podState
}

// podWrites writes seven pods, p0 to p6, pod pI in namespace ns-(I%2), and
// keeps the log of its changes.
type podWrites struct {
	pods map[string]*podState
	log  []podChange
}

// newPodWrites starts with every pod on node-(I%3), labeled app=a.
func newPodWrites() *podWrites {
	w := &podWrites{pods: map[string]*podState{}}
	for i := range 7 {
		name := fmt.Sprintf("p%d", i)
		w.pods[name] = &podState{namespace: fmt.Sprintf("ns-%d", i%2), name: name, node: fmt.Sprintf("node-%d", i%3), app: "a"}
	}
	return w
}

// initial is the pods' entries at the start, at resourceVersions up to 10.
func (w *podWrites) initial() []*snapshot.Entry {
	var entries []*snapshot.Entry
	for i := range 7 {
		entries = append(entries, w.pods[fmt.Sprintf("p%d", i)].entry(uint64(1+i)))
	}
	return entries
}

// next logs and returns the change at rv, to pod p(rv%7): deleted when it
// exists and rv%5 == 0, else created or updated on node-((rv/7)%3), which
// moves it at every update, labeled app=b when rv%3 == 0, else app=a.
func (w *podWrites) next(rv uint64) snapshot.Change {
	i := rv % 7
	name := fmt.Sprintf("p%d", i)
	prev := w.pods[name]
	if prev != nil && rv%5 == 0 {
		delete(w.pods, name)
		w.log = append(w.log, podChange{rv: rv, prev: prev})
		// The apiserver's deleted object: its last state at the deletion.
		return snapshot.Change{Deleted: true, Entry: prev.entry(rv)}
	}
	cur := &podState{namespace: fmt.Sprintf("ns-%d", i%2), name: name, node: fmt.Sprintf("node-%d", (rv/7)%3), app: "a"}
	if rv%3 == 0 {
		cur.app = "b"
	}
	w.pods[name] = cur
	w.log = append(w.log, podChange{rv: rv, prev: prev, cur: cur})
	return snapshot.Change{Entry: cur.entry(rv)}
}

// bookmarkWatch is one watch of TestBookmarkNeverOvertakesEvents: of one
// namespace or all, with selectors.
type bookmarkWatch struct {
	namespace, labelSelector, fieldSelector string
}

func (w bookmarkWatch) String() string {
	return fmt.Sprintf("namespace %q, labelSelector %q, fieldSelector %q", w.namespace, w.labelSelector, w.fieldSelector)
}

// url is the watch's URL on a server of serveSelected at base, from
// resourceVersion 10 with bookmarks.
func (w bookmarkWatch) url(base, timeoutSeconds string) string {
	path := base
	if w.namespace != "" {
		path += "/namespaces/" + w.namespace
	}
	q := url.Values{"watch": {"1"}, "resourceVersion": {"10"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {timeoutSeconds}}
	if w.labelSelector != "" {
		q.Set("labelSelector", w.labelSelector)
	}
	if w.fieldSelector != "" {
		q.Set("fieldSelector", w.fieldSelector)
	}
	return path + "?" + q.Encode()
}

// selects reports whether the watch selects p, as the apiserver decides
// it.
func (w bookmarkWatch) selects(p *podState) bool {
	labelSel := labels.Everything()
	fieldSel := fields.Everything()
	var err error
	if w.labelSelector != "" {
		if labelSel, err = labels.Parse(w.labelSelector); err != nil {
			panic(err)
		}
	}
	if w.fieldSelector != "" {
		if fieldSel, err = fields.ParseSelector(w.fieldSelector); err != nil {
			panic(err)
		}
	}
	return (w.namespace == "" || p.namespace == w.namespace) &&
		labelSel.Matches(labels.Set{"app": p.app}) &&
		fieldSel.Matches(fields.Set{"metadata.namespace": p.namespace, "metadata.name": p.name, "spec.nodeName": p.node})
}

// serveSelected starts a server answering every request as a watch of
// store with the request's label and field selectors and, under
// /namespaces/NS, of namespace NS, its Target made as the Handler makes it.
func serveSelected(t *testing.T, store *snapshot.Store, cfg Config) *httptest.Server {
	t.Helper()
	srv := NewServer(cfg)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := Decide(r.URL.RawQuery)
		labelSel, lerr := labels.Parse(d.LabelSelector)
		fieldSel, ferr := fields.ParseSelector(d.FieldSelector)
		if d.Action == PassThrough || lerr != nil || ferr != nil {
			http.Error(w, "pass through", http.StatusTeapot)
			return
		}
		target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store, WatchListDefaults: true}
		if ns, ok := strings.CutPrefix(r.URL.Path, "/namespaces/"); ok {
			target.Namespace = ns
		}
		if !labelSel.Empty() || !fieldSel.Empty() {
			target.Match = func(e *snapshot.Entry) bool { return labelSel.Matches(e.Labels()) && fieldSel.Matches(e.Fields()) }
			target.Wake = wakeKey(fieldSel)
		}
		if ok, reason := srv.Serve(w, r, d, target); !ok {
			http.Error(w, string(reason), http.StatusTeapot)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

// watchEvent is an event as a client reads it: its type, its object's
// name (none for a bookmark) and its resourceVersion.
type watchEvent struct {
	Type wire.EventType
	Name string
	RV   uint64
}

func (ev watchEvent) String() string {
	if ev.Type == wire.Bookmark {
		return fmt.Sprintf("BOOKMARK at %d", ev.RV)
	}
	return fmt.Sprintf("%s %s at %d", ev.Type, ev.Name, ev.RV)
}

// wantEvents returns the events the apiserver sends a watch that selects
// what selects selects, for the changes of log: ADDED when a pod starts to
// be selected (created, or changed into the selection), DELETED when it
// stops (deleted, or changed out of it: its last selected state at the
// change's resourceVersion), MODIFIED when it stays selected.
func wantEvents(log []podChange, selects func(*podState) bool) []watchEvent {
	var want []watchEvent
	for _, c := range log {
		was := c.prev != nil && selects(c.prev)
		is := c.cur != nil && selects(c.cur)
		switch {
		case !was && is:
			want = append(want, watchEvent{wire.Added, c.cur.name, c.rv})
		case was && is:
			want = append(want, watchEvent{wire.Modified, c.cur.name, c.rv})
		case was && !is:
			want = append(want, watchEvent{wire.Deleted, c.prev.name, c.rv})
		}
	}
	return want
}

// checkWatch compares the events a watch received with the events want the
// apiserver sends it: the received events but bookmarks must be the first
// ones of want, in order, and no bookmark may come before an event of want
// at or before its resourceVersion. It returns the first difference, or
// "".
func checkWatch(received, want []watchEvent) string {
	n := 0 // events of want received
	for i, ev := range received {
		if ev.Type == wire.Bookmark {
			if n < len(want) && want[n].RV <= ev.RV {
				return fmt.Sprintf("%s before %s (after %v)", ev, want[n], tail(received[:i]))
			}
			continue
		}
		if n == len(want) || ev != want[n] {
			wanted := "nothing more"
			if n < len(want) {
				wanted = want[n].String()
			}
			return fmt.Sprintf("got %s, want %s (after %v)", ev, wanted, tail(received[:i]))
		}
		n++
	}
	return ""
}

// tail is the last few of events, for messages.
func tail(events []watchEvent) []watchEvent {
	return events[max(0, len(events)-5):]
}

// readWatch reads d until it ends and returns its events; bookmarked is
// told each bookmark's resourceVersion as it comes.
func readWatch(t *testing.T, d *wire.WatchDecoder, bookmarked func(rv uint64)) []watchEvent {
	var events []watchEvent
	for {
		ev, err := d.Next()
		if err != nil {
			return events
		}
		rv, err := strconv.ParseUint(ev.ResourceVersion, 10, 64)
		if err != nil {
			t.Errorf("%s without a resourceVersion", ev.Type)
			return events
		}
		got := watchEvent{Type: ev.Type, RV: rv}
		if ev.Type != wire.Bookmark {
			meta, err := wire.ExtractMeta(wire.JSON, ev.Object)
			if err != nil {
				t.Errorf("%s at %d: %v", ev.Type, rv, err)
				return events
			}
			got.Name = meta.Name
		}
		events = append(events, got)
		if ev.Type == wire.Bookmark {
			bookmarked(rv)
		}
	}
}

// bookmarkProgress is the newest bookmark each reader of
// TestBookmarkNeverOvertakesEvents received, and whether its watch ended,
// for the writes to wait on.
type bookmarkProgress struct {
	mu      sync.Mutex
	changed *sync.Cond
	newest  []uint64
	ended   []bool
}

func newBookmarkProgress(readers int) *bookmarkProgress {
	p := &bookmarkProgress{newest: make([]uint64, readers), ended: make([]bool, readers)}
	p.changed = sync.NewCond(&p.mu)
	return p
}

// saw records reader i's bookmark at rv.
func (p *bookmarkProgress) saw(i int, rv uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.newest[i] = max(p.newest[i], rv)
	p.changed.Broadcast()
}

// end records that reader i's watch ended.
func (p *bookmarkProgress) end(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended[i] = true
	p.changed.Broadcast()
}

// waitAll waits until every reader whose watch did not end had a bookmark
// at rv or later; false if that took longer than timeout.
func (p *bookmarkProgress) waitAll(rv uint64, timeout time.Duration) bool {
	timedOut := false
	timer := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		timedOut = true
		p.changed.Broadcast()
	})
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		caught := true
		for i := range p.newest {
			if !p.ended[i] && p.newest[i] < rv {
				caught = false
			}
		}
		if caught || timedOut {
			return caught
		}
		p.changed.Wait()
	}
}

// TestBookmarkDueWithOwnChangesUnread: a node's watcher whose bookmark
// comes due while changes to its own pods are unread sends their events
// first, then the bookmark, never at a resourceVersion past the last
// change it read: not at its own unread change, up to which it skips the
// other nodes' changes (Cursor.Skip), nor at a change that lands while it
// writes those events.
//
// The watcher's loop (stream) chooses at random between a change and a
// bookmark when both are due, so the test runs the loop's steps itself:
// the watcher has read every change and waits for its node's next
// (waitForChanges), the changes come, and the bookmark's turn comes first
// (progressBookmark); then the loop reads what is left (readChanges).
func TestBookmarkDueWithOwnChangesUnread(t *testing.T) {
	large := strings.Repeat("x", burstBytes) // written out as soon as read
	other := func(rv uint64) snapshot.Change { return snapshot.Change{Entry: pod("other", "node-b", rv)} }
	mine := func(rv uint64) snapshot.Change { return snapshot.Change{Entry: pod("mine", "node-a", rv)} }
	for _, tc := range []struct {
		name    string
		changes []snapshot.Change
		// duringWrite is a change applied while the watcher writes its
		// first burst.
		duringWrite *snapshot.Change
		want        []watchEvent
	}{
		{
			name:    "its change after other nodes', the newest",
			changes: []snapshot.Change{other(11), other(12), other(13), mine(14)},
			want:    []watchEvent{{wire.Modified, "mine", 14}, {wire.Bookmark, "", 14}},
		},
		{
			name:    "its pod moved to another node, the newest change",
			changes: []snapshot.Change{other(11), other(12), {Entry: pod("mine", "node-b", 13)}},
			want:    []watchEvent{{wire.Deleted, "mine", 13}, {wire.Bookmark, "", 13}},
		},
		{
			name:    "its pod deleted after other nodes' changes",
			changes: []snapshot.Change{other(11), {Deleted: true, Entry: pod("mine", "node-a", 12)}, other(13)},
			want:    []watchEvent{{wire.Deleted, "mine", 12}, {wire.Bookmark, "", 13}},
		},
		{
			name: "a change of its pod lands while it writes the one before",
			changes: []snapshot.Change{{Entry: snapshot.NewEntry("ns", "mine", 11, nil, podFields, []string{"node-a"},
				fmt.Appendf(nil, `{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":"mine","namespace":"ns","resourceVersion":"11"},"spec":{"nodeName":"node-a","pad":%q}}`, large))}},
			duringWrite: new(mine(12)),
			want:        []watchEvent{{wire.Modified, "mine", 11}, {wire.Bookmark, "", 11}, {wire.Modified, "mine", 12}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := snapshot.NewStore(snapshot.StoreConfig{})
			store.Replace([]*snapshot.Entry{pod("mine", "node-a", 5), pod("other", "node-b", 6)}, 10)
			out := &recordingWriter{header: http.Header{}}
			if tc.duringWrite != nil {
				out.onWrite = func() {
					store.Apply(*tc.duringWrite, tc.duringWrite.Entry.RV)
					out.onWrite = nil
				}
			}
			cursor, err := store.Subscribe(10)
			if err != nil {
				t.Fatal(err)
			}
			w := &watcher{
				srv: NewServer(Config{}), t: nodeTarget(store, "node-a", nil), d: Decision{Action: From, RV: 10, Bookmarks: true},
				wr: newWriter(out, wire.JSON, widgetType, time.Minute, clock.RealClock{}), cursor: cursor, bookmarkRV: 10, readRV: 10,
			}
			// The loop's steps before its select: wait, then read (nothing).
			w.waitForChanges()
			if n, err := w.readChanges(); n != 0 || err != nil {
				t.Fatalf("read %d changes (%v) before any was applied", n, err)
			}
			for _, c := range tc.changes {
				store.Apply(c, c.Entry.RV)
			}
			if err := w.progressBookmark(); err != nil {
				t.Fatal(err)
			}
			// The loop's next turn reads what is left.
			w.waitForChanges()
			if _, err := w.readChanges(); err != nil {
				t.Fatal(err)
			}
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
			got := readWatch(t, wire.NewWatchDecoder(wire.JSON, io.NopCloser(bytes.NewReader(out.buf.Bytes())), wire.WatchOptions{}), func(uint64) {})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// recordingWriter is a ResponseWriter that keeps what is written and
// calls onWrite, when set, after each write.
type recordingWriter struct {
	header  http.Header
	buf     bytes.Buffer
	onWrite func()
}

func (w *recordingWriter) Header() http.Header { return w.header }
func (w *recordingWriter) WriteHeader(int)     {}
func (w *recordingWriter) Flush()              {}
func (w *recordingWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.onWrite != nil {
		w.onWrite()
	}
	return len(p), nil
}

// TestStopMatchingDeletedCarriesPreviousState: an object that stops
// matching a watcher's selector is DELETED for it with its last state that
// matched, at the change's resourceVersion, as the watch cache's
// convertToWatchEvent sends it, not with the state that no longer matches.
func TestStopMatchingDeletedCarriesPreviousState(t *testing.T) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	store.Replace([]*snapshot.Entry{widget("w1", 5, "a")}, 10)
	ts := serve(t, store, nil)
	d := open(t, ts.URL+"?watch=1&resourceVersion=10&labelSelector=app%3Da&timeoutSeconds=600")
	defer d.Close()

	store.Apply(snapshot.Change{Entry: widget("w1", 11, "b")}, 11)
	ev, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"labels":{"app":"a"},"name":"w1","namespace":"ns","resourceVersion":"11"}}`
	if ev.Type != wire.Deleted || string(ev.Object) != want {
		t.Errorf("got %s %s, want DELETED %s", ev.Type, ev.Object, want)
	}
}
