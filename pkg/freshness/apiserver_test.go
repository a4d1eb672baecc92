package freshness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

// The tests below drive Prover.Consistent through the apiserver against a
// scripted apiserver: every probe and every auxiliary watch waits for the
// test to say what it answers. A read must end served with every change up
// to the probed revision R, or not served at all (a nil snapshot and the
// outcome); never served without a change ≤ R or at a revision below R.

// scriptedAPIServer is an apiserver whose answers the test gives one by one.
type scriptedAPIServer struct {
	srv  *httptest.Server
	quit chan struct{}
	// probes receives every probe (a LIST); watches every auxiliary watch.
	probes  chan *scriptedProbe
	watches chan *scriptedWatch
}

// scriptedProbe is a probe the apiserver received; it answers what the test
// sends on reply.
type scriptedProbe struct {
	path, query, accept string
	reply               chan probeAnswer
}

type probeAnswer struct {
	status int
	body   string
}

// scriptedWatch is a watch the apiserver received; it writes what the test
// sends on steps, one step at a time.
type scriptedWatch struct {
	path, query, accept string
	from                string // the watch's resourceVersion
	steps               chan watchStep
}

// watchStep is what a scripted watch does next.
type watchStep struct {
	// events are JSON watch events, written and flushed together.
	events []string
	// status, as a watch's first step, answers with that HTTP status and a
	// Status body instead of a stream.
	status int
	// end ends the stream (the client reads EOF).
	end bool
	// atDeadline ends the stream once the watch's timeoutSeconds passed
	// since it was opened, as the apiserver does.
	atDeadline bool
}

func newScriptedAPIServer(t *testing.T) *scriptedAPIServer {
	t.Helper()
	s := &scriptedAPIServer{
		quit:    make(chan struct{}),
		probes:  make(chan *scriptedProbe, 16),
		watches: make(chan *scriptedWatch, 16),
	}
	s.srv = httptest.NewServer(s)
	t.Cleanup(func() {
		close(s.quit)
		s.srv.Close()
	})
	return s
}

func (s *scriptedAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("watch") == "true" {
		s.serveWatch(w, r)
		return
	}
	p := &scriptedProbe{path: r.URL.Path, query: r.URL.RawQuery, accept: r.Header.Get("Accept"), reply: make(chan probeAnswer, 1)}
	select {
	case s.probes <- p:
	case <-r.Context().Done():
		return
	case <-s.quit:
		return
	}
	select {
	case a := <-p.reply:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
	case <-r.Context().Done():
	case <-s.quit:
	}
}

