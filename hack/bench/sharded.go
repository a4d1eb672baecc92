package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/big"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
)

// The "sharded" scenario asks what splitting one informer of every pod
// into shardCount informers of one shard each (KEP-5866 shard selectors:
// shardSelector=shardRange(object.metadata.uid, 'S', 'E'), equal ranges of
// the 64-bit FNV-1a hash space) costs listproxy, which serves them from
// its snapshots whatever the apiserver's ShardedListAndWatch gate: its CPU
// for the sync and for a churn of writes, against one unsharded informer
// of the same pods, and whether the apiserver sees any request for them.
const (
	shardCount = 8
	// shardedCPUMax is the most the sharded informers may cost listproxy,
	// as a multiple of what the unsharded one costs it.
	shardedCPUMax = 1.2
	// shardedFanoutMax is the most changes the sharded informers'
	// watchers may read per change: each change is its shard watcher's
	// (a watcher woken by every change would make it shardCount).
	shardedFanoutMax = 1.1
	// shardedWriteRate and shardedChurn are the churn once the informers
	// synced: updates of existing pods (an annotation). Not tuned: 30 s
	// at 20 writes/s gives 600 changes per phase.
	shardedWriteRate = 20
	shardedChurn     = 30 * time.Second
	// shardedBase is how long the same writes run alone, with none of the
	// scenario's informers, to measure what listproxy spends following
	// them (its stores), which is no informer's cost.
	shardedBase = 10 * time.Second
	// shardedSyncTimeout bounds an informer's sync, shardedSeenTimeout
	// the wait, after the last write, until the informers received every
	// write.
	shardedSyncTimeout = 5 * time.Minute
	shardedSeenTimeout = time.Minute
)

// hashSpace is 2^64, the exclusive top of the shard hash space.
var hashSpace = new(big.Int).Lsh(big.NewInt(1), 64)

// shardRange is [start, end) of the 64-bit hash space.
type shardRange struct{ start, end *big.Int }

// shardRanges splits the hash space [0, 2^64) into n consecutive ranges
// of equal size (within one) that cover it: range i is
// [i·2^64/n, (i+1)·2^64/n).
func shardRanges(n int) []shardRange {
	bound := func(i int) *big.Int {
		b := new(big.Int).Mul(hashSpace, big.NewInt(int64(i)))
		return b.Quo(b, big.NewInt(int64(n)))
	}
	rs := make([]shardRange, n)
	for i := range rs {
		rs[i] = shardRange{start: bound(i), end: bound(i + 1)}
	}
	return rs
}

// hexBound is a bound as shard selectors write it: 0x and 16 lowercase
// hex digits, 0x10000000000000000 for 2^64.
func hexBound(b *big.Int) string { return fmt.Sprintf("0x%016x", b) }

// selector is r's shard selector on the uid.
func (r shardRange) selector() string {
	return fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", hexBound(r.start), hexBound(r.end))
}

// contains reports whether hash h is in r.
func (r shardRange) contains(h uint64) bool {
	x := new(big.Int).SetUint64(h)
	return r.start.Cmp(x) <= 0 && x.Cmp(r.end) < 0
}

// uidHash is the hash a shard selector on object.metadata.uid compares
// with its ranges: 64-bit FNV-1a of the uid.
func uidHash(uid types.UID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return h.Sum64()
}

// shardInformers are client-go pod informers of every namespace with the
// client's defaults (watch-list), informer i reading shard i of ranges
// (no shard selector when there is one range), each through its own
// connections.
type shardInformers struct {
	ranges    []shardRange
	factories []informers.SharedInformerFactory
	infs      []cache.SharedIndexInformer
	cancel    context.CancelFunc
	closeOnce sync.Once
	read      atomic.Int64 // response body bytes
	updates   atomic.Int64 // update notifications the informers received
	mu        sync.Mutex
	seen      map[string]bool // resourceVersions of those updates
}

