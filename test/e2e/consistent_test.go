package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

// Acceptance tests for consistent reads (docs/design.md "Freshness" and
// "Continue tokens"): a LIST with resourceVersion unset is linearizable
// whether listproxy or the apiserver answers it, pages of one list share one
// resourceVersion, continue tokens survive restarts and compaction as the
// apiserver's do, and without etcd listproxy falls back instead of guessing.

// listAnswer is one LIST response through listproxy, decoded. Items carry
// metadata only.
type listAnswer struct {
	code       int
	header     http.Header
	servedFrom string
	meta       metav1.ListMeta
	items      []metav1.PartialObjectMetadata
	status     metav1.Status // when code != 200
}

// getListAnswer sends a JSON LIST and decodes the list, or the Status of an error.
func getListAnswer(ctx context.Context, c rawClient, path string, q url.Values) (listAnswer, error) {
	code, hdr, body, err := c.get(ctx, path, q, acceptJSON)
	if err != nil {
		return listAnswer{}, err
	}
	p := listAnswer{code: code, header: hdr, servedFrom: hdr.Get(headerServedFrom)}
	if code != http.StatusOK {
		if err := json.Unmarshal(body, &p.status); err != nil {
			return p, fmt.Errorf("HTTP %d, body is not a Status: %w: %.300s", code, err, body)
		}
		return p, nil
	}
	var list metav1.PartialObjectMetadataList
	if err := json.Unmarshal(body, &list); err != nil {
		return p, fmt.Errorf("decode list: %w: %.300s", err, body)
	}
	p.meta, p.items = list.ListMeta, list.Items
	return p, nil
}

func parseRV(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

// seedConfigMaps creates configmaps PREFIX-00 … PREFIX-(n-1) in namespace ns.
func seedConfigMaps(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	cms := make([]*corev1.ConfigMap, n)
	for i := range cms {
		cms[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%02d", prefix, i)}, Data: map[string]string{"i": strconv.Itoa(i)}}
	}
	if err := seed.ConfigMaps(context.Background(), cs, cms, seed.Options{Workers: 8}); err != nil {
		t.Fatalf("seeding: %v", err)
	}
}

// ---------------------------------------------------------------------------
// 1. Linearizable reads under write load.

// Parameters of TestLinearizableReads. Writers own disjoint keys, so the
// writes to one key are sequential and their order is known.
const (
	linNamespace    = "linearizable"
	linWriters      = 5
	linKeys         = 120 // keys cm-000 … cm-119, key k owned by writer k % linWriters
	linWriterRate   = 14  // writes per second per writer: 70/s total, ≥ 50/s required
	linMinRate      = 50
	linReaders      = 3
	linDefaultSoak  = 30 * time.Second // LISTPROXY_SOAK_DURATION runs longer
	linMinSnapshotP = 99               // percent of LISTs answered from snapshots
)

// linModes are the LISTs readers send, round robin; every one is consistent
// (resourceVersion unset).
var linModes = []struct {
	name     string
	selector string
	limit    int
	// ownWrite: the reader first writes its own key through the apiserver
	// and sends the LIST the moment the write is acked, the tightest race
	// between a write and the snapshot that must reflect it.
	ownWrite bool
}{
	{"full", "", 0, false},
	{"paged", "", 7, false},
	{"selector", "parity=even", 0, false},
	{"selector_paged", "parity=odd", 5, false},
	{"read_your_write", "", 0, true},
}

// linWrite is one write to one key, logged before it is sent.
type linWrite struct {
	seq    uint64 // order in which writes were sent, across all keys
	del    bool
	parity string // the put's "parity" label
	acked  bool   // the apiserver answered success
	rv     uint64 // an acked put's resourceVersion (deletes: unknown, 0)
}

// linHistory records every write to the test's keys. A LIST sent after a write
// was acked must reflect that write or a later one to the same key; writes
// sent after the LIST was answered cannot show.
type linHistory struct {
	mu         sync.Mutex
	seq        uint64       // guarded by mu; seq of the last write sent
	logs       [][]linWrite // guarded by mu; per key, in send order
	lastAcked  []int        // guarded by mu; per key, index of the last acked write, -1 if none
	maxAckedRV uint64       // guarded by mu
}

// linSendState is what a reader knows when it sends a LIST: the writes acked
// by then.
type linSendState struct {
	lastAcked  []int
	maxAckedRV uint64
}

func newHistory(keys int) *linHistory {
	h := &linHistory{logs: make([][]linWrite, keys), lastAcked: make([]int, keys)}
	for k := range h.lastAcked {
		h.lastAcked[k] = -1
	}
	return h
}

func keyName(k int) string { return fmt.Sprintf("cm-%03d", k) }

func (h *linHistory) begin(k int, w linWrite) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	w.seq = h.seq
	h.logs[k] = append(h.logs[k], w)
	return len(h.logs[k]) - 1
}

func (h *linHistory) ack(k, i int, rv uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs[k][i].acked, h.logs[k][i].rv = true, rv
	h.lastAcked[k] = i
	h.maxAckedRV = max(h.maxAckedRV, rv)
}

func (h *linHistory) beforeSend() linSendState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return linSendState{lastAcked: append([]int(nil), h.lastAcked...), maxAckedRV: h.maxAckedRV}
}

func (h *linHistory) sentSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// keyWriter creates, relabels and deletes keys through the apiserver
// directly, logging each write in the history. Each key has one keyWriter,
// so its writes are sequential.
type keyWriter struct {
	h      *linHistory
	t      *testing.T
	name   string
	cms    typedcorev1.ConfigMapInterface
	rng    *mrand.Rand
	exists map[int]bool

	acked, failed int
}

func newKeyWriter(h *linHistory, t *testing.T, cs kubernetes.Interface, namespace, name string, seed uint64) *keyWriter {
	return &keyWriter{h: h, t: t, name: name, cms: cs.CoreV1().ConfigMaps(namespace), rng: mrand.New(mrand.NewPCG(seed, 4)), exists: map[int]bool{}}
}

// write changes key k once: creates it if absent, else relabels it or (one
// time in four) deletes it. A failed write stays in the history as unacked:
// it may or may not have happened.
func (w *keyWriter) write(ctx context.Context, k int) {
	op := linWrite{parity: []string{"even", "odd"}[w.rng.IntN(2)]}
	if w.exists[k] && w.rng.IntN(4) == 0 {
		op.del = true
	}
	i := w.h.begin(k, op)
	var obj *corev1.ConfigMap
	var err error
	switch {
	case op.del:
		err = w.cms.Delete(ctx, keyName(k), metav1.DeleteOptions{})
	case w.exists[k]:
		patch := fmt.Sprintf(`{"metadata":{"labels":{"parity":%q,"seq":"%d"}}}`, op.parity, i)
		obj, err = w.cms.Patch(ctx, keyName(k), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	default:
		obj, err = w.cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: keyName(k), Labels: map[string]string{"parity": op.parity, "seq": strconv.Itoa(i)},
		}}, metav1.CreateOptions{})
	}
	if err != nil {
		w.failed++
		w.t.Logf("%s: %s: %v (treated as possibly applied)", w.name, keyName(k), err)
		// Learn the key's state again; the failed write stays unacked.
		_, gerr := w.cms.Get(ctx, keyName(k), metav1.GetOptions{})
		w.exists[k] = gerr == nil
		return
	}
	var rv uint64
	if obj != nil {
		if rv, err = strconv.ParseUint(obj.ResourceVersion, 10, 64); err != nil {
			w.t.Errorf("%s: resourceVersion %q: %v", w.name, obj.ResourceVersion, err)
		}
	}
	w.h.ack(k, i, rv)
	w.exists[k] = !op.del
	w.acked++
}

