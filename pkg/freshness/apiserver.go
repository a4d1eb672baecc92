package freshness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Proof through the apiserver, for clusters whose etcd listproxy cannot
// reach (docs/design.md "Freshness without etcd"). Per store and round:
//
//  1. Probe: a consistent LIST of one reserved name, sent after the reads it
//     serves arrived, returns R ≥ the etcd revision at their arrival (the
//     apiserver serves a consistent read at or after its current revision).
//  2. Fast path: the store's own feed reaches R (an event or a bookmark at
//     or beyond R: one watch stream delivers a resource's events in RV
//     order, without gaps).
//  3. Slow path: an auxiliary watch from the store's position S, unfiltered
//     and metadata-only, with a short timeoutSeconds so the apiserver sends
//     it one bookmark. Once it shows a bookmark ≥ R or an event > R, it has
//     delivered every event in (S, R]; the last of them, L (or S), is all
//     the store must hold, and then its snapshot is the state at R.
//
// A small store (at most StateProofMaxObjects objects) probes with the
// state probe instead: a consistent LIST of the resource's metadata at R.
// When it holds exactly the store's objects at the same resourceVersions,
// the store's snapshot is the state at R without waiting for any watch
// (the changes up to R that its feed may yet deliver cancel out, and a
// watch served at R starts after them); otherwise R goes on to steps 2–3.
//
// Nothing is inferred across two streams or from timing.
//
// A store's proof is its apiserverProver (apiserverprover.go); this file
// holds what the stores of one resource share (resourceProof: the probes,
// the auxiliary watch, what is known of bookmarks) and the APIServer that
// keeps them.

// Defaults of APIServerConfig.
const (
	// DefaultFastWait is how long a proof waits for the store's own feed
	// before it turns to an auxiliary watch: a busy resource's next event
	// usually arrives sooner.
	DefaultFastWait = 50 * time.Millisecond
	// DefaultStateProofMaxObjects is the most objects a store may hold for
	// its consistent reads to be proven by a state probe: a LIST of as
	// many objects' metadata costs the apiserver about what one client's
	// LIST of them does, and answers in milliseconds. Not measured.
	DefaultStateProofMaxObjects = 200
	// DefaultAuxTimeoutSeconds is an auxiliary watch's timeoutSeconds. The
	// apiserver sends a watch one bookmark 2 s before its deadline (bucketed
	// to its 1 s dispatch tick), so 3 s yields exactly one, within 0–2.25 s.
	DefaultAuxTimeoutSeconds = 3
)

// When a resource's watches are taken to carry no bookmarks (it has no
// watch cache). One auxiliary watch that ends without its bookmark proves
// nothing: the instance that answered may not have processed past the
// watch's start (HA apiservers, a restarted one), or it dropped the
// bookmark with its input buffer full. Not measured.
const (
	// feedBookmarkEvidence: a resource one of whose stores' feeds saw a
	// bookmark this recently has a watch cache (the apiserver sends every
	// watch a bookmark about once a minute); an auxiliary watch without
	// one only missed it.
	feedBookmarkEvidence = 3 * time.Minute
	// noBookmarksAfter is how many auxiliary watches in a row must end
	// without a bookmark, with no feed evidence either, before the
	// resource is taken to have none.
	noBookmarksAfter = 3
	// noBookmarksFor is how long that conclusion lasts; then auxiliary
	// watches are tried again, and one more without a bookmark renews it.
	noBookmarksFor = 10 * time.Minute
)

// ProbeName is the object name a probe asks for. Any name works; a
// reserved one makes the probe's answer empty.
const ProbeName = "listproxy-freshness-probe"

// probeNamespace is where probes of namespaced resources look, so that the
// apiserver serves them as reads of one key (O(1), one APF seat).
const probeNamespace = "default"