// startShardInformers starts an informer per range against t.
func (e *env) startShardInformers(ctx context.Context, t *target, ranges []shardRange) (*shardInformers, error) {
	ctx, cancel := context.WithCancel(ctx)
	si := &shardInformers{ranges: ranges, cancel: cancel, seen: map[string]bool{}}
	for _, r := range ranges {
		cs, err := kubernetes.NewForConfig(e.restConfigFor(t, &si.read))
		if err != nil {
			si.close()
			return nil, err
		}
		opts := []informers.SharedInformerOption{informers.WithTransform(stripPod)}
		if len(ranges) > 1 {
			sel := r.selector()
			opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.ShardSelector = sel }))
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: si.updated}); err != nil {
			si.close()
			return nil, err
		}
		si.factories = append(si.factories, f)
		si.infs = append(si.infs, inf)
	}
	for _, f := range si.factories {
		f.Start(ctx.Done())
	}
	return si, nil
}

func (si *shardInformers) updated(_, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	si.updates.Add(1)
	si.mu.Lock()
	si.seen[p.ResourceVersion] = true
	si.mu.Unlock()
}

// waitSynced waits until every informer has synced.
func (si *shardInformers) waitSynced(ctx context.Context) error {
	timeout := time.After(shardedSyncTimeout)
	for i, inf := range si.infs {
		select {
		case <-inf.HasSyncedChecker().Done():
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("informer %d of %d not synced after %s", i, len(si.infs), shardedSyncTimeout)
		}
	}
	return nil
}

// waitSeen waits until the informers together have received the update
// of every write in sent (by resourceVersion), or shardedSeenTimeout has
// passed.
func (si *shardInformers) waitSeen(ctx context.Context, sent map[string]time.Time) error {
	deadline := time.Now().Add(shardedSeenTimeout)
	for {
		si.mu.Lock()
		missing := 0
		for rv := range sent {
			if !si.seen[rv] {
				missing++
			}
		}
		si.mu.Unlock()
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the informers received %d of %d writes' updates within %s of the last", len(sent)-missing, len(sent), shardedSeenTimeout)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func (si *shardInformers) stores() []cache.Store {
	out := make([]cache.Store, len(si.infs))
	for i, inf := range si.infs {
		out[i] = inf.GetStore()
	}
	return out
}

// close stops the informers; it may be called again.
func (si *shardInformers) close() {
	si.closeOnce.Do(func() {
		si.cancel()
		for _, f := range si.factories {
			f.Shutdown()
		}
	})
}

// shardStoresDiff is the first way the informers' stores, store i of
// shard ranges[i], are not the apiserver's list want split into the
// shards, or nil: every listed pod at its resourceVersion in exactly one
// store, that of the range its uid hashes into, and nothing else.
func shardStoresDiff(stores []cache.Store, ranges []shardRange, want listView) error {
	shardOf := map[string]int{} // pod key → the store holding it
	rvs := map[string]string{}
	for i, s := range stores {
		for _, obj := range s.List() {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return fmt.Errorf("informer %d holds a %T", i, obj)
			}
			key := p.Namespace + "/" + p.Name
			if j, dup := shardOf[key]; dup {
				return fmt.Errorf("pod %s is in the stores of informer %d and informer %d", key, j, i)
			}
			shardOf[key], rvs[key] = i, p.ResourceVersion
			if h := uidHash(p.UID); !ranges[i].contains(h) {
				return fmt.Errorf("informer %d (%s) holds pod %s, whose uid %s hashes to %#016x, outside its range", i, ranges[i].selector(), key, p.UID, h)
			}
		}
	}
	if len(rvs) != len(want.items) {
		return fmt.Errorf("the informers hold %d pods together, the apiserver lists %d at RV %s", len(rvs), len(want.items), want.rv)
	}
	for _, o := range want.items {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		key := m.GetNamespace() + "/" + m.GetName()
		rv, ok := rvs[key]
		if !ok {
			return fmt.Errorf("no informer holds pod %s, listed at RV %s", key, want.rv)
		}
		if rv != m.GetResourceVersion() {
			return fmt.Errorf("informer %d has pod %s at RV %s, the apiserver %s (list at RV %s)", shardOf[key], key, rv, m.GetResourceVersion(), want.rv)
		}
	}
	return nil
}