// linList is a reader's LIST: what was acked when it was sent, and what it
// returned.
type linList struct {
	sent     linSendState
	observed linObserved
}

// linObserved is one complete LIST (all pages) as a reader saw it.
type linObserved struct {
	rv    uint64
	items map[string]linItem
}

type linItem struct {
	rv     uint64
	labels map[string]string
}

// check returns how the LIST violates linearizability. sent is what was acked
// when the LIST was sent; cutoff is the seq of the last write sent before its
// first page was answered (pages after the first are served at that page's
// resourceVersion, so later writes cannot show).
func (h *linHistory) check(sent linSendState, cutoff uint64, l linObserved, sel labels.Selector) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if l.rv < sent.maxAckedRV {
		report("list resourceVersion %d is older than resourceVersion %d of a write acked before the LIST was sent", l.rv, sent.maxAckedRV)
	}
	matches := func(parity string) bool { return sel.Matches(labels.Set{"parity": parity}) }
	for name := range l.items {
		if k, err := strconv.Atoi(strings.TrimPrefix(name, "cm-")); err != nil || k < 0 || k >= len(h.logs) || keyName(k) != name {
			report("unexpected object %s", name)
		}
	}
	for k, log := range h.logs {
		name := keyName(k)
		a := sent.lastAcked[k]
		// Writes that may or may not show: sent after the last write acked
		// before the LIST, and before the LIST was answered.
		var later []linWrite
		for _, w := range log[a+1:] {
			if w.seq <= cutoff {
				later = append(later, w)
			}
		}
		item, present := l.items[name]
		if !present {
			if a >= 0 && !log[a].del && matches(log[a].parity) && !anyLinWrite(later, func(w linWrite) bool { return w.del || !matches(w.parity) }) {
				report("%s missing: its write at resourceVersion %d (parity=%s) was acked before the LIST was sent, and nothing since removed it from the selection", name, log[a].rv, log[a].parity)
			}
			// At the list's resourceVersion the key holds its last put at or
			// before it, unless something after that put may precede it too.
			if j := lastPutAtOrBefore(log, l.rv); j >= 0 && matches(log[j].parity) && allPutsAfter(log[j+1:], l.rv) {
				report("%s missing at list resourceVersion %d: its put at %d (parity=%s) is the key's state there", name, l.rv, log[j].rv, log[j].parity)
			}
			continue
		}
		if !sel.Matches(labels.Set(item.labels)) {
			report("%s (labels %v) does not match the selector %q", name, item.labels, sel)
		}
		if item.rv > l.rv {
			report("%s at resourceVersion %d is newer than the list's %d", name, item.rv, l.rv)
		}
		j := -1
		for i, w := range log {
			if w.acked && !w.del && w.rv == item.rv {
				j = i
			}
		}
		switch {
		case j >= 0 && j < a && log[a].del:
			report("%s stale: shows resourceVersion %d, but its delete was acked before the LIST was sent", name, item.rv)
		case j >= 0 && j < a:
			report("%s stale: shows resourceVersion %d, but the write at %d was acked before the LIST was sent", name, item.rv, log[a].rv)
		case j >= 0 && log[j].seq > cutoff:
			report("%s shows resourceVersion %d, written after the LIST was answered", name, item.rv)
		case j >= 0 && item.labels["parity"] != log[j].parity:
			report("%s at resourceVersion %d has parity=%s, the write had %s", name, item.rv, item.labels["parity"], log[j].parity)
		case j < 0 && !anyLinWrite(later, func(w linWrite) bool { return !w.del && !w.acked }):
			report("%s at resourceVersion %d matches no write that could show", name, item.rv)
		}
		// Exactly the state at the list's resourceVersion: no acked put of
		// the key is newer than the item and not newer than the list.
		for _, w := range log {
			if w.acked && !w.del && w.rv > item.rv && w.rv <= l.rv {
				report("%s stale at list resourceVersion %d: shows %d, but the key was written at %d", name, l.rv, item.rv, w.rv)
				break
			}
		}
	}
	return problems
}

func anyLinWrite(ws []linWrite, f func(linWrite) bool) bool {
	for _, w := range ws {
		if f(w) {
			return true
		}
	}
	return false
}

// lastPutAtOrBefore returns the index of the last acked put with
// resourceVersion ≤ rv, or -1.
func lastPutAtOrBefore(log []linWrite, rv uint64) int {
	j := -1
	for i, w := range log {
		if w.acked && !w.del && w.rv <= rv {
			j = i
		}
	}
	return j
}

// allPutsAfter reports whether every write in ws is an acked put after rv:
// nothing in ws can have changed the key at or before rv.
func allPutsAfter(ws []linWrite, rv uint64) bool {
	for _, w := range ws {
		if !w.acked || w.del || w.rv <= rv {
			return false
		}
	}
	return true
}

// linStats are the readers' totals.
type linStats struct {
	lists, pages, listsFromSnapshot, pagesFromSnapshot atomic.Int64
	byMode                                             []atomic.Int64 // per linModes entry
}

// linViolations collects failures from goroutines, reporting the first few.
type linViolations struct {
	t     *testing.T
	count atomic.Int64
}

func (v *linViolations) add(format string, args ...any) {
	if v.count.Add(1) <= 20 {
		v.t.Errorf(format, args...)
	}
}

func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("LISTPROXY_SOAK_DURATION")
	if s == "" {
		return linDefaultSoak
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("LISTPROXY_SOAK_DURATION=%q: want a positive duration such as 10m", s)
	}
	return d
}

// TestLinearizableReads writes configmaps through the apiserver directly
// while readers LIST them through listproxy with resourceVersion unset, with
// and without limit and label selectors. Every LIST must reflect every write
// acked before it was sent, be exactly the state at its resourceVersion, and
// carry one resourceVersion on all its pages; at least 99% must be answered
// from snapshots. LISTPROXY_SOAK_DURATION sets how long it runs (`make soak`).
func TestLinearizableReads(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	checkLinearizable(t, cp, lp, linRun{namespace: linNamespace, duration: soakDuration(t), writers: linWriters})
}