// APIServerConfig configures an APIServer.
type APIServerConfig struct {
	// Client and Host reach the apiserver with listproxy's credentials
	// (Host: scheme://host[:port][/prefix]). Use the client the stores'
	// feeds use: behind an L4 balancer the probe, the auxiliary watch and
	// the feed then go to the same instance.
	Client *http.Client
	Host   string
	// FastWait and AuxTimeoutSeconds: 0 selects the defaults.
	FastWait          time.Duration
	AuxTimeoutSeconds int
	// StateProofMaxObjects: 0 selects DefaultStateProofMaxObjects; a
	// negative value turns state probes off.
	StateProofMaxObjects int
	// Clock times how long a resource is taken to have no bookmarks; nil
	// selects the real clock.
	Clock clock.PassiveClock
	// Registerer registers the proof metrics; nil registers none.
	Registerer prometheus.Registerer
}

// APIServer proves the freshness of stores through the apiserver alone.
// Give it to every store's Prover (ProverConfig.APIServer). The stores of
// one resource (its representations) share its probes and auxiliary
// watches.
type APIServer struct {
	cfg     APIServerConfig
	metrics *apiserverMetrics

	mu        sync.Mutex                // guards resources
	resources map[string]*resourceProof // by collection path
}

// NewAPIServer returns an APIServer for cfg.
func NewAPIServer(cfg APIServerConfig) (*APIServer, error) {
	if cfg.Client == nil || cfg.Host == "" {
		return nil, errors.New("freshness: APIServerConfig.Client and Host are required")
	}
	if cfg.FastWait <= 0 {
		cfg.FastWait = DefaultFastWait
	}
	if cfg.AuxTimeoutSeconds <= 0 {
		cfg.AuxTimeoutSeconds = DefaultAuxTimeoutSeconds
	}
	if cfg.StateProofMaxObjects == 0 {
		cfg.StateProofMaxObjects = DefaultStateProofMaxObjects
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m, err := newAPIServerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &APIServer{cfg: cfg, metrics: m, resources: map[string]*resourceProof{}}, nil
}

// Why a proof through the apiserver failed.
var (
	// errNoBookmarks: the resource's watches carry no bookmarks (it has no
	// watch cache), so only its own feed's events can prove anything.
	errNoBookmarks = errors.New("the resource's watches carry no bookmarks")
	// errInconclusive: auxiliary watches ended without reaching the probed
	// revision (an instance behind, a 410, a closed stream).
	errInconclusive = errors.New("auxiliary watches did not reach the probed revision")
	// errFastPathOnly: the store's own feed did not reach the revision
	// within FastWait, and the caller asked for no auxiliary watch.
	errFastPathOnly = errors.New("the fast path did not prove the read, and no auxiliary watch was asked for")
	// errStateDiffers: the state probe did not show the store's
	// snapshot, or the store is too large for one.
	errStateDiffers = errors.New("the resource's state is not the store's")
)

// resourceProof is what the stores of one resource share: one probe in
// flight, one running auxiliary watch, and what auxiliary watches and the
// stores' feeds have shown about bookmarks.
type resourceProof struct {
	api      *APIServer
	resource string
	path     string // the resource's collection path, watched by auxiliary watches
	probeURL string // the name-scoped consistent LIST
	probes   sharedProbe[int64]
	// stateURL is a consistent LIST of the metadata of at most
	// StateProofMaxObjects+1 objects of the whole collection; states
	// reads it.
	stateURL string
	states   sharedProbe[*resourceState]
	ctx      context.Context // ends auxiliary watches with the last store
	cancel   context.CancelFunc
	refs     int // stores using it; guarded by api.mu
	// reached is the highest revision a probe of the resource has shown
	// (resourceVersions only grow): the resource has reached every
	// revision up to it.
	reached atomic.Uint64

	mu     sync.Mutex        // guards the fields below
	stores []*snapshot.Store // their feeds' bookmarks are evidence of a watch cache
	aux    *auxWatch         // the running auxiliary watch, nil if none
	// misses counts auxiliary watches in a row that ended at their
	// deadline without a bookmark while no feed saw one either.
	misses int
	// noBookmarksUntil: before it, the resource is taken to have no
	// bookmarks (zero: not taken so).
	noBookmarksUntil time.Time
}

// acquire returns the shared proof of the resource at path, with store
// added to its stores.
func (api *APIServer) acquire(resource, path string, namespaced bool, store *snapshot.Store) *resourceProof {
	api.mu.Lock()
	r := api.resources[path]
	if r == nil {
		probePath := path
		if namespaced {
			i := strings.LastIndexByte(path, '/')
			probePath = path[:i] + "/namespaces/" + probeNamespace + path[i:]
		}
		q := url.Values{"fieldSelector": {"metadata.name=" + ProbeName}}
		ctx, cancel := context.WithCancel(context.Background())
		r = &resourceProof{
			api:      api,
			resource: resource,
			path:     path,
			probeURL: api.cfg.Host + probePath + "?" + q.Encode(),
			stateURL: api.cfg.Host + path + "?limit=" + strconv.Itoa(max(api.cfg.StateProofMaxObjects, 0)+1),
			ctx:      ctx,
			cancel:   cancel,
		}
		r.probes.read = r.readRevision
		r.states.read = r.readState
		api.resources[path] = r
		api.metrics.exportResource(resource)
	}
	r.refs++
	api.mu.Unlock()

	r.mu.Lock()
	r.stores = append(r.stores, store)
	r.mu.Unlock()
	return r
}

// release removes store from r; the last store's release ends r's
// auxiliary watch.
func (api *APIServer) release(r *resourceProof, store *snapshot.Store) {
	r.mu.Lock()
	r.stores = slices.DeleteFunc(r.stores, func(s *snapshot.Store) bool { return s == store })
	r.mu.Unlock()

	api.mu.Lock()
	defer api.mu.Unlock()
	r.refs--
	if r.refs == 0 {
		delete(api.resources, r.path)
		r.cancel()
	}
}

// readRevision sends the probe: the resourceVersion of a consistent LIST.
func (r *resourceProof) readRevision(ctx context.Context) (int64, error) {
	var list metaList
	if err := r.list(ctx, r.probeURL, &list); err != nil {
		return 0, err
	}
	return int64(list.rev), nil
}

// resourceState is what a state probe read: the revision R of a
// consistent LIST of the resource's metadata and, when it held every
// object, their resourceVersions by key.
type resourceState struct {
	rev     uint64
	objects map[string]uint64 // nil: the resource holds more than the probe's limit
}

// is reports whether snap holds exactly the objects of st, each at the
// same resourceVersion: then snap is the state at st.rev (an object's
// resourceVersion names one version of it).
func (st *resourceState) is(snap *snapshot.Snapshot) bool {
	if st.objects == nil || len(st.objects) != snap.Len() {
		return false
	}
	same := true
	snap.Ascend(func(e *snapshot.Entry) bool {
		rv, ok := st.objects[e.Key]
		same = ok && rv == e.RV
		return same
	})
	return same
}

// readState sends the state probe.
func (r *resourceProof) readState(ctx context.Context) (*resourceState, error) {
	var list metaList
	if err := r.list(ctx, r.stateURL, &list); err != nil {
		return nil, err
	}
	st := &resourceState{rev: list.rev}
	if list.Metadata.Continue != "" || len(list.Items) > r.api.cfg.StateProofMaxObjects {
		return st, nil
	}
	st.objects = make(map[string]uint64, len(list.Items))
	for _, it := range list.Items {
		rv, err := strconv.ParseUint(it.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("state probe: %s/%s: resourceVersion %q", it.Metadata.Namespace, it.Metadata.Name, it.Metadata.ResourceVersion)
		}
		st.objects[snapshot.ObjectKey(it.Metadata.Namespace, it.Metadata.Name)] = rv
	}
	return st, nil
}

// metaList is the part of a PartialObjectMetadataList probes read.
type metaList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name            string `json:"name"`
			Namespace       string `json:"namespace"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"items"`
	rev uint64 // Metadata.ResourceVersion, parsed
}