func (s *scriptedAPIServer) serveWatch(w http.ResponseWriter, r *http.Request) {
	opened := time.Now()
	q := r.URL.Query()
	sw := &scriptedWatch{
		path: r.URL.Path, query: r.URL.RawQuery, accept: r.Header.Get("Accept"),
		from:  q.Get("resourceVersion"),
		steps: make(chan watchStep, 16),
	}
	// The apiserver filters by name: a filtered watch shows only that
	// object's events and bookmarks.
	onlyName := strings.TrimPrefix(q.Get("fieldSelector"), "metadata.name=")
	select {
	case s.watches <- sw:
	case <-r.Context().Done():
		return
	case <-s.quit:
		return
	}
	started := false
	for {
		var step watchStep
		select {
		case step = <-sw.steps:
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		}
		if step.status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(step.status)
			writeJSON(w, expired().ErrStatus)
			return
		}
		if !started {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		for _, ev := range step.events {
			if onlyName != "" && !strings.Contains(ev, `"BOOKMARK"`) && !strings.Contains(ev, `"name":"`+onlyName+`"`) {
				continue
			}
			fmt.Fprintln(w, ev)
		}
		w.(http.Flusher).Flush()
		switch {
		case step.end:
			return
		case step.atDeadline:
			timeout, _ := strconv.Atoi(q.Get("timeoutSeconds"))
			select {
			case <-time.After(time.Until(opened.Add(time.Duration(timeout) * time.Second))):
			case <-r.Context().Done():
			case <-s.quit:
			}
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Write(b) //nolint:errcheck // the test reads what arrives
}

// expired is the apiserver's answer to a watch from a resourceVersion its
// history no longer holds.
func expired() *apierrors.StatusError {
	return apierrors.NewResourceExpired("too old resource version: 10 (20)")
}

// Watch events as the apiserver writes them for a metadata-only watch.
func watchEvent(typ, name string, rv uint64) string {
	return fmt.Sprintf(`{"type":%q,"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":%q,"namespace":"default","resourceVersion":"%d"}}}`, typ, name, rv)
}

func added(name string, rv uint64) string    { return watchEvent("ADDED", name, rv) }
func modified(name string, rv uint64) string { return watchEvent("MODIFIED", name, rv) }
func deleted(name string, rv uint64) string  { return watchEvent("DELETED", name, rv) }

func bookmark(rv uint64) string {
	return fmt.Sprintf(`{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"%d"}}}`, rv)
}

// expiredEvent is the ERROR event with a 410 Status that ends a watch.
func expiredEvent() string {
	b, err := json.Marshal(expired().ErrStatus)
	if err != nil {
		panic(err)
	}
	return `{"type":"ERROR","object":` + string(b) + `}`
}

// probeList is the probe's answer at rv: an empty PartialObjectMetadataList.
func probeList(rv uint64) probeAnswer {
	return probeAnswer{status: http.StatusOK, body: fmt.Sprintf(`{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"%d"},"items":[]}`, rv)}
}

// change is a change of the resource: an object (deleted or not) at rv.
type change struct {
	name    string
	rv      uint64
	deleted bool
}

func entry(c change) *snapshot.Entry {
	return &snapshot.Entry{Key: snapshot.ObjectKey("default", c.name), RV: c.rv, Raw: []byte(`{}`)}
}

func apply(s *snapshot.Store, cs ...change) {
	for _, c := range cs {
		s.Apply(snapshot.Change{Deleted: c.deleted, Entry: entry(c)}, c.rv)
	}
}

func relist(s *snapshot.Store, rv uint64, objects ...change) {
	var entries []*snapshot.Entry
	for _, c := range objects {
		entries = append(entries, entry(c))
	}
	s.Replace(entries, rv)
}

// proofHarness is one store's Prover proving through a scripted apiserver.
type proofHarness struct {
	api   *scriptedAPIServer
	store *snapshot.Store
	p     Prover
	// apiProof and ctx make further provers of the same resource (addStore).
	apiProof *APIServer
	ctx      context.Context
	cfg      harnessConfig

	mu     sync.Mutex
	behind []uint64 // revisions reported to ProverConfig.Behind
}

type harnessConfig struct {
	path              string // default /api/v1/pods
	namespaced        bool
	fastWait          time.Duration           // default 1ms
	auxTimeoutSeconds int                     // default 3
	timeout           time.Duration           // the proof's; default 20s
	clock             *clocktesting.FakeClock // the APIServer's; default the real clock
	storeClock        *clocktesting.FakeClock // the store's; default the real clock
	// stateProofMaxObjects: 0 turns state probes off, so that the
	// harness's store of one object is proven by its feed or auxiliary
	// watches.
	stateProofMaxObjects int
}

// listedAt is the store's list before each test: object a, at 10.
const listedAt = 10

func newProofHarness(t *testing.T, cfg harnessConfig) *proofHarness {
	t.Helper()
	if cfg.path == "" {
		cfg.path, cfg.namespaced = "/api/v1/pods", true
	}
	if cfg.fastWait == 0 {
		cfg.fastWait = time.Millisecond
	}
	if cfg.timeout == 0 {
		cfg.timeout = 20 * time.Second
	}
	storeCfg := snapshot.StoreConfig{}
	if cfg.storeClock != nil {
		storeCfg.Clock = cfg.storeClock
	}
	h := &proofHarness{api: newScriptedAPIServer(t), store: snapshot.NewStore(storeCfg)}
	relist(h.store, listedAt, change{name: "a", rv: 5})
	apiCfg := APIServerConfig{
		Client: h.api.srv.Client(), Host: h.api.srv.URL,
		FastWait: cfg.fastWait, AuxTimeoutSeconds: cfg.auxTimeoutSeconds,
		StateProofMaxObjects: -1,
	}
	if cfg.stateProofMaxObjects > 0 {
		apiCfg.StateProofMaxObjects = cfg.stateProofMaxObjects
	}
	if cfg.clock != nil {
		apiCfg.Clock = cfg.clock
	}
	api, err := NewAPIServer(apiCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends auxiliary watches before the server closes
	h.apiProof, h.ctx, h.cfg = api, ctx, cfg
	h.p = NewProver(ctx, ProverConfig{
		APIServer: api, Path: cfg.path, Namespaced: cfg.namespaced,
		Store: h.store, Resource: "pods", Timeout: cfg.timeout,
		Behind: func(rv uint64, _ time.Time) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.behind = append(h.behind, rv)
		},
	})
	return h
}

// proofOf returns what the stores of p's resource share: p proves through
// the apiserver.
func proofOf(p Prover) *resourceProof { return p.(*apiserverProver).shared }

// addStore returns a prover of another store of the same resource (another
// representation), listed as the harness's store is, proving through the
// same APIServer.
func (h *proofHarness) addStore() (*snapshot.Store, Prover) {
	store := snapshot.NewStore(snapshot.StoreConfig{})
	relist(store, listedAt, change{name: "a", rv: 5})
	return store, NewProver(h.ctx, ProverConfig{
		APIServer: h.apiProof, Path: h.cfg.path, Namespaced: h.cfg.namespaced,
		Store: store, Resource: "pods", Timeout: h.cfg.timeout,
	})
}

type readResult struct {
	snap    *snapshot.Snapshot
	rv      uint64
	outcome Outcome
}

// read starts a consistent read.
func (h *proofHarness) read() <-chan readResult { return readWith(h.p) }

// readWith starts a consistent read by p.
func readWith(p Prover) <-chan readResult {
	out := make(chan readResult, 1)
	go func() {
		snap, rv, outcome := p.Consistent(context.Background())
		out <- readResult{snap, rv, outcome}
	}()
	return out
}

// answerProbe answers the next probe with a.
func (h *proofHarness) answerProbe(t *testing.T, a probeAnswer) *scriptedProbe {
	t.Helper()
	p := recv(t, h.api.probes, "probe")
	p.reply <- a
	return p
}

// watchOpened returns the next auxiliary watch, which must start at from.
func (h *proofHarness) watchOpened(t *testing.T, from uint64) *scriptedWatch {
	t.Helper()
	w := recv(t, h.api.watches, "auxiliary watch")
	if w.from != strconv.FormatUint(from, 10) {
		t.Fatalf("auxiliary watch from resourceVersion=%s, want %d", w.from, from)
	}
	return w
}

// poll waits until cond holds; a hang fails the test.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitCovered waits until the running auxiliary watch has shown every event
// up to rv.
func (h *proofHarness) waitCovered(t *testing.T, rv uint64) {
	t.Helper()
	poll(t, fmt.Sprintf("the auxiliary watch to cover %d", rv), func() bool {
		proofOf(h.p).mu.Lock()
		aux := proofOf(h.p).aux
		proofOf(h.p).mu.Unlock()
		if aux == nil {
			return false
		}
		aux.mu.Lock()
		defer aux.mu.Unlock()
		return aux.covered >= rv
	})
}

// waitProofs waits until n proofs took path.
func (h *proofHarness) waitProofs(t *testing.T, path string, n float64) {
	t.Helper()
	poll(t, fmt.Sprintf("%v proofs by path %s", n, path), func() bool {
		return h.proofs(path) >= n
	})
}

func (h *proofHarness) proofs(path string) float64 {
	return testutil.ToFloat64(proofOf(h.p).api.metrics.proofs.WithLabelValues("pods", path))
}

func (h *proofHarness) behindCalls() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.behind
}

// noMoreWatches fails the test if an auxiliary watch was opened.
func (h *proofHarness) noMoreWatches(t *testing.T) {
	t.Helper()
	empty(t, h.api.watches, "auxiliary watch")
}

// checkServed checks that got is served at want with every change up to
// last.
func checkServed(t *testing.T, got readResult, want, last uint64) {
	t.Helper()
	if got.outcome != Served || got.snap == nil {
		t.Fatalf("read = %v, %q; want served", got.snap, got.outcome)
	}
	if got.rv != want {
		t.Errorf("served at %d, want %d", got.rv, want)
	}
	if got.snap.RV() < last {
		t.Errorf("served a snapshot at %d, without the change at %d", got.snap.RV(), last)
	}
}

func checkPassedThrough(t *testing.T, got readResult, want Outcome) {
	t.Helper()
	if got.snap != nil || got.outcome != want {
		t.Fatalf("read = snapshot at %d, %q; want no snapshot, %q", got.rv, got.outcome, want)
	}
}

// The fast path: a store whose own feed reaches R serves at once, without
// an auxiliary watch; one whose feed stays below R asks one.
func TestConsistentThroughAPIServerFastPath(t *testing.T) {
	t.Run("store_already_at_R", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		res := h.read()
		h.answerProbe(t, probeList(listedAt))
		checkServed(t, recv(t, res, "read"), listedAt, listedAt)
		h.noMoreWatches(t)
	})
	for _, tc := range []struct {
		name string
		feed func(s *snapshot.Store)
		// want is the revision served at; last the last change up to R.
		want, last uint64
	}{
		{name: "event_at_R", feed: func(s *snapshot.Store) { apply(s, change{name: "b", rv: 12}) }, want: 12, last: 12},
		{name: "event_beyond_R", feed: func(s *snapshot.Store) { apply(s, change{name: "b", rv: 14}) }, want: 14, last: listedAt},
		{name: "bookmark_at_R", feed: func(s *snapshot.Store) { s.MarkProgress(12) }, want: 12, last: listedAt},
	} {
		t.Run("feed_reaches_R/"+tc.name, func(t *testing.T) {
			h := newProofHarness(t, harnessConfig{fastWait: time.Minute})
			res := h.read()
			h.answerProbe(t, probeList(12))
			tc.feed(h.store)
			checkServed(t, recv(t, res, "read"), tc.want, tc.last)
			h.noMoreWatches(t)
			if got := h.proofs(pathFast); got != 1 {
				t.Errorf("fast proofs = %v, want 1", got)
			}
		})
	}
	t.Run("feed_below_R_asks_an_auxiliary_watch", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		res := h.read()
		h.answerProbe(t, probeList(12))
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{bookmark(12)}}
		checkServed(t, recv(t, res, "read"), 12, listedAt)
		if got := h.proofs(pathAux); got != 1 {
			t.Errorf("aux proofs = %v, want 1", got)
		}
	})
}

// auxStep is one step of an auxiliary watch in TestConsistentThroughAPIServerWaitsForLastAuxChange.
type auxStep struct {
	events []string
	// relist, if set, relists the store once the events were seen.
	relist *relistTo
}

type relistTo struct {
	rv      uint64
	objects []change
}