// auditTail reads what the apiserver's audit log gains from the moment it
// is opened. It keeps the log open, so that a rotation (the apiserver's
// at 100 MB) loses nothing: the rest of the old file is read through it,
// then the new file.
type auditTail struct {
	path string
	f    *os.File
}

func openAuditTail(path string) (*auditTail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &auditTail{path: path, f: f}, nil
}

// close closes the log; read-only, so a Close error cannot lose data.
func (a *auditTail) close() { _ = a.f.Close() }

// events returns the events written since the tail was opened.
func (a *auditTail) events() ([]auditv1.Event, error) {
	evs, err := readAuditEvents(a.f)
	if err != nil {
		return nil, err
	}
	was, err := a.f.Stat()
	if err != nil {
		return nil, err
	}
	now, err := os.Stat(a.path)
	if err != nil {
		return nil, err
	}
	if os.SameFile(was, now) {
		return evs, nil
	}
	f, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only, as above
	more, err := readAuditEvents(f)
	return append(evs, more...), err
}

// readAuditEvents decodes the JSON lines of r, leaving out a last line
// still being written.
func readAuditEvents(r io.Reader) ([]auditv1.Event, error) {
	var evs []auditv1.Event
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("audit log: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return evs, fmt.Errorf("audit log: %w", err)
		}
		evs = append(evs, ev)
	}
}

// podReads counts the LISTs and WATCHes of pods among audit events evs,
// each request once (a watch has an event when its response starts and
// one when it ends): own are listproxy's for its stores, proofs and
// consistency checks (user agent "listproxy" or "listproxy/…", no
// shardSelector); other are the rest, such as a client's request passed
// through, the first of which first describes.
func podReads(evs []auditv1.Event) (own, other int, first string) {
	seen := map[types.UID]bool{}
	for _, ev := range evs {
		if ev.Verb != "list" && ev.Verb != "watch" {
			continue
		}
		if r := ev.ObjectRef; r == nil || r.Resource != "pods" || r.APIGroup != "" || r.Subresource != "" {
			continue
		}
		if seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		listproxy := ev.UserAgent == "listproxy" || strings.HasPrefix(ev.UserAgent, "listproxy/")
		if listproxy && !strings.Contains(ev.RequestURI, "shardSelector=") {
			own++
			continue
		}
		other++
		if first == "" {
			first = fmt.Sprintf("%s %s (%s)", ev.Verb, ev.RequestURI, ev.UserAgent)
		}
	}
	return own, other, first
}

// shardedPhase is one column of the scenario: informers of len(ranges)
// shards through listproxy.
type shardedPhase struct {
	name   string
	ranges []shardRange
	s      *series // sync times, bytes, answers and checks
	// syncCPU is listproxy's CPU for each sync, until it settled after
	// the last informer synced; warmCPU the same for the warm-up's.
	syncCPU []float64
	warmCPU float64
	// churnCPU is listproxy's CPU from the first write of the churn until
	// it settled after the informers received the last; writes and
	// writeRate are the churn's writes and their achieved rate.
	churnCPU  float64
	writes    int
	writeRate float64
	// events are the MODIFIED events listproxy sent during the churn,
	// updates the update notifications the informers received.
	events float64
	// read is the changes the watchers read during the churn
	// (listproxy_watch_changes_read_total): per change, the fan-out.
	read    float64
	updates int64
	// ownReads and otherReads are the apiserver's LISTs and WATCHes of
	// pods during the phase (podReads), summed over its repetitions;
	// firstOther describes the first other.
	ownReads, otherReads int
	firstOther           string
}