// list sends a consistent LIST of metadata to url, a probe, decodes its
// answer into list and records the probe's duration.
func (r *resourceProof) list(ctx context.Context, url string, list *metaList) (err error) {
	start := time.Now()
	defer func() { r.api.metrics.observeProbe(time.Since(start), err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", wire.MetaJSON.ListAccept())
	req.Header.Set("User-Agent", "listproxy")
	resp, err := r.api.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: HTTP %d: %.200s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, list); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	rv, err := strconv.ParseUint(list.Metadata.ResourceVersion, 10, 64)
	if err != nil || rv == 0 {
		return fmt.Errorf("probe: resourceVersion %q", list.Metadata.ResourceVersion)
	}
	list.rev = rv
	for {
		seen := r.reached.Load()
		if rv <= seen || r.reached.CompareAndSwap(seen, rv) {
			break
		}
	}
	return nil
}

// runningAux returns the resource's running auxiliary watch, or the last
// one if it ended covering rv, or starts one from store's position; nil
// when the store has no position yet, and true while the resource is taken
// to have no bookmarks. Any auxiliary watch serves any round and any store
// of the resource: it shows every event after its start S, and the
// revision it yields is at least S, which a store behind S then waits for.
func (r *resourceProof) runningAux(store *snapshot.Store, rv uint64) (*auxWatch, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.noBookmarksUntil.IsZero() {
		if r.api.cfg.Clock.Now().Before(r.noBookmarksUntil) {
			return nil, true
		}
		r.noBookmarksUntil = time.Time{}
		r.api.metrics.noBookmarks.WithLabelValues(r.resource).Set(0)
		klog.InfoS("Trying auxiliary watches again for a resource taken to have no watch bookmarks", "resource", r.resource)
	}
	if r.aux != nil && (!r.aux.ended() || r.aux.covers(rv)) {
		return r.aux, false
	}
	_, from, err := store.Latest()
	if err != nil || from == 0 {
		return nil, false
	}
	r.aux = newAuxWatch(from)
	go r.runAux(r.aux)
	return r.aux, false
}

// runAux runs aux to its first bookmark, or to its end.
func (r *resourceProof) runAux(aux *auxWatch) {
	timeout := time.Duration(r.api.cfg.AuxTimeoutSeconds) * time.Second
	ctx, cancel := context.WithTimeout(r.ctx, timeout+5*time.Second)
	defer cancel()
	start := time.Now()
	result := r.watch(ctx, aux)
	switch {
	case result == auxBookmark:
		r.sawBookmark()
	case result == auxNoBookmark && time.Since(start) >= timeout:
		// The apiserver ended the watch at its deadline without the
		// bookmark it sends every watch with a watch cache.
		result = r.missedBookmark()
	}
	r.api.metrics.auxWatch(r.resource, result)
	aux.end()
}

// sawBookmark records an auxiliary watch's bookmark: the resource has a
// watch cache.
func (r *resourceProof) sawBookmark() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.misses = 0
	if !r.noBookmarksUntil.IsZero() {
		r.noBookmarksUntil = time.Time{}
		r.api.metrics.noBookmarks.WithLabelValues(r.resource).Set(0)
	}
}