// An auxiliary watch that reaches R tells the last change L ≤ R; the read
// waits until the store holds L, and is served at max(progress, R). Until
// then it is not served: with a short proof timeout it passes through
// (snapshot_timeout, the store reported behind L); with a long one it is
// served once the store applied L.
func TestConsistentThroughAPIServerWaitsForLastAuxChange(t *testing.T) {
	tests := []struct {
		name string
		// held are the changes after the list the store applied before the
		// read; the auxiliary watch starts at the last.
		held []change
		r    uint64
		aux  []auxStep
		// wantLast is L; feed the changes the store applies, up to L, once
		// the proof ended.
		wantLast uint64
		feed     []change
	}{
		{
			name: "events_up_to_R_then_bookmark",
			r:    12,
			aux: []auxStep{
				{events: []string{added("b", 11)}},
				{events: []string{modified("b", 12), bookmark(13)}},
			},
			wantLast: 12,
			feed:     []change{{name: "b", rv: 11}, {name: "b", rv: 12}},
		},
		{
			// One change short of R is not the fast path.
			name: "store_one_below_R",
			held: []change{{name: "b", rv: 11}},
			r:    12,
			aux: []auxStep{
				{events: []string{added("c", 12), bookmark(13)}},
			},
			wantLast: 12,
			feed:     []change{{name: "c", rv: 12}},
		},
		{
			name: "bookmark_beyond_R_after_an_event_below_R",
			r:    15,
			aux: []auxStep{
				{events: []string{added("b", 11)}},
				{events: []string{bookmark(20)}},
			},
			wantLast: 11,
			feed:     []change{{name: "b", rv: 11}},
		},
		{
			name: "an_event_beyond_R_ends_the_proof_without_bookmark",
			r:    12,
			aux: []auxStep{
				{events: []string{added("b", 11)}},
				{events: []string{added("c", 14)}},
			},
			wantLast: 11,
			feed:     []change{{name: "b", rv: 11}},
		},
		{
			name:     "bookmark_at_R_without_events",
			r:        12,
			aux:      []auxStep{{events: []string{bookmark(12)}}},
			wantLast: listedAt,
		},
		{
			// A quiet resource whose only change is a deletion.
			name: "delete_only",
			r:    12,
			aux: []auxStep{
				{events: []string{deleted("a", 11)}},
				{events: []string{bookmark(12)}},
			},
			wantLast: 11,
			feed:     []change{{name: "a", rv: 11, deleted: true}},
		},
		{
			// Events at or below S replayed (or duplicated) on the
			// auxiliary watch are no changes after S.
			name: "replayed_events_at_or_below_S",
			r:    12,
			aux: []auxStep{
				{events: []string{added("b", 11)}},
				{events: []string{added("b", 11), modified("a", 5), modified("a", listedAt)}},
				{events: []string{bookmark(13)}},
			},
			wantLast: 11,
			feed:     []change{{name: "b", rv: 11}},
		},
		{
			name: "replayed_events_before_any_change",
			r:    12,
			aux: []auxStep{
				{events: []string{modified("a", 5), modified("a", listedAt)}},
				{events: []string{added("b", 12), bookmark(13)}},
			},
			wantLast: 12,
			feed:     []change{{name: "b", rv: 12}},
		},
		{
			// The counter-example to any shortcut that lets a bookmark ≥ R
			// stand for the store's own progress (an auxiliary watch
			// filtered to the probe's name, a bookmark taken from another
			// stream): the store has some changes of (S, R] but not the
			// last.
			name: "bookmark_beyond_R_store_below_last_change",
			held: []change{{name: "b", rv: 12}, {name: "c", rv: 15}},
			r:    20,
			aux: []auxStep{
				{events: []string{added("d", 18), added("e", 22), bookmark(25)}},
			},
			wantLast: 18,
			feed:     []change{{name: "d", rv: 18}},
		},
		{
			name: "relist_mid_proof_below_L",
			r:    15,
			aux: []auxStep{
				{events: []string{added("b", 12)}, relist: &relistTo{rv: 13, objects: []change{{name: "a", rv: 5}, {name: "b", rv: 12}, {name: "c", rv: 13}}}},
				{events: []string{added("d", 14), bookmark(16)}},
			},
			wantLast: 14,
			feed:     []change{{name: "d", rv: 14}},
		},
		{
			name: "relist_mid_proof_beyond_R",
			r:    15,
			aux: []auxStep{
				{events: []string{added("b", 12)}, relist: &relistTo{rv: 20, objects: []change{{name: "a", rv: 5}, {name: "b", rv: 12}, {name: "d", rv: 14}, {name: "e", rv: 20}}}},
				{events: []string{added("d", 14), bookmark(16)}},
			},
			wantLast: 14,
		},
		{
			// A relist from an instance behind the one the store watched
			// moves the store back below S.
			name: "relist_mid_proof_behind_S",
			r:    12,
			aux: []auxStep{
				{relist: &relistTo{rv: 8, objects: []change{{name: "a", rv: 5}}}},
				{events: []string{bookmark(12)}},
			},
			wantLast: listedAt,
			feed:     []change{{name: "b", rv: listedAt}},
		},
	}
	// run runs tc's read with a proof timeout and returns what it got.
	run := func(t *testing.T, h *proofHarness, r uint64, aux []auxStep) <-chan readResult {
		t.Helper()
		res := h.read()
		h.answerProbe(t, probeList(r))
		w := h.watchOpened(t, h.store.Progress())
		for _, step := range aux {
			w.steps <- watchStep{events: step.events}
			if len(step.events) > 0 {
				h.waitCovered(t, maxRV(step.events))
			}
			if step.relist != nil {
				relist(h.store, step.relist.rv, step.relist.objects...)
			}
		}
		return res
	}
	for _, tc := range tests {
		t.Run(tc.name+"/store_lacks_L", func(t *testing.T) {
			t.Parallel()
			h := newProofHarness(t, harnessConfig{timeout: time.Second})
			apply(h.store, tc.held...)
			res := run(t, h, tc.r, tc.aux)
			got := recv(t, res, "read")
			if progress := h.store.Progress(); progress >= tc.wantLast {
				checkServed(t, got, max(progress, tc.r), tc.wantLast)
				return
			}
			checkPassedThrough(t, got, SnapshotTimeout)
			if diff := cmp.Diff([]uint64{tc.wantLast}, h.behindCalls()); diff != "" {
				t.Errorf("store reported behind (-want +got):\n%s", diff)
			}
			h.noMoreWatches(t)
		})
		t.Run(tc.name+"/store_reaches_L", func(t *testing.T) {
			t.Parallel()
			h := newProofHarness(t, harnessConfig{})
			apply(h.store, tc.held...)
			res := run(t, h, tc.r, tc.aux)
			h.waitProofs(t, pathAux, 1)
			for _, c := range tc.feed {
				empty(t, res, "read served before the store held every change up to L")
				apply(h.store, c)
			}
			checkServed(t, recv(t, res, "read"), max(h.store.Progress(), tc.r), tc.wantLast)
			h.noMoreWatches(t)
		})
	}
}