// sharded is the "sharded" scenario: one client-go pod informer (defaults:
// watch-list) of every pod through listproxy, then shardCount informers of
// one shard each (shardSelector on the uid, equal ranges covering the hash
// space), BENCH_REPS times in alternating order; each sync's listproxy CPU
// is measured until listproxy settled, and on the last repetition a churn
// of shardedWriteRate pod updates per second for shardedChurn until the
// informers received every write. The informers' stores must hold every
// pod the apiserver lists, each exactly once and in its shard, at its
// resourceVersion; every request must be served from a snapshot and the
// apiserver must see no LIST or WATCH of pods but listproxy's own. Target:
// the sharded informers cost listproxy at most shardedCPUMax times the
// unsharded one (one sync plus the churn, the writes' own cost, measured
// with the writes alone, subtracted).
func (b *bench) sharded(ctx context.Context) error {
	name := fmt.Sprintf("sharded informers: 1 vs %d pod informers (watch-list) through listproxy, %d writes/s", shardCount, shardedWriteRate)
	logf("scenario: %s (%d reps, churn %s on the last)", name, b.cfg.reps, shardedChurn)
	un := &shardedPhase{name: "unsharded", ranges: shardRanges(1), s: b.newSeries(b.env.proxied)}
	sh := &shardedPhase{name: fmt.Sprintf("%d shards", shardCount), ranges: shardRanges(shardCount), s: b.newSeries(b.env.proxied)}

	// What listproxy spends following the writes with no scenario informer.
	base := sampler{t: b.env.proxied, idleRate: b.idleProxied}
	runtime.GC()
	settle(ctx, b.idleProxied, b.env.proxied)
	base.startInterval()
	sent, _ := b.writesAt(ctx, shardedWriteRate, shardedBase, "sharded")
	settle(ctx, b.idleProxied, b.env.proxied)
	base.endInterval()
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(sent) == 0 {
		return fmt.Errorf("sharded: no write succeeded")
	}
	basePerWrite := base.seconds() / float64(len(sent))
	logf("  writes alone: listproxy %s CPU per write", ms(basePerWrite))

	for _, ph := range []*shardedPhase{un, sh} {
		if err := b.shardedWarm(ctx, ph); err != nil {
			return err
		}
	}
	for i := range b.cfg.reps {
		order := []*shardedPhase{un, sh}
		if i%2 == 1 {
			order = []*shardedPhase{sh, un}
		}
		for _, ph := range order {
			if err := b.shardedRun(ctx, ph, false); err != nil {
				return err
			}
		}
	}
	// The churns come after every measured sync: a sync after the other
	// phase's churn would compress again the objects it changed and their
	// neighbours, which is the writes' cost, not the phase's.
	for _, ph := range []*shardedPhase{un, sh} {
		if err := b.shardedRun(ctx, ph, true); err != nil {
			return err
		}
	}

	ds, ps := un.side(basePerWrite), sh.side(basePerWrite)
	events := func(ph *shardedPhase) string {
		n := float64(max(ph.writes, 1))
		return fmt.Sprintf("%.2f read by watchers, %.2f sent, %.2f received", ph.read/n, ph.events/n, float64(ph.updates)/n)
	}
	note := fmt.Sprintf("first column: one pod informer through listproxy, no shard selector; second: %d informers, each with the shardSelector of one of %d equal ranges covering the uid hash space (the first: %s); "+
		"client-go defaults (JSON, watch-list), one connection each; wall: until every informer of the phase synced; CPU/req: listproxy's per phase, one sync (mean of %d) plus a churn of %d writes (%.0f/s achieved) until the informers received the last, "+
		"the writes' own cost subtracted (%s per write, measured with the writes alone); sync %s vs %s (%.2f×); churn %s vs %s (%.2f×; before the subtraction %s vs %s); "+
		"the warm-up syncs before them, not in the ratio: %s vs %s; "+
		"per change: changes read by watchers (listproxy_watch_changes_read_total, the fan-out), events sent (listproxy_watch_events_total MODIFIED), updates the informers received: %s vs %s; "+
		"apiserver LISTs/WATCHes of pods during the phases (audit log), not listproxy's own: %d vs %d (listproxy's own: %d vs %d); "+
		"content: the informers' stores together, once the writes stopped, against the apiserver's LIST: every pod once, in its shard, at its resourceVersion",
		shardCount, shardCount, sh.ranges[0].selector(),
		b.cfg.reps, sh.writes, sh.writeRate, ms(basePerWrite),
		ms(float64(ds.Extra["sync_cpu_s"])), ms(float64(ps.Extra["sync_cpu_s"])), ratio(float64(ps.Extra["sync_cpu_s"]), float64(ds.Extra["sync_cpu_s"])),
		ms(float64(ds.Extra["churn_net_cpu_s"])), ms(float64(ps.Extra["churn_net_cpu_s"])), ratio(float64(ps.Extra["churn_net_cpu_s"]), float64(ds.Extra["churn_net_cpu_s"])),
		ms(un.churnCPU), ms(sh.churnCPU), ms(un.warmCPU), ms(sh.warmCPU),
		events(un), events(sh),
		un.otherReads, sh.otherReads, un.ownReads, sh.ownReads)
	b.addRow(name, ds, ps, targetSpec{}, note)

	least := minCPU.Seconds()
	got := ratio(ps.CPUPerRequest, ds.CPUPerRequest)
	cpuText := fmt.Sprintf("%.2f× (%s vs %s)", got, ms(ps.CPUPerRequest), ms(ds.CPUPerRequest))
	measured := ds.CPUTotal >= least && ps.CPUTotal >= least
	if !measured {
		cpuText = "not measured (under " + minCPU.String() + " of CPU)"
	}
	readsText := fmt.Sprintf("%d (unsharded: %d; listproxy's own meanwhile: %d, %d)", sh.otherReads, un.otherReads, sh.ownReads, un.ownReads)
	if sh.firstOther != "" {
		readsText += "; first: " + sh.firstOther
	}
	r := &b.report.Rows[len(b.report.Rows)-1]
	r.Checks = append(r.Checks,
		check{Name: fmt.Sprintf("listproxy CPU, %d sharded ÷ 1 unsharded", shardCount), Want: fmt.Sprintf("≤ %g×", shardedCPUMax),
			Got: num(got), Text: cpuText, Met: measured && got <= shardedCPUMax},
		check{Name: "changes read per change by the sharded informers' watchers", Want: fmt.Sprintf("≤ %g (its shard's watcher only)", shardedFanoutMax),
			Got: num(sh.read / float64(max(sh.writes, 1))), Text: events(sh), Met: sh.writes > 0 && sh.read/float64(sh.writes) <= shardedFanoutMax},
		check{Name: "apiserver LISTs/WATCHes of pods for the sharded informers", Want: "0 (listproxy's own watch shared)",
			Got: num(sh.otherReads), Text: readsText, Met: sh.otherReads == 0},
		check{Name: "unsharded informer from snapshots", Want: "all",
			Got: num(ds.Answers - ds.NotSnapshot), Text: fmt.Sprintf("%d/%d", ds.Answers-ds.NotSnapshot, ds.Answers), Met: ds.Answers > 0 && ds.NotSnapshot == 0},
		check{Name: "unsharded informer = apiserver", Want: "all equal",
			Got: num(ds.ContentMismatch), Text: fmt.Sprintf("%d/%d equal", ds.ContentChecked-ds.ContentMismatch, ds.ContentChecked), Met: ds.ContentChecked > 0 && ds.ContentMismatch == 0},
	)
	logf("  CPU per phase: unsharded %s, %d shards %s (%.2f×); events per change: unsharded %s, sharded %s; apiserver pod LISTs/WATCHes not listproxy's: %d vs %d",
		ms(ds.CPUPerRequest), shardCount, ms(ps.CPUPerRequest), got, events(un), events(sh), un.otherReads, sh.otherReads)
	return nil
}