// linRun is one run of checkLinearizable.
type linRun struct {
	namespace string
	duration  time.Duration
	// writers write in the background at linWriterRate each.
	writers int
	// quiet makes the configmaps a quiet resource in a busy cluster: one
	// configmap write per second instead of the writers', readers that do
	// not write, and secrets written ten times a second, so that the
	// cluster's revision moves past the configmaps' last change.
	quiet bool
	// minWriteRate is the writers' least acked writes per second; 0 means
	// linMinRate.
	minWriteRate int
	// faultyWrites is how many writes may fail beyond 1% (writes in
	// flight when a fault strikes).
	faultyWrites int
	// passThrough: consistent LISTs may pass through to the apiserver
	// (no least share from snapshots).
	passThrough bool
	// unavailable: LISTs answered 429 or 5xx (an apiserver restarting
	// behind listproxy) are counted, not failures.
	unavailable bool
	// writeTo, when set, is the writers' client (default: the admin's,
	// straight to the apiserver).
	writeTo kubernetes.Interface
	// faults, when set, runs alongside the readers and writers once they
	// start, and the run waits for it.
	faults func(ctx context.Context)
}

// linResult is what a run of checkLinearizable counted.
type linResult struct {
	lists, fromSnapshot, unavailable int64
}

// errUnavailable marks a LIST answered 429 or 5xx.
var errUnavailable = errors.New("unavailable")