// maxRV is the highest resourceVersion among JSON watch events.
func maxRV(events []string) uint64 {
	var m uint64
	for _, ev := range events {
		var e struct {
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal([]byte(ev), &e); err != nil {
			panic(err)
		}
		rv, _ := strconv.ParseUint(e.Object.Metadata.ResourceVersion, 10, 64)
		m = max(m, rv)
	}
	return m
}

// An auxiliary watch that ends short of R (a bookmark below R, a 410 as an
// ERROR event or as the HTTP status, an error, a stream closed early)
// proves nothing: the proof opens a second one, and if that also falls
// short the read passes through (progress_timeout). Never a third.
func TestConsistentThroughAPIServerAuxFallsShort(t *testing.T) {
	const r = 12
	bookmarkBelowR := watchStep{events: []string{bookmark(11)}}
	expiredEv := watchStep{events: []string{expiredEvent()}, end: true}
	gone := watchStep{status: http.StatusGone}
	serverError := watchStep{status: http.StatusInternalServerError}
	closedEarly := watchStep{end: true}
	bookmarkAtR := watchStep{events: []string{bookmark(r)}}
	tests := []struct {
		name          string
		first, second watchStep
		want          Outcome
		// wantAux counts the auxiliary watches by result.
		wantAux map[string]float64
	}{
		{name: "bookmark_below_R_twice", first: bookmarkBelowR, second: bookmarkBelowR, want: ProgressTimeout, wantAux: map[string]float64{auxBookmark: 2}},
		{name: "bookmark_below_R_then_at_R", first: bookmarkBelowR, second: bookmarkAtR, want: Served, wantAux: map[string]float64{auxBookmark: 2}},
		{name: "expired_event_twice", first: expiredEv, second: expiredEv, want: ProgressTimeout, wantAux: map[string]float64{auxExpired: 2}},
		{name: "expired_event_then_bookmark", first: expiredEv, second: bookmarkAtR, want: Served, wantAux: map[string]float64{auxExpired: 1, auxBookmark: 1}},
		{name: "http_410_twice", first: gone, second: gone, want: ProgressTimeout, wantAux: map[string]float64{auxExpired: 2}},
		{name: "http_410_then_bookmark", first: gone, second: bookmarkAtR, want: Served, wantAux: map[string]float64{auxExpired: 1, auxBookmark: 1}},
		{name: "http_500_then_bookmark", first: serverError, second: bookmarkAtR, want: Served, wantAux: map[string]float64{auxError: 1, auxBookmark: 1}},
		{name: "closed_early_twice", first: closedEarly, second: closedEarly, want: ProgressTimeout, wantAux: map[string]float64{auxNoBookmark: 2}},
		{name: "closed_early_then_bookmark", first: closedEarly, second: bookmarkAtR, want: Served, wantAux: map[string]float64{auxNoBookmark: 1, auxBookmark: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newProofHarness(t, harnessConfig{})
			res := h.read()
			h.answerProbe(t, probeList(r))
			h.watchOpened(t, listedAt).steps <- tc.first
			h.watchOpened(t, listedAt).steps <- tc.second
			got := recv(t, res, "read")
			if tc.want == Served {
				checkServed(t, got, r, listedAt)
			} else {
				checkPassedThrough(t, got, tc.want)
			}
			h.noMoreWatches(t)
			// The watches' goroutines count them as they end.
			wantEnded := 0.0
			for _, n := range tc.wantAux {
				wantEnded += n
			}
			poll(t, "auxiliary watches to end", func() bool {
				ended := 0.0
				for _, result := range []string{auxBookmark, auxNoBookmark, auxExpired, auxError} {
					ended += testutil.ToFloat64(proofOf(h.p).api.metrics.auxWatches.WithLabelValues("pods", result))
				}
				return ended == wantEnded
			})
			for result, want := range tc.wantAux {
				poll(t, fmt.Sprintf("%v auxiliary watches with result %s", want, result), func() bool {
					return testutil.ToFloat64(proofOf(h.p).api.metrics.auxWatches.WithLabelValues("pods", result)) == want
				})
			}
		})
	}
}

// An auxiliary watch that ends at its deadline without a bookmark proves
// nothing by itself (the instance that answered may be behind, or have
// dropped it). Only noBookmarksAfter of them in a row, while the store's
// own feed shows no bookmark either, make the resource taken to have none
// (no_bookmarks): later reads open no auxiliary watch, and only the store's
// own feed proves them. The conclusion expires after noBookmarksFor; one
// more watch without a bookmark renews it, and a bookmark ends it.
func TestConsistentThroughAPIServerNoBookmarks(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := newProofHarness(t, harnessConfig{auxTimeoutSeconds: 1, timeout: 10 * time.Second, clock: clk})
	gauge := func() float64 {
		return testutil.ToFloat64(proofOf(h.p).api.metrics.noBookmarks.WithLabelValues("pods"))
	}
	noBookmarkWatch := func(what string) {
		t.Helper()
		w := h.watchOpened(t, listedAt)
		if !strings.Contains(w.query, "timeoutSeconds=1") {
			t.Errorf("auxiliary watch query %q, want timeoutSeconds=1", w.query)
		}
		w.steps <- watchStep{events: []string{added("b", 11)}, atDeadline: true}
	}

	// Read 1: two auxiliary watches without a bookmark; inconclusive.
	res := h.read()
	h.answerProbe(t, probeList(12))
	noBookmarkWatch("read 1, watch 1")
	noBookmarkWatch("read 1, watch 2")
	checkPassedThrough(t, recv(t, res, "read 1"), ProgressTimeout)
	if got := gauge(); got != 0 {
		t.Fatalf("after 2 watches without a bookmark, no_bookmarks gauge = %v, want 0", got)
	}

	// Read 2: the third in a row makes the resource taken to have none.
	res = h.read()
	h.answerProbe(t, probeList(12))
	noBookmarkWatch("read 2")
	checkPassedThrough(t, recv(t, res, "read 2"), NoBookmarks)
	if got := gauge(); got != 1 {
		t.Errorf("no_bookmarks gauge = %v, want 1", got)
	}

	// Read 3: no auxiliary watch; the feed alone proves what it can.
	res = h.read()
	h.answerProbe(t, probeList(13))
	checkPassedThrough(t, recv(t, res, "read 3"), NoBookmarks)
	h.noMoreWatches(t)
	res = h.read()
	apply(h.store, change{name: "b", rv: 11}, change{name: "c", rv: 14})
	h.answerProbe(t, probeList(14))
	checkServed(t, recv(t, res, "read 4"), 14, 14)
	h.noMoreWatches(t)

	// The conclusion expires; one more watch without a bookmark renews it.
	clk.Step(noBookmarksFor)
	res = h.read()
	h.answerProbe(t, probeList(15))
	w := h.watchOpened(t, 14)
	w.steps <- watchStep{atDeadline: true}
	checkPassedThrough(t, recv(t, res, "read 5"), NoBookmarks)
	res = h.read()
	h.answerProbe(t, probeList(15))
	checkPassedThrough(t, recv(t, res, "read 6"), NoBookmarks)
	h.noMoreWatches(t)

	// Expired again, and this time a bookmark: the conclusion is gone.
	clk.Step(noBookmarksFor)
	res = h.read()
	h.answerProbe(t, probeList(16))
	w = h.watchOpened(t, 14)
	w.steps <- watchStep{events: []string{bookmark(16)}}
	checkServed(t, recv(t, res, "read 7"), 16, 14)
	poll(t, "the bookmark to end the conclusion", func() bool { return gauge() == 0 })

	if got := h.proofs(pathNoBookmarks); got != 4 {
		t.Errorf("no_bookmarks proofs = %v, want 4", got)
	}
	auxWatches := func(result string) float64 {
		return testutil.ToFloat64(proofOf(h.p).api.metrics.auxWatches.WithLabelValues("pods", result))
	}
	if got := auxWatches(auxNoBookmark); got != 4 {
		t.Errorf("auxiliary watches without bookmark = %v, want 4", got)
	}
}

// While the store's own feed sees bookmarks, the resource has a watch
// cache: auxiliary watches that end without one (their instance behind, or
// the bookmark dropped) are counted apart and never make the resource taken
// to have none.
func TestConsistentThroughAPIServerFeedBookmarksAreEvidence(t *testing.T) {
	h := newProofHarness(t, harnessConfig{auxTimeoutSeconds: 1, timeout: 10 * time.Second})
	h.store.MarkProgress(listedAt) // the feed's bookmark

	for read := 1; read <= 2; read++ {
		res := h.read()
		h.answerProbe(t, probeList(12))
		for range 2 {
			w := h.watchOpened(t, listedAt)
			w.steps <- watchStep{atDeadline: true}
		}
		checkPassedThrough(t, recv(t, res, fmt.Sprintf("read %d", read)), ProgressTimeout)
	}
	// Four watches without a bookmark, and still auxiliary watches.
	res := h.read()
	h.answerProbe(t, probeList(12))
	w := h.watchOpened(t, listedAt)
	w.steps <- watchStep{events: []string{added("b", 11), bookmark(12)}}
	apply(h.store, change{name: "b", rv: 11})
	checkServed(t, recv(t, res, "read 3"), 12, 11)

	metrics := proofOf(h.p).api.metrics
	if got := testutil.ToFloat64(metrics.auxWatches.WithLabelValues("pods", auxMissedBookmark)); got != 4 {
		t.Errorf("auxiliary watches that missed their bookmark = %v, want 4", got)
	}
	if got := testutil.ToFloat64(metrics.auxWatches.WithLabelValues("pods", auxNoBookmark)); got != 0 {
		t.Errorf("auxiliary watches without bookmark = %v, want 0", got)
	}
	if got := h.proofs(pathNoBookmarks); got != 0 {
		t.Errorf("no_bookmarks proofs = %v, want 0", got)
	}
}

// A read proven at R leaves the store at R: the client's next request at R
// (a watch from the list's resourceVersion, a read not older than it) finds
// the store there, with no proof of its own.
func TestConsistentThroughAPIServerKeepsProvenRevision(t *testing.T) {
	h := newProofHarness(t, harnessConfig{})
	res := h.read()
	h.answerProbe(t, probeList(20))
	w := h.watchOpened(t, listedAt)
	w.steps <- watchStep{events: []string{added("b", 11), bookmark(20)}}
	apply(h.store, change{name: "b", rv: 11})
	checkServed(t, recv(t, res, "read"), 20, 11)
	if got := h.store.Progress(); got != 20 {
		t.Errorf("store progress after a read proven at 20 = %d, want 20", got)
	}
	snap, rv, err := h.p.NotOlderThan(context.Background(), 20, time.Millisecond)
	if err != nil || snap == nil || rv != 20 {
		t.Errorf("NotOlderThan(20) = %v, %d, %v; want the snapshot at 20 at once", snap, rv, err)
	}
}

// The stores of one resource (its representations) share its probe and
// its auxiliary watch; each waits for the last change on its own feed.
func TestConsistentThroughAPIServerSharedByResource(t *testing.T) {
	h := newProofHarness(t, harnessConfig{fastWait: 5 * time.Millisecond})
	store2, p2 := h.addStore()
	if proofOf(h.p) != proofOf(p2) {
		t.Fatal("two stores of one resource do not share its proof")
	}

	res1 := h.read()
	probe := recv(t, h.api.probes, "probe")
	res2 := readWith(p2)
	poll(t, "read 2 to wait for the next probe", func() bool {
		probes := &proofOf(h.p).probes
		probes.mu.Lock()
		defer probes.mu.Unlock()
		return probes.next != nil && probes.next.waiters == 1
	})
	probe.reply <- probeList(12)
	w := h.watchOpened(t, listedAt)
	h.answerProbe(t, probeList(12))
	w.steps <- watchStep{events: []string{added("b", 11), bookmark(12)}}
	h.waitProofs(t, pathAux, 2)
	h.noMoreWatches(t)

	apply(h.store, change{name: "b", rv: 11})
	checkServed(t, recv(t, res1, "read 1"), 12, 11)
	empty(t, res2, "read 2 served before its store held the change at 11")
	apply(store2, change{name: "b", rv: 11})
	checkServed(t, recv(t, res2, "read 2"), 12, 11)
}

// A probe in flight when a read arrives may have been answered before the
// read arrived: the read waits for the next probe.
func TestConsistentThroughAPIServerProbeInFlight(t *testing.T) {
	h := newProofHarness(t, harnessConfig{fastWait: time.Minute})

	res1 := h.read()
	probe1 := recv(t, h.api.probes, "probe 1")
	res2 := h.read()
	poll(t, "read 2 to wait for the next probe", func() bool {
		probes := &proofOf(h.p).probes
		probes.mu.Lock()
		defer probes.mu.Unlock()
		return probes.next != nil && probes.next.waiters == 1
	})

	probe1.reply <- probeList(listedAt)
	checkServed(t, recv(t, res1, "read 1"), listedAt, listedAt)
	probe2 := recv(t, h.api.probes, "probe 2")
	empty(t, res2, "read 2 served before its probe answered")

	probe2.reply <- probeList(20)
	apply(h.store, change{name: "b", rv: 20})
	checkServed(t, recv(t, res2, "read 2"), 20, 20)
	empty(t, h.api.probes, "third probe")
	h.noMoreWatches(t)
}

// The probe is a metadata-only consistent LIST of one reserved name, in
// namespace default for namespaced resources; the auxiliary watch is
// cluster-wide, unfiltered, metadata-only, from the store's position, with
// bookmarks.
func TestConsistentThroughAPIServerRequests(t *testing.T) {
	type request struct {
		Path, Query, Accept string
	}
	const (
		probeQuery  = "fieldSelector=metadata.name%3Dlistproxy-freshness-probe"
		watchQuery  = "allowWatchBookmarks=true&resourceVersion=10&timeoutSeconds=3&watch=true"
		probeAccept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
		watchAccept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	)
	tests := []struct {
		name       string
		path       string
		namespaced bool
		wantProbe  string
	}{
		{name: "core_namespaced", path: "/api/v1/pods", namespaced: true, wantProbe: "/api/v1/namespaces/default/pods"},
		{name: "group_namespaced", path: "/apis/apps/v1/deployments", namespaced: true, wantProbe: "/apis/apps/v1/namespaces/default/deployments"},
		{name: "core_cluster_scoped", path: "/api/v1/nodes", wantProbe: "/api/v1/nodes"},
		{name: "group_cluster_scoped", path: "/apis/example.com/v1/widgets", wantProbe: "/apis/example.com/v1/widgets"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newProofHarness(t, harnessConfig{path: tc.path, namespaced: tc.namespaced})
			res := h.read()
			p := h.answerProbe(t, probeList(12))
			w := h.watchOpened(t, listedAt)
			w.steps <- watchStep{events: []string{bookmark(12)}}
			checkServed(t, recv(t, res, "read"), 12, listedAt)

			got := []request{{p.path, p.query, p.accept}, {w.path, w.query, w.accept}}
			want := []request{{tc.wantProbe, probeQuery, probeAccept}, {tc.path, watchQuery, watchAccept}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("probe and auxiliary watch requests (-want +got):\n%s", diff)
			}
		})
	}
}