// shardedWarm syncs ph's informers once, unmeasured, and stops them. The
// first gzipped watch-list of every pod compresses each pod once and
// caches it on the snapshot's entries, for the watch-lists after it: the
// measured syncs are those of informers restarting against a listproxy
// that served such a watch-list before, as a deployment's does.
func (b *bench) shardedWarm(ctx context.Context, ph *shardedPhase) error {
	sy, err := b.shardedSync(ctx, ph, "warm-up")
	if sy.si != nil {
		defer sy.si.close()
	}
	if err != nil {
		return err
	}
	ph.warmCPU = sy.cpu
	logf("  %s, warm-up: %d informers synced in %s, listproxy CPU %s", ph.name, len(ph.ranges), ms(sy.took.Seconds()), ms(ph.warmCPU))
	sy.si.close()
	_, err = b.watchesEnded(ctx, sy.before, len(ph.ranges))
	return err
}

// shardedSynced is what shardedSync measured.
type shardedSynced struct {
	// si are the informers, synced; the caller closes them.
	si *shardInformers
	// before is listproxy's metrics before they started.
	before framework.Metrics
	// took is the time from their start until every one synced; bytes
	// what they read meanwhile; cpu listproxy's CPU seconds from a
	// settled start to a settled end.
	took  time.Duration
	bytes int64
	cpu   float64
}