// checkLinearizable runs writers and readers against configmaps of
// run.namespace (created here) for run.duration and checks every LIST
// (see TestLinearizableReads).
func checkLinearizable(t *testing.T, cp *framework.ControlPlane, lp *framework.Listproxy, run linRun) linResult {
	ctx := t.Context()
	if err := cp.CreateNamespace(ctx, run.namespace, nil); err != nil {
		t.Fatal(err)
	}
	lpc := newRawClient(t, lp.Config())
	path := "/api/v1/namespaces/" + run.namespace + "/configmaps"
	if run.passThrough {
		// Synced: consistent reads may pass through from the start.
		waitServed(ctx, t, lpc, path, url.Values{"resourceVersion": {"0"}})
	} else {
		waitServed(ctx, t, lpc, path, url.Values{})
	}
	duration := run.duration

	// Keys 0 … linKeys-1 belong to the writers; each reader owns one more
	// for its read-your-write LISTs.
	h := newHistory(linKeys + linReaders)
	var cs kubernetes.Interface = cp.Clientset(framework.UserAdmin)
	if run.writeTo != nil {
		cs = run.writeTo
	}
	// stop ends the run; requests in flight then complete, so that no
	// write is left in doubt.
	stop := make(chan struct{})
	time.AfterFunc(duration, func() { close(stop) })
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	var writers, owners []*keyWriter
	writerCount, writeInterval := run.writers, time.Second/linWriterRate
	if run.quiet {
		writerCount, writeInterval = 1, time.Second
	}
	for id := range writerCount {
		w := newKeyWriter(h, t, cs, run.namespace, fmt.Sprintf("writer %d", id), uint64(id))
		writers = append(writers, w)
		wg.Go(func() {
			tick := time.NewTicker(writeInterval)
			defer tick.Stop()
			for running() {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				w.write(ctx, id+writerCount*w.rng.IntN(linKeys/writerCount))
			}
		})
	}
	if run.quiet {
		wg.Go(func() { churnSecret(ctx, t, cs, run.namespace, 100*time.Millisecond, running) })
	}
	stats := linStats{byMode: make([]atomic.Int64, len(linModes))}
	v := &linViolations{t: t}
	var unavailable atomic.Int64
	if run.faults != nil {
		wg.Go(func() { run.faults(ctx) })
	}
	for id := range linReaders {
		own := newKeyWriter(h, t, cs, run.namespace, fmt.Sprintf("reader %d", id), uint64(100+id))
		owners = append(owners, own)
		wg.Go(func() {
			for i := id; running(); i++ {
				mode := i % len(linModes)
				m := linModes[mode]
				if run.quiet && m.ownWrite {
					continue
				}
				sel, err := labels.Parse(m.selector)
				if err != nil {
					v.add("selector %q: %v", m.selector, err)
					return
				}
				if m.ownWrite {
					own.write(ctx, linKeys+id)
				}
				l, cutoff, fromSnapshot, err := readList(ctx, h, lpc, path, m.selector, m.limit, &stats)
				if run.unavailable && errors.Is(err, errUnavailable) {
					if unavailable.Add(1) <= 5 {
						t.Logf("%s LIST: %v", m.name, err)
					}
					continue
				}
				if err != nil {
					v.add("%s LIST: %v", m.name, err)
					continue
				}
				stats.lists.Add(1)
				stats.byMode[mode].Add(1)
				if fromSnapshot {
					stats.listsFromSnapshot.Add(1)
				}
				for _, p := range h.check(l.sent, cutoff, l.observed, sel) {
					v.add("%s LIST at resourceVersion %d (served from snapshot: %v): %s", m.name, l.observed.rv, fromSnapshot, p)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var acked, failed, ownAcked int
	for _, w := range writers {
		acked += w.acked
		failed += w.failed
	}
	for _, w := range owners {
		ownAcked += w.acked
		failed += w.failed
	}

	rate := float64(acked) / elapsed.Seconds()
	lists, pages := stats.lists.Load(), stats.pages.Load()
	fromSnap := stats.listsFromSnapshot.Load()
	share := 100 * float64(fromSnap) / float64(max(lists, 1))
	var byMode []string
	for i, m := range linModes {
		byMode = append(byMode, fmt.Sprintf("%s %d", m.name, stats.byMode[i].Load()))
	}
	t.Logf("%v: writers acked %d writes (%.1f/s), readers %d of their own, %d failed; %d LISTs (%s), %d pages; %d LISTs (%.2f%%) and %d pages served from snapshots; %d LISTs unavailable; %d violations",
		elapsed.Round(time.Millisecond), acked, rate, ownAcked, failed, lists, strings.Join(byMode, ", "),
		pages, fromSnap, share, stats.pagesFromSnapshot.Load(), unavailable.Load(), v.count.Load())
	minRate := run.minWriteRate
	if minRate == 0 {
		minRate = linMinRate
	}
	if !run.quiet && run.writers > 0 && rate < float64(minRate) {
		t.Errorf("writers achieved %.1f writes/s; the test needs at least %d", rate, minRate)
	}
	if failed*100 > acked+ownAcked+100*run.faultyWrites {
		t.Errorf("%d of %d writes failed; at most 1%% and %d more may", failed, acked+ownAcked+failed, run.faultyWrites)
	}
	if lists < int64(len(linModes)) {
		t.Errorf("only %d LISTs completed", lists)
	}
	if !run.passThrough && share < linMinSnapshotP {
		t.Errorf("%.2f%% of consistent LISTs were served from snapshots; want at least %d%%", share, linMinSnapshotP)
	}
	return linResult{lists: lists, fromSnapshot: fromSnap, unavailable: unavailable.Load()}
}

// readList sends one consistent LIST and walks all its pages. It returns the
// list with what was acked at send time, the cutoff for check, and whether
// every page was served from a snapshot.
func readList(ctx context.Context, h *linHistory, c rawClient, path, selector string, limit int, stats *linStats) (linList, uint64, bool, error) {
	var out linList
	out.observed.items = map[string]linItem{}
	q := url.Values{}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	out.sent = h.beforeSend()
	var cutoff uint64
	fromSnapshot := true
	listRV, lastName := "", ""
	for n := 1; ; n++ {
		p, err := getListAnswer(ctx, c, path, q)
		if err != nil {
			return out, 0, false, fmt.Errorf("page %d: %w", n, err)
		}
		if n == 1 {
			cutoff = h.sentSeq()
			listRV = p.meta.ResourceVersion
		}
		if p.code == http.StatusTooManyRequests || p.code >= http.StatusInternalServerError {
			return out, 0, false, fmt.Errorf("page %d: HTTP %d (served from %q): %s: %w", n, p.code, p.servedFrom, p.status.Message, errUnavailable)
		}
		if p.code != http.StatusOK {
			return out, 0, false, fmt.Errorf("page %d: HTTP %d (served from %q): %s", n, p.code, p.servedFrom, p.status.Message)
		}
		stats.pages.Add(1)
		if p.servedFrom == "snapshot" {
			stats.pagesFromSnapshot.Add(1)
		} else {
			fromSnapshot = false
		}
		if p.meta.ResourceVersion != listRV {
			return out, 0, false, fmt.Errorf("page %d at resourceVersion %s, page 1 at %s", n, p.meta.ResourceVersion, listRV)
		}
		if limit > 0 && len(p.items) > limit {
			return out, 0, false, fmt.Errorf("page %d has %d items, limit %d", n, len(p.items), limit)
		}
		for _, it := range p.items {
			if it.Name <= lastName {
				return out, 0, false, fmt.Errorf("page %d: %s after %s: not in key order", n, it.Name, lastName)
			}
			lastName = it.Name
			rv, err := strconv.ParseUint(it.ResourceVersion, 10, 64)
			if err != nil {
				return out, 0, false, fmt.Errorf("%s: resourceVersion %q", it.Name, it.ResourceVersion)
			}
			out.observed.items[it.Name] = linItem{rv: rv, labels: it.Labels}
		}
		if p.meta.Continue == "" {
			break
		}
		if limit == 0 {
			return out, 0, false, fmt.Errorf("page %d of an unlimited LIST has a continue token", n)
		}
		q.Set("continue", p.meta.Continue)
	}
	rv, err := strconv.ParseUint(listRV, 10, 64)
	if err != nil {
		return out, 0, false, fmt.Errorf("list resourceVersion %q", listRV)
	}
	out.observed.rv = rv
	return out, cutoff, fromSnapshot, nil
}

// ---------------------------------------------------------------------------
// 2. Paging conformance.

// TestPagingConformance mirrors the upstream conformance test "should return
// chunks of results for list calls" (test/e2e/apimachinery/chunking.go):
// 400 PodTemplates listed 17 at a time come back in name order, at one
// resourceVersion, with remainingItemCount counting down to none on the last
// page, every page answered from a snapshot — with raw requests and with
// client-go.
func TestPagingConformance(t *testing.T) {
	const (
		ns    = "chunking"
		total = 400
		limit = 17
	)
	cp, ctx := startWithNamespace(t, ns, 0)
	cs := cp.Clientset(framework.UserAdmin)
	templates := make([]*corev1.PodTemplate, total)
	for i := range templates {
		templates[i] = &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("template-%04d", i)},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "test", Image: "busybox"}},
			}},
		}
	}
	if err := seed.PodTemplates(ctx, cs, templates, seed.Options{Workers: 16}); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())
	path := "/api/v1/namespaces/" + ns + "/podtemplates"
	waitServed(ctx, t, lpc, path, url.Values{})

	// checkPage is what the conformance test checks of every page, plus
	// the exact names.
	checkPage := func(t *testing.T, n, seen int, firstRV string, meta metav1.ListMeta, names []string) {
		t.Helper()
		if meta.ResourceVersion != firstRV {
			t.Errorf("page %d: resourceVersion %s, page 1 had %s", n, meta.ResourceVersion, firstRV)
		}
		wantLen := min(limit, total-seen)
		if len(names) != wantLen {
			t.Errorf("page %d: %d items, want %d", n, len(names), wantLen)
		}
		for i, name := range names {
			if want := fmt.Sprintf("template-%04d", seen+i); name != want {
				t.Errorf("page %d: item %d is %s, want %s (name order)", n, i, name, want)
				break
			}
		}
		seen += len(names)
		last := seen >= total
		switch {
		case last && meta.Continue != "":
			t.Errorf("page %d: the last page has a continue token", n)
		case last && meta.RemainingItemCount != nil:
			t.Errorf("page %d: the last page has remainingItemCount %d, want none", n, *meta.RemainingItemCount)
		case !last && meta.Continue == "":
			t.Errorf("page %d: no continue token after %d of %d items", n, seen, total)
		case !last && meta.RemainingItemCount == nil:
			t.Errorf("page %d: no remainingItemCount", n)
		case !last && int(*meta.RemainingItemCount)+seen != total:
			t.Errorf("page %d: remainingItemCount %d + %d seen != %d", n, *meta.RemainingItemCount, seen, total)
		}
	}

	t.Run("raw", func(t *testing.T) {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		seen, firstRV := 0, ""
		for n := 1; n <= total/limit+2; n++ {
			p, err := getListAnswer(ctx, lpc, path, q)
			if err != nil {
				t.Fatalf("page %d: %v", n, err)
			}
			if p.code != http.StatusOK {
				t.Fatalf("page %d: HTTP %d: %s", n, p.code, p.status.Message)
			}
			if p.servedFrom != "snapshot" {
				t.Errorf("page %d served from %q, want snapshot", n, p.servedFrom)
			}
			if n == 1 {
				firstRV = p.meta.ResourceVersion
			}
			names := make([]string, len(p.items))
			for i, it := range p.items {
				names[i] = it.Name
			}
			checkPage(t, n, seen, firstRV, p.meta, names)
			seen += len(p.items)
			if p.meta.Continue == "" {
				break
			}
			q.Set("continue", p.meta.Continue)
		}
		if seen != total {
			t.Errorf("saw %d items, want %d", seen, total)
		}
	})

	t.Run("client-go", func(t *testing.T) {
		// client-go asks for protobuf, a representation listproxy ingests
		// through a watch of its own, started on first demand.
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			code, hdr, _, err := lpc.get(ctx, path, url.Values{"limit": {"1"}}, acceptProtobuf)
			return err == nil && code == http.StatusOK && hdr.Get(headerServedFrom) == "snapshot", nil
		})
		if err != nil {
			t.Fatalf("consistent protobuf LIST never served from a snapshot: %v", err)
		}
		cfg := lp.Config()
		rec := &servedFromRecorder{}
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			rec.next = rt
			return rec
		}
		client := kubernetes.NewForConfigOrDie(cfg)
		opts := metav1.ListOptions{Limit: limit}
		seen, firstRV := 0, ""
		for n := 1; n <= total/limit+2; n++ {
			list, err := client.CoreV1().PodTemplates(ns).List(ctx, opts)
			if err != nil {
				t.Fatalf("page %d: %v", n, err)
			}
			if n == 1 {
				firstRV = list.ResourceVersion
			}
			names := make([]string, len(list.Items))
			for i, it := range list.Items {
				names[i] = it.Name
				if len(it.Template.Spec.Containers) != 1 || it.Template.Spec.Containers[0].Image != "busybox" {
					t.Fatalf("page %d: %s decoded without its template: %+v", n, it.Name, it.Template)
				}
			}
			checkPage(t, n, seen, firstRV, list.ListMeta, names)
			seen += len(list.Items)
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
		if seen != total {
			t.Errorf("saw %d items, want %d", seen, total)
		}
		servedFrom := rec.get()
		for i, s := range servedFrom {
			if s != "snapshot" {
				t.Errorf("client-go request %d served from %q, want snapshot", i+1, s)
			}
		}
		if want := (total + limit - 1) / limit; len(servedFrom) != want {
			t.Errorf("client-go sent %d requests, want %d pages", len(servedFrom), want)
		}
	})
}