// A probe that does not return a resourceVersion fails the read as
// probe_failed; nothing else is asked.
func TestConsistentThroughAPIServerProbeErrors(t *testing.T) {
	list := func(rv string) probeAnswer {
		return probeAnswer{status: http.StatusOK, body: `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"` + rv + `"},"items":[]}`}
	}
	status := func(err *apierrors.StatusError) probeAnswer {
		b, jerr := json.Marshal(err.ErrStatus)
		if jerr != nil {
			t.Fatal(jerr)
		}
		return probeAnswer{status: int(err.ErrStatus.Code), body: string(b)}
	}
	tests := []struct {
		name   string
		answer probeAnswer
	}{
		{name: "http_500", answer: status(apierrors.NewInternalError(fmt.Errorf("etcdserver: request timed out")))},
		{name: "http_429", answer: status(apierrors.NewTooManyRequests("too many requests", 1))},
		{name: "http_504", answer: status(apierrors.NewTimeoutError("request did not complete", 0))},
		{name: "malformed_body", answer: probeAnswer{status: http.StatusOK, body: `{"kind":"PartialObjectMetadataList","metadata":`}},
		{name: "resource_version_missing", answer: probeAnswer{status: http.StatusOK, body: `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[]}`}},
		{name: "resource_version_not_a_number", answer: list("abc")},
		{name: "resource_version_zero", answer: list("0")},
		{name: "resource_version_negative", answer: list("-3")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newProofHarness(t, harnessConfig{})
			res := h.read()
			h.answerProbe(t, tc.answer)
			checkPassedThrough(t, recv(t, res, "read"), ProbeFailed)
			h.noMoreWatches(t)
		})
	}
}

// Reads of one store share its running auxiliary watch, each with its own
// R and so its own last change L.
func TestConsistentThroughAPIServerSharesAuxWatch(t *testing.T) {
	h := newProofHarness(t, harnessConfig{})
	res1 := h.read()
	h.answerProbe(t, probeList(12))
	w := h.watchOpened(t, listedAt)
	// An event beyond R proves both reads without ending the watch.
	w.steps <- watchStep{events: []string{added("b", 11), added("c", 13)}}
	h.waitProofs(t, pathAux, 1)

	res2 := h.read()
	h.answerProbe(t, probeList(13))
	h.waitProofs(t, pathAux, 2)
	h.noMoreWatches(t)

	apply(h.store, change{name: "b", rv: 11})
	checkServed(t, recv(t, res1, "read 1"), 12, 11)
	empty(t, res2, "read 2 served before the store held the change at 13")
	apply(h.store, change{name: "c", rv: 13})
	checkServed(t, recv(t, res2, "read 2"), 13, 13)
	w.steps <- watchStep{events: []string{bookmark(14)}}
}