// missedBookmark records an auxiliary watch that ended at its deadline
// without a bookmark and returns its result: auxMissedBookmark when a
// store's feed saw a bookmark lately (the resource has a watch cache; this
// watch only missed its bookmark), else auxNoBookmark. After
// noBookmarksAfter of those in a row the resource is taken to have no
// bookmarks for noBookmarksFor.
func (r *resourceProof) missedBookmark() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stores {
		if s.BookmarkedWithin(feedBookmarkEvidence) {
			r.misses = 0
			return auxMissedBookmark
		}
	}
	r.misses++
	if r.misses >= noBookmarksAfter {
		r.noBookmarksUntil = r.api.cfg.Clock.Now().Add(noBookmarksFor)
		r.api.metrics.noBookmarks.WithLabelValues(r.resource).Set(1)
		klog.InfoS("A resource's watches carry no bookmarks: its consistent reads are proven only by its own feed's events, else pass through",
			"resource", r.resource, "auxWatchesWithoutBookmark", r.misses, "retryAfter", noBookmarksFor)
	}
	return auxNoBookmark
}

// watch reads the auxiliary watch into aux and returns how it ended.
func (r *resourceProof) watch(ctx context.Context, aux *auxWatch) string {
	q := url.Values{
		"watch":               {"true"},
		"allowWatchBookmarks": {"true"},
		"resourceVersion":     {strconv.FormatUint(aux.from, 10)},
		"timeoutSeconds":      {strconv.Itoa(r.api.cfg.AuxTimeoutSeconds)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.api.cfg.Host+r.path+"?"+q.Encode(), nil)
	if err != nil {
		return auxError
	}
	req.Header.Set("Accept", wire.MetaJSON.WatchAccept())
	req.Header.Set("User-Agent", "listproxy")
	resp, err := r.api.cfg.Client.Do(req) //nolint:bodyclose // closed by the decoder
	if err != nil {
		return auxError
	}
	dec := wire.NewWatchDecoder(wire.MetaJSON, resp.Body, wire.WatchOptions{})
	defer func() { _ = dec.Close() }()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusGone {
			return auxExpired
		}
		return auxError
	}
	for {
		ev, err := dec.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return auxNoBookmark
			}
			return auxError
		}
		switch ev.Type {
		case wire.Error:
			return auxExpired
		case wire.Bookmark:
			rv, err := strconv.ParseUint(ev.ResourceVersion, 10, 64)
			if err != nil {
				return auxError
			}
			aux.observe(rv, false)
			return auxBookmark
		default:
			rv, err := strconv.ParseUint(ev.ResourceVersion, 10, 64)
			if err != nil {
				return auxError
			}
			aux.observe(rv, true)
		}
	}
}