// servedFromRecorder is a client-go transport wrapper that records who
// answered each response.
type servedFromRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string // guarded by mu
}

func (r *servedFromRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seen = append(r.seen, resp.Header.Get(headerServedFrom))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *servedFromRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// ---------------------------------------------------------------------------
// 3. Continue tokens across restarts and compaction.

// walkContinue follows continue tokens from first to the end of the list and
// returns the names of all pages after first and their resourceVersions.
func walkContinue(ctx context.Context, t *testing.T, c rawClient, path string, limit int, first listAnswer) (names []string, rvs []string) {
	t.Helper()
	p := first
	for n := 2; p.meta.Continue != ""; n++ {
		if n > 1000 {
			t.Fatal("list does not end")
		}
		var err error
		p, err = getListAnswer(ctx, c, path, url.Values{"limit": {strconv.Itoa(limit)}, "continue": {p.meta.Continue}})
		if err != nil {
			t.Fatalf("page %d: %v", n, err)
		}
		if p.code != http.StatusOK {
			t.Fatalf("page %d: HTTP %d: %s", n, p.code, p.status.Message)
		}
		for _, it := range p.items {
			names = append(names, it.Name)
		}
		rvs = append(rvs, p.meta.ResourceVersion)
	}
	return names, rvs
}

func namesOf(items []metav1.PartialObjectMetadata) []string {
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.Name
	}
	return names
}