// An auxiliary watch records each event once, in order: an event or a
// bookmark at or below what it already covered (a replay, a stale bookmark)
// changes nothing, so the last change up to R is the newest one.
func TestAuxWatchIgnoresReplays(t *testing.T) {
	w := newAuxWatch(4)
	w.observe(5, true)
	w.observe(8, true)
	w.observe(5, true)  // a replayed event
	w.observe(6, false) // a stale bookmark
	w.observe(10, false)
	last, covered, ok := w.lastChange(context.Background(), 9)
	if !ok || last != 8 || covered != 10 {
		t.Errorf("lastChange(9) = %d, %d, %v; want 8, 10, true", last, covered, ok)
	}
	if !w.covers(10) || w.covers(11) {
		t.Errorf("covers(10), covers(11) = %v, %v; want true, false", w.covers(10), w.covers(11))
	}
}

// Without etcd, a request at an N newer than the store has seen — a watch
// from another replica's list, a NotOlderThan read, a continue token — is
// proven as a consistent read is, from the store's feed or an auxiliary
// watch that covers N (no probe: N is the client's), and the store keeps N.
func TestThroughAPIServerRequestsAhead(t *testing.T) {
	t.Run("holds", func(t *testing.T) {
		// A watch from 20 needs every change after 20, which the store's
		// live watch will deliver once the resource has reached 20: one
		// probe shows it, without waiting for the store or a watch of its
		// own, and a revision a probe already showed needs none.
		h := newProofHarness(t, harnessConfig{}) // the feed is live: a relist now
		got := make(chan bool, 1)
		go func() { got <- h.p.Holds(context.Background(), 20) }()
		h.answerProbe(t, probeList(20))
		if !recv(t, got, "Holds(20)") {
			t.Fatal("Holds(20) = false with the resource at 20")
		}
		if !h.p.Holds(context.Background(), 20) || !h.p.Holds(context.Background(), 19) {
			t.Fatal("Holds(20), Holds(19) = false after a probe showed the resource at 20")
		}
		go func() { got <- h.p.Holds(context.Background(), 23) }()
		h.answerProbe(t, probeList(25))
		if !recv(t, got, "Holds(23)") {
			t.Fatal("Holds(23) = false with the resource at 25")
		}
		if p := h.store.Progress(); p != listedAt {
			t.Errorf("store progress = %d, want %d: nothing proved the store holds more", p, listedAt)
		}
		empty(t, h.api.probes, "probe")
		h.noMoreWatches(t)
	})
	t.Run("not_older_than", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		type answer struct {
			snap *snapshot.Snapshot
			rv   uint64
		}
		got := make(chan answer, 1)
		go func() {
			snap, rv, _ := h.p.NotOlderThan(context.Background(), 20, 10*time.Second)
			got <- answer{snap, rv}
		}()
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{bookmark(20)}}
		a := recv(t, got, "NotOlderThan(20)")
		if a.snap == nil || a.rv != 20 || a.snap.RV() != listedAt {
			t.Errorf("NotOlderThan(20) = snapshot %v at %d; want the snapshot at %d served at 20", a.snap, a.rv, listedAt)
		}
	})
	t.Run("at", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		apply(h.store, change{name: "b", rv: 12})
		got := make(chan *snapshot.Snapshot, 1)
		go func() {
			snap, _ := h.p.At(context.Background(), 14)
			got <- snap
		}()
		// The store is at 12; a change at 13 it has not applied yet.
		w := h.watchOpened(t, 12)
		w.steps <- watchStep{events: []string{added("c", 13), bookmark(15)}}
		empty(t, got, "At(14) before the store held the change at 13")
		apply(h.store, change{name: "c", rv: 13})
		snap := recv(t, got, "At(14)")
		if snap == nil || snap.RV() != 13 {
			t.Fatalf("At(14) = %v; want the snapshot at 13", snap)
		}
	})
	t.Run("silent_feed", func(t *testing.T) {
		// A feed without a bookmark, change or relist lately may be
		// stuck: the store must reach the last change before 20, as for
		// a read at 20, whatever the probe would show.
		clk := clocktesting.NewFakeClock(time.Now())
		h := newProofHarness(t, harnessConfig{storeClock: clk})
		clk.Step(liveFeed + time.Second)
		got := make(chan bool, 1)
		go func() { got <- h.p.Holds(context.Background(), 20) }()
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{added("b", 12), bookmark(21)}}
		empty(t, got, "Holds(20) before the store held the change at 12")
		apply(h.store, change{name: "b", rv: 12})
		if !recv(t, got, "Holds(20)") {
			t.Fatal("Holds(20) = false after the store held the last change before it")
		}
		empty(t, h.api.probes, "probe")
	})
	t.Run("beyond_the_apiserver", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{timeout: 5 * time.Second})
		got := make(chan bool, 1)
		// A probe that fails leaves it to the proof of a read at 20.
		go func() { got <- h.p.Holds(context.Background(), 20) }()
		h.answerProbe(t, probeAnswer{status: http.StatusServiceUnavailable, body: "{}"})
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{bookmark(21)}}
		if !recv(t, got, "Holds(20)") {
			t.Error("Holds(20) = false after the auxiliary watch showed no change up to 20")
		}

		go func() { got <- h.p.Holds(context.Background(), 31) }()
		h.answerProbe(t, probeList(30))
		if recv(t, got, "Holds(31)") {
			t.Error("Holds(31) = true for a revision beyond the resource's")
		}
		h.noMoreWatches(t)
	})
}

// readSmall starts a consistent read of a small answer
// (ConsistentIfCheap(ctx, true)) by p.
func readSmall(p Prover) <-chan readResult {
	out := make(chan readResult, 1)
	go func() {
		snap, rv, outcome := p.ConsistentIfCheap(context.Background(), true)
		out <- readResult{snap, rv, outcome}
	}()
	return out
}

// A small read takes the fast path only: proven by the store's own feed it
// is served; otherwise it passes through at once (DirectCheaper) and opens
// no auxiliary watch. A small read of a quiet store (no change lately)
// passes through without a probe. A read that is not small still waits
// for an auxiliary watch.
func TestConsistentThroughAPIServerSmallRead(t *testing.T) {
	const changed = listedAt + 1
	busy := func(h *proofHarness) { apply(h.store, change{name: "z", rv: changed}) }
	noAux := func(t *testing.T, h *proofHarness) {
		t.Helper()
		proofOf(h.p).mu.Lock()
		aux := proofOf(h.p).aux
		proofOf(h.p).mu.Unlock()
		if aux != nil {
			t.Errorf("an auxiliary watch from %d was started", aux.from)
		}
		h.noMoreWatches(t)
	}
	t.Run("quiet_store_passes_through_without_probing", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		checkPassedThrough(t, recv(t, readSmall(h.p), "read"), DirectCheaper)
		empty(t, h.api.probes, "probe")
		noAux(t, h)
		if got := h.proofs(pathDirectCheaper); got != 1 {
			t.Errorf("direct_cheaper proofs = %v, want 1", got)
		}
	})
	t.Run("fast_path_fails_passes_through", func(t *testing.T) {
		// A change within four fast-path waits (200 ms) makes it busy.
		h := newProofHarness(t, harnessConfig{fastWait: 50 * time.Millisecond})
		busy(h)
		res := readSmall(h.p)
		h.answerProbe(t, probeList(12))
		checkPassedThrough(t, recv(t, res, "read"), DirectCheaper)
		noAux(t, h)
		if got := h.proofs(pathDirectCheaper); got != 1 {
			t.Errorf("direct_cheaper proofs = %v, want 1", got)
		}
		if got := h.proofs(pathAux); got != 0 {
			t.Errorf("aux proofs = %v, want 0", got)
		}
	})
	t.Run("fast_path_proves_it_served", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{fastWait: time.Minute})
		busy(h)
		res := readSmall(h.p)
		h.answerProbe(t, probeList(12))
		apply(h.store, change{name: "b", rv: 12})
		checkServed(t, recv(t, res, "read"), 12, 12)
		noAux(t, h)
		if got := h.proofs(pathFast); got != 1 {
			t.Errorf("fast proofs = %v, want 1", got)
		}
		if got := h.proofs(pathDirectCheaper); got != 0 {
			t.Errorf("direct_cheaper proofs = %v, want 0", got)
		}
	})
	t.Run("store_already_at_R_served", func(t *testing.T) {
		// A change within four fast-path waits (200 ms) makes it busy.
		h := newProofHarness(t, harnessConfig{fastWait: 50 * time.Millisecond})
		busy(h)
		res := readSmall(h.p)
		h.answerProbe(t, probeList(changed))
		checkServed(t, recv(t, res, "read"), changed, changed)
		noAux(t, h)
	})
	t.Run("not_small_waits_for_the_auxiliary_watch", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		res := make(chan readResult, 1)
		go func() {
			snap, rv, outcome := h.p.ConsistentIfCheap(context.Background(), false)
			res <- readResult{snap, rv, outcome}
		}()
		h.answerProbe(t, probeList(12))
		w := h.watchOpened(t, listedAt)
		select {
		case got := <-res:
			t.Fatalf("read ended before the auxiliary watch's bookmark: %q", got.outcome)
		case <-time.After(50 * time.Millisecond):
		}
		w.steps <- watchStep{events: []string{bookmark(12)}}
		checkServed(t, recv(t, res, "read"), 12, listedAt)
		if got := h.proofs(pathDirectCheaper); got != 0 {
			t.Errorf("direct_cheaper proofs = %v, want 0", got)
		}
	})
}