// shardedSync starts ph's informers and waits until they synced; what
// names the sync in errors.
func (b *bench) shardedSync(ctx context.Context, ph *shardedPhase, what string) (shardedSynced, error) {
	var sy shardedSynced
	lp := b.env.proxied
	runtime.GC()
	settle(ctx, b.idleProxied, lp)
	var err error
	if sy.before, err = scrape(ctx, lp); err != nil {
		return sy, err
	}
	cpu := sampler{t: lp, idleRate: b.idleProxied}
	cpu.startInterval()
	begin := time.Now()
	if sy.si, err = b.env.startShardInformers(ctx, lp, ph.ranges); err != nil {
		return sy, err
	}
	if err := sy.si.waitSynced(ctx); err != nil {
		return sy, fmt.Errorf("sharded, %s, %s: %w", ph.name, what, err)
	}
	sy.took = time.Since(begin)
	sy.bytes = sy.si.read.Load()
	settle(ctx, b.idleProxied, lp)
	cpu.endInterval()
	sy.cpu = cpu.seconds()
	return sy, nil
}

// shardedRun runs one repetition of phase ph: its informers start and
// sync (a measured sync), or, with churn, start and sync unmeasured and
// then pods are updated until the informers received every write; then
// their stores are checked and they stop.
func (b *bench) shardedRun(ctx context.Context, ph *shardedPhase, churn bool) error {
	lp := b.env.proxied
	// The apiserver's record of the phase, from before its informers
	// start.
	audit, err := openAuditTail(b.env.cp.AuditLogFile)
	if err != nil {
		return err
	}
	defer audit.close()
	sy, err := b.shardedSync(ctx, ph, "sync")
	if sy.si != nil {
		defer sy.si.close()
	}
	if err != nil {
		return err
	}
	si, before := sy.si, sy.before
	if !churn {
		ph.syncCPU = append(ph.syncCPU, sy.cpu)
		ph.s.durs = append(ph.s.durs, sy.took.Seconds())
		ph.s.bytes = append(ph.s.bytes, sy.bytes)
	}
	logf("  %s: %d informers synced in %s, listproxy CPU %s", ph.name, len(ph.ranges), ms(sy.took.Seconds()), ms(sy.cpu))

	if churn {
		evBefore, err := scrape(ctx, lp)
		if err != nil {
			return err
		}
		updatesBefore := si.updates.Load()
		c := sampler{t: lp, idleRate: b.idleProxied}
		c.startInterval()
		sent, rate := b.writesAt(ctx, shardedWriteRate, shardedChurn, "sharded")
		seenErr := si.waitSeen(ctx, sent)
		settle(ctx, b.idleProxied, lp)
		c.endInterval()
		evAfter, err := scrape(ctx, lp)
		if err != nil {
			return err
		}
		ph.churnCPU, ph.writes, ph.writeRate = c.seconds(), len(sent), rate
		ph.events = delta(evBefore, evAfter, "listproxy_watch_events_total", `type="MODIFIED"`)
		ph.read = delta(evBefore, evAfter, "listproxy_watch_changes_read_total")
		ph.updates = si.updates.Load() - updatesBefore
		if seenErr != nil {
			ph.s.noteCheck(seenErr)
		}
		logf("  %s: %d writes (%.0f/s), listproxy CPU %s; events sent %.0f, received %d", ph.name, len(sent), rate, ms(c.seconds()), ph.events, ph.updates)
	}

	// The apiserver's record of the phase, before the checks' own LISTs.
	evs, err := audit.events()
	if err != nil {
		return err
	}
	own, other, first := podReads(evs)
	ph.ownReads += own
	ph.otherReads += other
	if ph.firstOther == "" {
		ph.firstOther = first
	}

	// Off the clock: the stores against the apiserver's LIST.
	ranges := ph.ranges
	ph.s.noteCheck(converge(ctx, b.env.direct, fmt.Sprintf("%d informers' stores", len(ranges)), func(want listView) error {
		return shardStoresDiff(si.stores(), ranges, want)
	}))
	si.close()
	after, err := b.watchesEnded(ctx, before, len(ranges))
	if err != nil {
		return err
	}
	passed := delta(before, after, "listproxy_http_requests_total", `verb="list"`, `source="apiserver"`) +
		delta(before, after, "listproxy_http_requests_total", `verb="watch"`, `source="apiserver"`)
	served := initialWatchLists(after) - initialWatchLists(before)
	if len(ranges) > 1 {
		// Requests with a shardSelector that listproxy answered.
		served = delta(before, after, "listproxy_http_sharded_requests_total", `source="snapshot"`)
	}
	answers := max(len(ranges), int(served+passed))
	ph.s.answers += answers
	ph.s.notSnapshot += answers - int(served)
	logf("  %s: %.0f requests served from snapshots, %.0f passed through; apiserver LISTs/WATCHes of pods: %d not listproxy's, %d its own",
		ph.name, served, passed, other, own)
	return nil
}