// TestCompactedContinueToken takes a continue token from one listproxy and
// uses it on a restarted one (same --continue-token-keys-file) that no
// longer holds the token's snapshot: the rest of the list is handed to the
// apiserver at the token's resourceVersion. After etcd compacts that
// revision, the same token gets the apiserver's 410 Expired with a token in
// Status.metadata.continue that continues from the same key at a newer
// resourceVersion.
func TestCompactedContinueToken(t *testing.T) {
	const (
		ns    = "compaction"
		limit = 5
	)
	cp, ctx := startWithNamespace(t, ns, 0)
	cs := cp.Clientset(framework.UserAdmin)
	seedConfigMaps(t, cs, ns, "cm", 30) // cm-00 … cm-29
	keys := writeKeyFile(t)
	args := []string{"--etcd-servers=" + cp.EtcdEndpoint, "--continue-token-keys-file=" + keys}
	path := "/api/v1/namespaces/" + ns + "/configmaps"

	lp1 := framework.StartListproxy(t, cp, args...)
	lpc1 := newRawClient(t, lp1.Config())
	waitServed(ctx, t, lpc1, path, url.Values{})
	first, err := getListAnswer(ctx, lpc1, path, url.Values{"limit": {strconv.Itoa(limit)}})
	if err != nil || first.code != http.StatusOK || first.meta.Continue == "" || first.servedFrom != "snapshot" {
		t.Fatalf("first page: HTTP %d from %q, continue %q, err %v", first.code, first.servedFrom, first.meta.Continue, err)
	}
	if got, want := strings.Join(namesOf(first.items), ","), "cm-00,cm-01,cm-02,cm-03,cm-04"; got != want {
		t.Fatalf("first page %s, want %s", got, want)
	}
	tokenRV := first.meta.ResourceVersion
	if err := lp1.Stop(); err != nil {
		t.Fatalf("stop listproxy: %v", err)
	}

	// Changes after the token's resourceVersion, which its list must not show.
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lp2 := framework.StartListproxy(t, cp, args...)
	lpc2 := newRawClient(t, lp2.Config())
	// Synced, so the token's snapshot is missing from a live store rather
	// than the store not being there yet.
	waitServed(ctx, t, lpc2, path, url.Values{})

	t.Run("handoff", func(t *testing.T) {
		p, err := getListAnswer(ctx, lpc2, path, url.Values{"limit": {strconv.Itoa(limit)}, "continue": {first.meta.Continue}})
		if err != nil {
			t.Fatal(err)
		}
		if p.code != http.StatusOK {
			t.Fatalf("old token on a restarted listproxy: HTTP %d (served from %q): %s", p.code, p.servedFrom, p.status.Message)
		}
		if p.servedFrom != "apiserver" {
			t.Errorf("old token served from %q, want apiserver (handoff with a native token)", p.servedFrom)
		}
		if p.meta.ResourceVersion != tokenRV {
			t.Errorf("resourceVersion %s, want the token's %s", p.meta.ResourceVersion, tokenRV)
		}
		rest, rvs := walkContinue(ctx, t, lpc2, path, limit, p)
		for i, rv := range rvs {
			if rv != tokenRV {
				t.Errorf("page %d at resourceVersion %s, want the token's %s", i+3, rv, tokenRV)
			}
		}
		var want []string
		for i := 5; i < 30; i++ {
			want = append(want, fmt.Sprintf("cm-%02d", i)) // cm-10 still there, cm-late not yet
		}
		if got := append(namesOf(p.items), rest...); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("rest of the list at resourceVersion %s:\n got %v\nwant %v", tokenRV, got, want)
		}
	})

	t.Run("compacted", func(t *testing.T) {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-later"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		compactRev, err := framework.CompactEtcd(ctx, []string{cp.EtcdEndpoint}, false)
		if err != nil {
			t.Fatal(err)
		}
		if tr := parseRV(t, tokenRV); int64(tr) >= compactRev {
			t.Fatalf("token resourceVersion %d not below the compacted revision %d", tr, compactRev)
		}

		p, err := getListAnswer(ctx, lpc2, path, url.Values{"limit": {strconv.Itoa(limit)}, "continue": {first.meta.Continue}})
		if err != nil {
			t.Fatal(err)
		}
		if p.code != http.StatusGone || p.status.Reason != metav1.StatusReasonExpired {
			t.Fatalf("compacted token: HTTP %d reason %q, want 410 Expired: %s", p.code, p.status.Reason, p.status.Message)
		}
		if p.servedFrom != "snapshot" {
			t.Errorf("410 answered by %q, want listproxy itself (snapshot): it tracks compaction", p.servedFrom)
		}
		next := p.status.Continue
		if next == "" {
			t.Fatalf("410 without Status.metadata.continue: %+v", p.status)
		}
		// The inconsistent continuation: from the same key, at a newer
		// resourceVersion, to the end.
		cont := listAnswer{meta: metav1.ListMeta{Continue: next}}
		names, rvs := walkContinue(ctx, t, lpc2, path, limit, cont)
		if len(names) == 0 || names[0] <= "cm-04" {
			t.Fatalf("continuation starts at %v, want after cm-04", names)
		}
		var want []string
		for i := 5; i < 30; i++ {
			if i != 10 {
				want = append(want, fmt.Sprintf("cm-%02d", i))
			}
		}
		want = append(want, "cm-late", "cm-later") // the latest state
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("continuation:\n got %v\nwant %v", names, want)
		}
		for i, rv := range rvs {
			if r := parseRV(t, rv); int64(r) < compactRev {
				t.Errorf("continuation page %d at resourceVersion %d, want ≥ the compacted revision %d", i+1, r, compactRev)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// 4. Fallback while etcd is down.

// TestEtcdDownFallback stops etcd: consistent reads, which cannot be proven
// fresh, fall back within --consistent-read-timeout — passed through to the
// apiserver by default, 429 with Retry-After with
// --consistent-read-fallback=reject — while resourceVersion=0 reads keep
// being served from snapshots. Once etcd is back, consistent reads are
// served from snapshots again, and fresh.
func TestEtcdDownFallback(t *testing.T) {
	const (
		ns      = "etcd-down"
		timeout = time.Second
		// margin covers the request itself on a loaded, race-instrumented
		// machine.
		margin = 2 * time.Second
		// apiserverTimeout bounds the apiserver's own answer without etcd,
		// which otherwise takes its default --request-timeout of 60s.
		apiserverTimeout = 5 * time.Second
	)
	cp := framework.Start(t, framework.ControlPlaneConfig{ExtraAPIServerArgs: []string{"--request-timeout=" + apiserverTimeout.String()}})
	ctx := t.Context()
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	seedConfigMaps(t, cs, ns, "cm", 5)
	args := []string{"--etcd-servers=" + cp.EtcdEndpoint, "--consistent-read-timeout=" + timeout.String()}
	pass := newRawClient(t, framework.StartListproxy(t, cp, args...).Config())
	reject := newRawClient(t, framework.StartListproxy(t, cp, append(args, "--consistent-read-fallback=reject")...).Config())
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	waitServed(ctx, t, pass, path, url.Values{})
	waitServed(ctx, t, reject, path, url.Values{})
	// Secrets are cached but never read consistently before etcd stops: their
	// first consistent read must verify the etcd prefix, which cannot be done.
	// One secret exists, so the prefix would be verifiable with etcd up (an
	// empty resource is never verified and its consistent reads pass through).
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unproven"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unproven := "/api/v1/namespaces/" + ns + "/secrets"
	waitServed(ctx, t, reject, unproven, url.Values{"resourceVersion": {"0"}})

	if err := cp.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	etcdUp := false
	defer func() {
		if !etcdUp { // leave the control plane whole for its cleanup
			_ = cp.StartEtcd(ctx)
		}
	}()

	for _, tc := range []struct{ name, path string }{
		{"reject", path},
		{"reject_first_consistent_read", unproven},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p, err := getListAnswer(ctx, reject, tc.path, url.Values{})
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("answered in %v: HTTP %d (served from %q) %q", elapsed.Round(time.Millisecond), p.code, p.servedFrom, p.status.Message)
			if p.code != http.StatusTooManyRequests || p.status.Reason != metav1.StatusReasonTooManyRequests {
				t.Errorf("HTTP %d reason %q, want 429 TooManyRequests", p.code, p.status.Reason)
			}
			if s, err := strconv.Atoi(p.header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("Retry-After %q, want a positive number of seconds", p.header.Get("Retry-After"))
			}
			if elapsed > timeout+margin {
				t.Errorf("answered after %v; the timeout is %v", elapsed, timeout)
			}
		})
	}

	t.Run("pass_through", func(t *testing.T) {
		// The apiserver answers as it can without etcd (here: its timeout
		// error after apiserverTimeout); listproxy's share of the time is
		// what the freshness histogram records.
		metrics := pass.base + "/metrics"
		before := framework.Scrape(t, nil, metrics)
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout+apiserverTimeout+margin)
		defer cancel()
		code, hdr, body, err := pass.get(rctx, path, url.Values{}, acceptJSON)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("no answer in %v: %v", elapsed, err)
		}
		t.Logf("answered in %v: HTTP %d (served from %q): %.200s", elapsed.Round(time.Millisecond), code, hdr.Get(headerServedFrom), body)
		if got := hdr.Get(headerServedFrom); got != "apiserver" {
			t.Errorf("served from %q, want apiserver", got)
		}
		after := framework.Scrape(t, nil, metrics)
		const waits = "listproxy_freshness_wait_duration_seconds"
		if n := after.Sum(waits+"_count") - before.Sum(waits+"_count"); n != 1 {
			t.Errorf("%v freshness waits recorded, want 1", n)
		}
		if n := fallbackCount(after) - fallbackCount(before); n != 1 {
			t.Errorf("%v fallbacks counted in listproxy_freshness_consistent_reads_total, want 1", n)
		}
		bound := fmt.Sprintf(`le="%g"`, (timeout + margin).Seconds())
		if !after.Has(waits+"_bucket", bound) {
			t.Fatalf("%s has no bucket %s", waits, bound)
		}
		if slow := after.Sum(waits+"_count") - after.Sum(waits+"_bucket", bound); slow > 0 {
			t.Errorf("%v consistent reads waited longer than %v for their freshness proof", slow, timeout+margin)
		}
	})

	t.Run("rv0_from_snapshot", func(t *testing.T) {
		for name, c := range map[string]rawClient{"apiserver fallback": pass, "reject fallback": reject} {
			p, err := getListAnswer(ctx, c, path, url.Values{"resourceVersion": {"0"}})
			if err != nil {
				t.Fatal(err)
			}
			if p.code != http.StatusOK || p.servedFrom != "snapshot" || len(p.items) != 5 {
				t.Errorf("%s: resourceVersion=0 LIST: HTTP %d from %q with %d items, want 200 from snapshot with 5", name, p.code, p.servedFrom, len(p.items))
			}
		}
	})

	if err := cp.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	etcdUp = true
	restarted := time.Now()

	t.Run("recovered", func(t *testing.T) {
		// A write acked by the apiserver (once it has reconnected to etcd)
		// must show in every consistent LIST served from a snapshot after it.
		var created *corev1.ConfigMap
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}
			var err error
			created, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) { // an earlier attempt timed out but happened
				created, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
			}
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the apiserver cannot write after etcd restarted: %v", err)
		}
		t.Logf("apiserver writes again %v after etcd restarted", time.Since(restarted).Round(time.Millisecond))
		for name, c := range map[string]rawClient{"apiserver fallback": pass, "reject fallback": reject} {
			var p listAnswer
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				p, err = getListAnswer(ctx, c, path, url.Values{})
				return err == nil && p.code == http.StatusOK && p.servedFrom == "snapshot", nil
			})
			if err != nil {
				t.Errorf("%s: consistent LISTs not served from snapshots again: %v", name, err)
				continue
			}
			t.Logf("%s: consistent reads served from snapshots %v after etcd restarted", name, time.Since(restarted).Round(time.Millisecond))
			if !slices.Contains(namesOf(p.items), created.Name) {
				t.Errorf("%s: consistent LIST at resourceVersion %s misses %s created at %s", name, p.meta.ResourceVersion, created.Name, created.ResourceVersion)
			}
		}
	})
}