// With etcd, an empty resource, whose etcd prefix cannot be verified (no
// key shows where the apiserver keeps it), has its consistent reads
// proven through the apiserver (by its emptiness probe) instead of
// passing through; a prefix that
// disagrees with the store, and any without a proof through the
// apiserver, pass through as before.
func TestConsistentWithEtcdUnverifiedPrefixProvenThroughAPIServer(t *testing.T) {
	client := startEtcd(t)
	checker := newEtcdChecker(t, client)
	for range listedAt { // etcd's revision passes the stores'
		put(t, client, "/registry/other/x")
	}
	h := newProofHarness(t, harnessConfig{stateProofMaxObjects: 200})
	emptyStore := func() *snapshot.Store {
		s := snapshot.NewStore(snapshot.StoreConfig{})
		relist(s, listedAt)
		return s
	}
	t.Run("empty_resource_proven_through_the_apiserver", func(t *testing.T) {
		p := NewProver(h.ctx, ProverConfig{
			Checker: checker, APIServer: h.apiProof, Path: "/api/v1/configmaps", Namespaced: true,
			Store: emptyStore(), Resource: "configmaps", Prefix: "/registry/configmaps/", Timeout: 20 * time.Second,
		})
		res := readWith(p)
		probe := h.answerProbe(t, probeList(12))
		if probe.path != "/api/v1/configmaps" || probe.query != "limit=201" {
			t.Errorf("probe %s?%s, want the state probe /api/v1/configmaps?limit=201", probe.path, probe.query)
		}
		checkServed(t, recv(t, res, "read"), 12, listedAt)
		h.noMoreWatches(t)
		// A watch from the read's resourceVersion is proven the same way:
		// the probe showed the resource at 12.
		if !p.Holds(context.Background(), 12) {
			t.Error("Holds(12) = false after a probe showed the empty resource at 12")
		}
		empty(t, h.api.probes, "probe")
	})
	t.Run("wrong_prefix_passes_through", func(t *testing.T) {
		// A store holding an object etcd does not hold under the prefix:
		// a configuration to fix, whose reads keep passing through.
		s := snapshot.NewStore(snapshot.StoreConfig{})
		relist(s, listedAt, change{name: "a", rv: 5})
		p := NewProver(h.ctx, ProverConfig{
			Checker: checker, APIServer: h.apiProof, Path: "/api/v1/services", Namespaced: true,
			Store: s, Resource: "services", Prefix: "/registry/not-services/", Timeout: 20 * time.Second,
		})
		checkPassedThrough(t, recv(t, readWith(p), "read"), PrefixUnverified)
	})
	t.Run("without_a_proof_through_the_apiserver_passes_through", func(t *testing.T) {
		p := NewProver(h.ctx, ProverConfig{
			Checker: checker, Path: "/api/v1/secrets", Namespaced: true,
			Store: emptyStore(), Resource: "secrets", Prefix: "/registry/secrets/", Timeout: 20 * time.Second,
		})
		checkPassedThrough(t, recv(t, readWith(p), "read"), PrefixUnverified)
	})
}

// Unchanged(from, to) holds exactly when an auxiliary watch from from shows
// no event at or before to: its first event beyond to, or a bookmark at
// or beyond to, first; a watch that fails or ends short proves nothing.
func TestUnchangedThroughAPIServer(t *testing.T) {
	const from, to = 5, 10
	tests := []struct {
		name string
		step watchStep
		want bool
	}{
		{name: "bookmark_beyond_to", step: watchStep{events: []string{bookmark(12)}}, want: true},
		{name: "bookmark_at_to", step: watchStep{events: []string{bookmark(to)}}, want: true},
		{name: "first_event_beyond_to", step: watchStep{events: []string{modified("a", 11)}}, want: true},
		{name: "event_at_to", step: watchStep{events: []string{modified("a", to), bookmark(12)}}, want: false},
		{name: "event_between", step: watchStep{events: []string{added("b", 7), bookmark(12)}}, want: false},
		{name: "ends_short", step: watchStep{events: []string{bookmark(8)}, end: true}, want: false},
		{name: "gone", step: watchStep{status: http.StatusGone}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newProofHarness(t, harnessConfig{})
			res := make(chan bool, 1)
			go func() { res <- h.p.Unchanged(context.Background(), from, to) }()
			w := h.watchOpened(t, from)
			w.steps <- tc.step
			if got := recv(t, res, "Unchanged"); got != tc.want {
				t.Errorf("Unchanged(%d, %d) = %v, want %v", from, to, got, tc.want)
			}
		})
	}
	t.Run("no_older_from_is_unchanged_trivially", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{})
		if !h.p.Unchanged(context.Background(), to, to) || h.p.Unchanged(context.Background(), to+1, to) {
			t.Error("Unchanged(to, to) must hold and Unchanged(to+1, to) must not")
		}
		h.noMoreWatches(t)
	})
}