// watchesEnded scrapes listproxy once the watches it served since before
// have ended and been counted (a request is counted in
// listproxy_http_requests_total, and one with a shardSelector in
// listproxy_http_sharded_requests_total, when its handler returns), and,
// with more than one shard, at least shards sharded requests have, for at
// most 10 s.
func (b *bench) watchesEnded(ctx context.Context, before framework.Metrics, shards int) (framework.Metrics, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := scrape(ctx, b.env.proxied)
		if err != nil {
			return nil, err
		}
		closed := after.Sum("listproxy_watch_open") <= before.Sum("listproxy_watch_open")
		counted := delta(before, after, "listproxy_http_requests_total", `verb="watch"`) >= delta(before, after, "listproxy_watch_served_total")
		sharded := shards == 1 || delta(before, after, "listproxy_http_sharded_requests_total") >= float64(shards)
		if (closed && counted && sharded) || time.Now().After(deadline) {
			return after, nil
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// side is the phase's column: CPU per request is its listproxy CPU per
// phase, a sync (the mean) plus the churn less the writes' own cost,
// basePerWrite each.
func (ph *shardedPhase) side(basePerWrite float64) side {
	sd := ph.s.side(len(ph.syncCPU))
	var syncTotal float64
	for _, c := range ph.syncCPU {
		syncTotal += c
	}
	syncMean := syncTotal / float64(max(1, len(ph.syncCPU)))
	churnNet := max(0, ph.churnCPU-basePerWrite*float64(ph.writes))
	sd.CPUPerRequest = syncMean + churnNet
	sd.CPUTotal = syncTotal + churnNet
	perWrite := func(x float64) num { return num(x / float64(max(1, ph.writes))) }
	sd.Extra = map[string]num{
		"informers":                   num(len(ph.ranges)),
		"warm_up_sync_cpu_s":          num(ph.warmCPU),
		"sync_cpu_s":                  num(syncMean),
		"churn_cpu_s":                 num(ph.churnCPU),
		"churn_net_cpu_s":             num(churnNet),
		"writes":                      num(ph.writes),
		"writes_per_s":                num(ph.writeRate),
		"events_sent_per_change":      perWrite(ph.events),
		"updates_received_per_change": perWrite(float64(ph.updates)),
		"apiserver_pod_reads_other":   num(ph.otherReads),
		"apiserver_pod_reads_own":     num(ph.ownReads),
	}
	return sd
}