// fallbackCount is the number of consistent reads whose freshness was not
// proven in time.
func fallbackCount(m framework.Metrics) float64 {
	return m.Sum("listproxy_freshness_consistent_reads_total", `outcome="probe_failed"`) +
		m.Sum("listproxy_freshness_consistent_reads_total", `outcome="progress_timeout"`) +
		m.Sum("listproxy_freshness_consistent_reads_total", `outcome="snapshot_timeout"`)
}

// ---------------------------------------------------------------------------
// 5. Probe coalescing.

// TestProbeCoalescing sends 100 consistent LISTs at once: they share a
// handful of etcd revision probes instead of one each.
func TestProbeCoalescing(t *testing.T) {
	const (
		ns        = "coalescing"
		readers   = 100
		maxProbes = 10
	)
	cp, ctx := startWithNamespace(t, ns, 0)
	seedConfigMaps(t, cp.Clientset(framework.UserAdmin), ns, "cm", 20)
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	cfg := lp.Config()
	cfg.Transport = &http.Transport{MaxIdleConnsPerHost: readers}
	c := newRawClient(t, cfg)
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	waitServed(ctx, t, c, path, url.Values{})

	// burst sends n consistent LISTs at once, on connections opened
	// beforehand so that they arrive together.
	burst := func() (served int) {
		var wg sync.WaitGroup
		var ok atomic.Int64
		startGate := make(chan struct{})
		for range readers {
			wg.Go(func() {
				<-startGate
				p, err := getListAnswer(ctx, c, path, url.Values{})
				if err == nil && p.code == http.StatusOK && p.servedFrom == "snapshot" && len(p.items) == 20 {
					ok.Add(1)
				}
			})
		}
		close(startGate)
		wg.Wait()
		return int(ok.Load())
	}
	burst() // opens the connections

	before := framework.Scrape(t, nil, lp.URL+"/metrics")
	start := time.Now()
	served := burst()
	elapsed := time.Since(start)
	after := framework.Scrape(t, nil, lp.URL+"/metrics")
	probes := after.Sum("listproxy_freshness_probes_total") - before.Sum("listproxy_freshness_probes_total")
	waiters := after.Sum("listproxy_freshness_probe_waiters_total") - before.Sum("listproxy_freshness_probe_waiters_total")

	t.Logf("%d consistent LISTs in %v: %d served from snapshots, %v probes for %v waiters (%.1f LISTs per probe)",
		readers, elapsed.Round(time.Millisecond), served, probes, waiters, waiters/max(probes, 1))
	if served != readers {
		t.Errorf("%d of %d consistent LISTs served from snapshots", served, readers)
	}
	if waiters != readers {
		t.Errorf("%v probe waiters, want %d (one per consistent LIST)", waiters, readers)
	}
	if probes < 1 || probes > maxProbes {
		t.Errorf("%v etcd probes for %d concurrent consistent LISTs, want 1 to %d", probes, readers, maxProbes)
	}
}

// An empty resource proves nothing about its etcd prefix: while it is
// empty its consistent reads are proven through the apiserver instead,
// whatever the prefix, and served from the snapshot; once it holds an
// object they are proven with etcd under the right prefix, and pass
// through under a wrong one.
func TestEmptyResourceDoesNotVerifyPrefix(t *testing.T) {
	const ns = "emptyprefix"
	cp, ctx := startWithNamespace(t, ns, 0)
	cs := cp.Clientset(framework.UserAdmin)
	// Nothing creates podtemplates: the resource is empty cluster-wide.
	wrongLP := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint,
		"--etcd-resource-prefix=podtemplates=/registry/nothing-here/")
	rightLP := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	wrong, right := newRawClient(t, wrongLP.Config()), newRawClient(t, rightLP.Config())
	path := "/api/v1/podtemplates"
	for _, c := range []rawClient{wrong, right} {
		waitServed(ctx, t, c, path, url.Values{"resourceVersion": {"0"}})
	}
	for name, lp := range map[string]*framework.Listproxy{"wrong_prefix": wrongLP, "right_prefix": rightLP} {
		p, err := getListAnswer(ctx, newRawClient(t, lp.Config()), path, url.Values{})
		if err != nil || p.code != http.StatusOK {
			t.Fatalf("%s: consistent read: HTTP %d, %v", name, p.code, err)
		}
		if p.servedFrom != "snapshot" {
			t.Errorf("%s: consistent read of an empty resource served from %q, want snapshot (proven through the apiserver)", name, p.servedFrom)
		}
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		if proofs := m.Sum("listproxy_freshness_apiserver_proofs_total", `resource="podtemplates"`); proofs < 1 {
			t.Errorf("%s: %v proofs of podtemplates through the apiserver, want at least 1", name, proofs)
		}
	}

	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "t1"},
		Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}
	if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every consistent read after the write sees it, whoever answers.
	for name, c := range map[string]rawClient{"wrong_prefix": wrong, "right_prefix": right} {
		p, err := getListAnswer(ctx, c, path, url.Values{})
		if err != nil || p.code != http.StatusOK || len(p.items) != 1 {
			t.Errorf("%s: consistent read after a create: HTTP %d, %d items, %v; want the new object", name, p.code, len(p.items), err)
		}
	}
	waitServed(ctx, t, right, path, url.Values{})
	for range 3 {
		if p, err := getListAnswer(ctx, wrong, path, url.Values{}); err != nil || p.servedFrom != "apiserver" {
			t.Errorf("wrong prefix: consistent read served from %q (%v), want apiserver", p.servedFrom, err)
		}
	}
}