// listOf is a consistent LIST's answer at rv holding the objects given as
// "name@resourceVersion", in namespace default.
func listOf(rv uint64, objects ...string) probeAnswer {
	var items []string
	for _, o := range objects {
		name, orv, _ := strings.Cut(o, "@")
		items = append(items, fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","resourceVersion":%q}}`, name, orv))
	}
	return probeAnswer{status: http.StatusOK, body: fmt.Sprintf(`{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"%d"},"items":[%s]}`, rv, strings.Join(items, ","))}
}

// A small store's (at most StateProofMaxObjects objects) probe is the
// state probe, a consistent LIST of the whole collection's metadata: the
// same objects at the same resourceVersions at R serve the store's
// snapshot at R at once, small read or not, whatever changes up to R its
// feed has yet to deliver (its progress stays). A state that differs, a
// resource larger than the limit, or a store that changed meanwhile leaves
// the read to the fast path and the auxiliary watch from R (or, for a
// small read, to the apiserver); a larger store probes by name.
func TestConsistentThroughAPIServerStateProbe(t *testing.T) {
	const stateQuery = "limit=3"
	harness := func(t *testing.T, objects ...change) *proofHarness {
		h := newProofHarness(t, harnessConfig{stateProofMaxObjects: 2})
		relist(h.store, listedAt, objects...)
		return h
	}
	answerState := func(t *testing.T, h *proofHarness, a probeAnswer) {
		t.Helper()
		probe := h.answerProbe(t, a)
		if probe.path != "/api/v1/pods" || probe.query != stateQuery {
			t.Errorf("probe %s?%s, want the state probe /api/v1/pods?%s", probe.path, probe.query, stateQuery)
		}
	}
	served := func(t *testing.T, h *proofHarness, got readResult, at uint64, objects int) {
		t.Helper()
		checkServed(t, got, at, listedAt)
		if got.snap.Len() != objects {
			t.Errorf("served %d objects, want %d", got.snap.Len(), objects)
		}
		h.noMoreWatches(t)
		if got := h.proofs(pathState); got != 1 {
			t.Errorf("state proofs = %v, want 1", got)
		}
		if p := h.store.Progress(); p != listedAt {
			t.Errorf("store progress %d after a state proof, want %d: it does not hold the changes up to R", p, listedAt)
		}
	}
	for _, small := range []bool{false, true} {
		read := readWith
		if small {
			read = readSmall
		}
		t.Run(fmt.Sprintf("small_read=%v", small), func(t *testing.T) {
			t.Run("empty_store_and_resource_served_at_R", func(t *testing.T) {
				h := harness(t)
				res := read(h.p)
				answerState(t, h, listOf(12))
				served(t, h, recv(t, res, "read"), 12, 0)
			})
			t.Run("quiet_store_served_at_R", func(t *testing.T) {
				h := harness(t, change{name: "a", rv: 5})
				res := read(h.p)
				answerState(t, h, listOf(13, "a@5"))
				served(t, h, recv(t, res, "read"), 13, 1)
			})
			t.Run("state_differs", func(t *testing.T) {
				h := harness(t, change{name: "a", rv: 5})
				res := read(h.p)
				answerState(t, h, listOf(12, "a@11"))
				if small {
					checkPassedThrough(t, recv(t, res, "read"), DirectCheaper)
					return
				}
				w := h.watchOpened(t, listedAt)
				w.steps <- watchStep{events: []string{modified("a", 11), bookmark(12)}}
				apply(h.store, change{name: "a", rv: 11})
				checkServed(t, recv(t, res, "read"), 12, 11)
			})
		})
	}
	t.Run("empty_store_resource_not_empty", func(t *testing.T) {
		h := harness(t)
		res := readWith(h.p)
		answerState(t, h, listOf(12, "b@11"))
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{added("b", 11), bookmark(12)}}
		select {
		case got := <-res:
			t.Fatalf("read ended before the store held b: %q at %d", got.outcome, got.rv)
		case <-time.After(50 * time.Millisecond):
		}
		apply(h.store, change{name: "b", rv: 11})
		got := recv(t, res, "read")
		checkServed(t, got, 12, 11)
		if got.snap.Len() != 1 {
			t.Errorf("served %d objects, want b", got.snap.Len())
		}
	})
	t.Run("store_ahead_of_the_state_served_by_its_feed", func(t *testing.T) {
		h := harness(t, change{name: "a", rv: 5})
		res := readWith(h.p)
		probe := recv(t, h.api.probes, "state probe")
		apply(h.store, change{name: "b", rv: 13})
		probe.reply <- listOf(12, "a@5")
		got := recv(t, res, "read")
		checkServed(t, got, 13, 13)
		h.noMoreWatches(t)
		if got := h.proofs(pathFast); got != 1 {
			t.Errorf("fast proofs = %v, want 1", got)
		}
	})
	t.Run("store_changes_during_the_state_probe", func(t *testing.T) {
		h := harness(t)
		res := readWith(h.p)
		probe := recv(t, h.api.probes, "state probe")
		apply(h.store, change{name: "b", rv: 11})
		probe.reply <- listOf(12)
		w := h.watchOpened(t, 11)
		w.steps <- watchStep{events: []string{bookmark(12)}}
		got := recv(t, res, "read")
		checkServed(t, got, 12, 11)
		if got.snap.Len() != 1 {
			t.Errorf("served %d objects, want b", got.snap.Len())
		}
		if got := h.proofs(pathState); got != 0 {
			t.Errorf("state proofs = %v, want 0", got)
		}
	})
	t.Run("resource_larger_than_the_limit", func(t *testing.T) {
		h := harness(t, change{name: "a", rv: 5}, change{name: "b", rv: 6})
		res := readWith(h.p)
		more := listOf(12, "a@5", "b@6")
		more.body = strings.Replace(more.body, `"metadata":{"resourceVersion":"12"}`, `"metadata":{"resourceVersion":"12","continue":"x"}`, 1)
		answerState(t, h, more)
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{bookmark(12)}}
		checkServed(t, recv(t, res, "read"), 12, listedAt)
	})
	t.Run("store_larger_than_the_limit_sends_none", func(t *testing.T) {
		h := harness(t, change{name: "a", rv: 5}, change{name: "b", rv: 6}, change{name: "c", rv: 7})
		res := readWith(h.p)
		if probe := h.answerProbe(t, probeList(12)); !strings.HasPrefix(probe.query, "fieldSelector=") {
			t.Errorf("probe %s?%s, want the probe by name", probe.path, probe.query)
		}
		w := h.watchOpened(t, listedAt)
		w.steps <- watchStep{events: []string{bookmark(12)}}
		checkServed(t, recv(t, res, "read"), 12, listedAt)
	})
	t.Run("state_probe_fails_probes_by_name", func(t *testing.T) {
		h := harness(t)
		res := readWith(h.p)
		answerState(t, h, probeAnswer{status: http.StatusInternalServerError, body: `{}`})
		if probe := h.answerProbe(t, probeList(listedAt)); !strings.HasPrefix(probe.query, "fieldSelector=") {
			t.Errorf("probe %s?%s after a failed state probe, want the probe by name", probe.path, probe.query)
		}
		checkServed(t, recv(t, res, "read"), listedAt, listedAt)
	})
	t.Run("both_probes_fail", func(t *testing.T) {
		h := harness(t)
		res := readWith(h.p)
		answerState(t, h, probeAnswer{status: http.StatusForbidden, body: `{}`})
		h.answerProbe(t, probeAnswer{status: http.StatusForbidden, body: `{}`})
		checkPassedThrough(t, recv(t, res, "read"), ProbeFailed)
	})
}

// A read not older than minRV, past a small store's progress (a
// state-proven read's resourceVersion), is proven by the state probe at
// once when it shows the store's snapshot at R ≥ minRV, and served at R;
// a state at R < minRV, or one that differs, leaves it to the auxiliary
// watch.
func TestNotOlderThanByStateProbe(t *testing.T) {
	type answer struct {
		snap *snapshot.Snapshot
		rv   uint64
	}
	notOlderThan := func(h *proofHarness, minRV uint64) <-chan answer {
		got := make(chan answer, 1)
		go func() {
			snap, rv, _ := h.p.NotOlderThan(context.Background(), minRV, 10*time.Second)
			got <- answer{snap, rv}
		}()
		return got
	}
	t.Run("state_at_R", func(t *testing.T) {
		h := newProofHarness(t, harnessConfig{stateProofMaxObjects: 2})
		relist(h.store, listedAt, change{name: "a", rv: 5})
		got := notOlderThan(h, 13)
		h.answerProbe(t, listOf(14, "a@5"))
		a := recv(t, got, "NotOlderThan(13)")
		if a.snap == nil || a.rv != 14 || a.snap.Len() != 1 {
			t.Fatalf("NotOlderThan(13) = %v at %d; want the store's snapshot at 14", a.snap, a.rv)
		}
		h.noMoreWatches(t)
	})
	for name, state := range map[string]probeAnswer{
		"state_before_minRV": listOf(12, "a@5"),
		"state_differs":      listOf(14, "a@11"),
	} {
		t.Run(name, func(t *testing.T) {
			h := newProofHarness(t, harnessConfig{stateProofMaxObjects: 2})
			relist(h.store, listedAt, change{name: "a", rv: 5})
			got := notOlderThan(h, 13)
			h.answerProbe(t, state)
			w := h.watchOpened(t, listedAt)
			w.steps <- watchStep{events: []string{bookmark(13)}}
			// The auxiliary watch shows no change in (10, 13]: the
			// store's snapshot is served at 13.
			a := recv(t, got, "NotOlderThan(13)")
			if a.snap == nil || a.rv != 13 {
				t.Fatalf("NotOlderThan(13) = %v at %d; want the snapshot served at 13", a.snap, a.rv)
			}
		})
	}
}