// auxWatch is what one auxiliary watch has shown: every event after from
// up to covered.
type auxWatch struct {
	from uint64

	mu      sync.Mutex
	events  []uint64 // RVs of the events after from, ascending
	covered uint64   // every event up to covered was delivered
	done    bool
	changed chan struct{} // closed and replaced when covered grows or done
}

func newAuxWatch(from uint64) *auxWatch {
	return &auxWatch{from: from, covered: from, changed: make(chan struct{})}
}

// observe records an event (isEvent) or a bookmark at rv.
func (w *auxWatch) observe(rv uint64, isEvent bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rv <= w.covered {
		return // at or below what is known: a replay, or a stale bookmark
	}
	if isEvent {
		w.events = append(w.events, rv)
	}
	w.covered = rv
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *auxWatch) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	close(w.changed)
	w.changed = make(chan struct{})
}

// covers reports whether the watch showed every event up to rv.
func (w *auxWatch) covers(rv uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.covered >= rv
}

func (w *auxWatch) ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// lastChange waits until the watch covers r and returns the last event at
// or before r (or from, if none) and how far the watch covered; ok is
// false if the watch ended short of r or ctx ended.
func (w *auxWatch) lastChange(ctx context.Context, r uint64) (last, covered uint64, ok bool) {
	for {
		w.mu.Lock()
		if w.covered >= r {
			last = w.from
			for _, rv := range w.events {
				if rv <= r {
					last = rv
				}
			}
			covered = w.covered
			w.mu.Unlock()
			return last, covered, true
		}
		done, changed := w.done, w.changed
		w.mu.Unlock()
		if done {
			return 0, 0, false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, 0, false
		}
	}
}