// Once etcd compacts a revision, listproxy stops serving it even while it
// still holds its snapshot: an exact read answers the apiserver's 410, and
// a continue token pinned at it answers 410 with a token to continue
// inconsistently, as the apiserver's own token would.
func TestCompactedRevisionNotServed(t *testing.T) {
	const ns = "compactedrv"
	cp, ctx := startWithNamespace(t, ns, 0)
	cs := cp.Clientset(framework.UserAdmin)
	seedConfigMaps(t, cs, ns, "cm", 10)
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())
	apic := newRawClient(t, cp.AdminConfig)
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	waitServed(ctx, t, lpc, path, url.Values{})

	first, err := getListAnswer(ctx, lpc, path, url.Values{"limit": {"3"}})
	if err != nil || first.code != http.StatusOK || first.servedFrom != "snapshot" || first.meta.Continue == "" {
		t.Fatalf("first page: HTTP %d from %q, continue %q, %v", first.code, first.servedFrom, first.meta.Continue, err)
	}
	rv := first.meta.ResourceVersion
	exact := url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}
	if p, err := getListAnswer(ctx, lpc, path, exact); err != nil || p.code != http.StatusOK {
		t.Fatalf("exact read at %s before compaction: HTTP %d, %v", rv, p.code, err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CompactEtcd(ctx, []string{cp.EtcdEndpoint}, true); err != nil {
		t.Fatal(err)
	}

	// Both learn of the compaction by polling etcd (listproxy every 10s,
	// the apiserver's watch cache every 15s).
	var lpExact, apiExact, cont listAnswer
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if lpExact, err = getListAnswer(ctx, lpc, path, exact); err != nil {
			return false, err
		}
		if apiExact, err = getListAnswer(ctx, apic, path, exact); err != nil {
			return false, err
		}
		if cont, err = getListAnswer(ctx, lpc, path, url.Values{"limit": {"3"}, "continue": {first.meta.Continue}}); err != nil {
			return false, err
		}
		return lpExact.code != http.StatusOK && apiExact.code != http.StatusOK && cont.code != http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("after compaction: exact read HTTP %d from %q (apiserver %d), continue HTTP %d from %q; want 410s: %v",
			lpExact.code, lpExact.servedFrom, apiExact.code, cont.code, cont.servedFrom, err)
	}
	if lpExact.code != apiExact.code || lpExact.status.Reason != apiExact.status.Reason || lpExact.status.Message != apiExact.status.Message {
		t.Errorf("exact read at a compacted revision: listproxy %d %s %q, apiserver %d %s %q",
			lpExact.code, lpExact.status.Reason, lpExact.status.Message, apiExact.code, apiExact.status.Reason, apiExact.status.Message)
	}
	if cont.code != http.StatusGone || cont.status.Reason != metav1.StatusReasonExpired || cont.status.Continue == "" {
		t.Errorf("continue at a compacted revision: HTTP %d %s, continue %q; want 410 Expired with a token", cont.code, cont.status.Reason, cont.status.Continue)
	}
}

// A legacy exact read (resourceVersion=N with limit, no match: what a
// reflector relists with after a paginated list) at an N newer than the
// store has seen is served from the snapshot of the last change at or before
// N, proven with etcd, rather than sent to the apiserver.
func TestLegacyExactNewerThanStore(t *testing.T) {
	const ns = "legacyexact"
	cp, ctx := startWithNamespace(t, ns, 0)
	cs := cp.Clientset(framework.UserAdmin)
	seedConfigMaps(t, cs, ns, "cm", 8)
	lpc := newRawClient(t, framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint).Config())
	apic := newRawClient(t, cp.AdminConfig)
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	waitServed(ctx, t, lpc, path, url.Values{})

	// A write to another resource moves etcd's revision past everything
	// the configmaps store has seen.
	secret, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bump"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"resourceVersion": {secret.ResourceVersion}, "limit": {"3"}}
	lp, err := getListAnswer(ctx, lpc, path, q)
	if err != nil || lp.code != http.StatusOK {
		t.Fatalf("legacy exact read at %s: HTTP %d, %v", secret.ResourceVersion, lp.code, err)
	}
	if lp.servedFrom != "snapshot" {
		t.Errorf("legacy exact read newer than the store served from %q, want snapshot (proven with etcd)", lp.servedFrom)
	}
	api, err := getListAnswer(ctx, apic, path, q)
	if err != nil || api.code != http.StatusOK {
		t.Fatalf("apiserver: HTTP %d, %v", api.code, err)
	}
	if lp.meta.ResourceVersion != api.meta.ResourceVersion || strings.Join(namesOf(lp.items), ",") != strings.Join(namesOf(api.items), ",") ||
		(lp.meta.Continue == "") != (api.meta.Continue == "") {
		t.Errorf("listproxy at %s: %v continue %v; apiserver at %s: %v continue %v",
			lp.meta.ResourceVersion, namesOf(lp.items), lp.meta.Continue != "", api.meta.ResourceVersion, namesOf(api.items), api.meta.Continue != "")
	}
}

// TestLinearizableReadsWithoutEtcd is TestLinearizableReads with listproxy
// given no etcd address at all, as on a managed cluster: freshness is proven
// through the apiserver (--consistent-proof=auto selects it). The resource
// (configmaps) is small, so its probe is the state probe: a busy one is
// proven by the store's own feed (the fast path) once the state differs; a
// quiet one, written once a second, mostly by the state probe, or, with
// state probes off, by auxiliary watches.
func TestLinearizableReadsWithoutEtcd(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	lp := framework.StartListproxy(t, cp)
	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
	const proofs = "listproxy_freshness_apiserver_proofs_total"

	t.Run("busy", func(t *testing.T) {
		before := scrape()
		checkLinearizable(t, cp, lp, linRun{namespace: "busy", duration: 20 * time.Second, writers: linWriters})
		after := scrape()
		fast := after.Sum(proofs, `resource="configmaps"`, `path="fast"`) - before.Sum(proofs, `resource="configmaps"`, `path="fast"`)
		aux := after.Sum(proofs, `resource="configmaps"`, `path="aux"`) - before.Sum(proofs, `resource="configmaps"`, `path="aux"`)
		t.Logf("proofs: %.0f fast, %.0f through auxiliary watches", fast, aux)
		if fast == 0 {
			t.Errorf("no proof took the fast path on a busy resource")
		}
	})
	t.Run("quiet", func(t *testing.T) {
		before := scrape()
		checkLinearizable(t, cp, lp, linRun{namespace: "quiet", duration: 20 * time.Second, quiet: true})
		after := scrape()
		state := after.Sum(proofs, `resource="configmaps"`, `path="state"`) - before.Sum(proofs, `resource="configmaps"`, `path="state"`)
		t.Logf("proofs by state probes: %.0f", state)
		if state == 0 {
			t.Errorf("no proof took the state probe on a small quiet resource")
		}
	})
	t.Run("quiet_without_state_probes", func(t *testing.T) {
		lp := framework.StartListproxy(t, cp, "--consistent-state-proof-max-objects=0")
		scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
		before := scrape()
		checkLinearizable(t, cp, lp, linRun{namespace: "quiet-aux", duration: 20 * time.Second, quiet: true})
		after := scrape()
		aux := after.Sum(proofs, `resource="configmaps"`, `path="aux"`) - before.Sum(proofs, `resource="configmaps"`, `path="aux"`)
		watches := after.Sum("listproxy_freshness_aux_watches_total", `resource="configmaps"`, `result="bookmark"`) -
			before.Sum("listproxy_freshness_aux_watches_total", `resource="configmaps"`, `result="bookmark"`)
		t.Logf("proofs through auxiliary watches: %.0f, auxiliary watches ended by their bookmark: %.0f", aux, watches)
		if aux == 0 {
			t.Errorf("no proof went through an auxiliary watch on a quiet resource")
		}
	})
}

// churnSecret updates one secret of namespace every interval while running.
func churnSecret(ctx context.Context, t *testing.T, cs kubernetes.Interface, namespace string, interval time.Duration, running func() bool) {
	secrets := cs.CoreV1().Secrets(namespace)
	s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "churn"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create secret: %v", err)
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; running(); i++ {
		<-tick.C
		s.StringData = map[string]string{"n": strconv.Itoa(i)}
		if s, err = secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update secret: %v", err)
			return
		}
	}
}
