package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
)

// Scale-out: three listproxy replicas behind a connection-level balancer
// (what a ClusterIP Service does), sharing one continue-token key file, with
// real clients through the balancer — watch-list and LIST+WATCH informers,
// paginated walkers whose pages land on different replicas, consistent
// readers — while faults are injected: a rolling restart of every replica,
// a replica SIGKILLed, an apiserver restart, an etcd restart and an etcd
// compaction. `make test` runs each fault once; `make soak` runs the
// faults in a cycle for LISTPROXY_SOAK_DURATION and prints the same summary.
//
// LISTPROXY_SOAK_TOPOLOGY=ha (`make soak-ha`) runs the same replicas and
// clients on an HA control plane instead: a 3-member etcd, every member
// given to the replicas, and three kube-apiservers behind a probing TCP
// balancer, the replicas' upstream and the direct clients' address. Its
// faults are the HA ones (scaleHAFaults): the etcd leader killed and
// restarted, a kube-apiserver killed and restarted, another paused and
// resumed, the apiserver balancer dropping every connection; with the
// rolling restart, the SIGKILL and the compaction.

const (
	scaleReplicas  = 3
	scaleLinNS     = "scale-lin"  // consistent readers' keys
	scaleWalkNS    = "scale-walk" // walked and watched
	scaleLinKeys   = 10
	scaleWalkObjs  = 300
	scaleWalkLimit = 37
	scaleReaders   = 2
	scaleWalkers   = 2
	// Informers: watch-list (client-go's default) and LIST+WATCH.
	scaleWatchListInformers = 3
	scaleListWatchInformers = 1
	// scaleMaxRSS bounds each replica's peak resident set: the stores here
	// hold a few hundred small objects, so the bound is the process's
	// baseline with a wide margin.
	scaleMaxRSS = 512 << 20
	// scaleCPGrace: a 5xx within this long of a control-plane fault (or
	// while it lasts) is the outage the apiserver's own clients see.
	scaleCPGrace = 10 * time.Second
	// scaleLogged5xx is how many of the 5xx allowed during each fault kind
	// are logged.
	scaleLogged5xx = 3

	// scaleHAAPIServers is how many kube-apiservers the HA topology runs.
	scaleHAAPIServers = 3
	// scaleHADown is how long a killed etcd leader or kube-apiserver stays
	// down: the rest of the control plane serves alone meanwhile.
	scaleHADown = 5 * time.Second
	// scaleHAPauseHold is how long a paused kube-apiserver stays paused
	// before the replicas must serve while it still is: longer than an
	// HTTP/2 health check takes to drop a connection to it (a ping after
	// 30s without a frame, answered within 15s).
	scaleHAPauseHold = 50 * time.Second
	// scaleHAClientTimeout bounds each request of the direct clients on
	// the HA topology, whose connection may reach a paused kube-apiserver.
	scaleHAClientTimeout = 10 * time.Second
)

// scaleRun is one run's clients, counters and findings.
type scaleRun struct {
	t    *testing.T
	cp   *framework.ControlPlane
	ha   *framework.HA // the HA topology's control plane, else nil
	rs   *framework.ReplicaSet
	cs   kubernetes.Interface // direct, for writes and the oracle
	apic rawClient            // direct
	// lb reaches the replicas through the balancer, a new connection per
	// request, so that consecutive requests land on different replicas.
	lb *http.Client

	// cpFaultUntil is when the last control-plane fault (apiserver or etcd
	// outage) ended, or the far future while one lasts (unix nanoseconds).
	cpFaultUntil atomic.Int64

	// apiserverTurn picks the kube-apiserver the HA faults kill and pause
	// (the fault schedule's goroutine only).
	apiserverTurn int

	mu       sync.Mutex
	acked    map[string]int // scaleLinNS key -> highest value acknowledged, guarded by mu
	problems []string       // guarded by mu
	// byFault counts each fault kind's runs, survivals and the 5xx allowed
	// during it; lastCPFault is the control-plane fault those 5xx fall in.
	byFault     map[string]*scaleFaultStats // guarded by mu
	lastCPFault string                      // guarded by mu

	reads, staleReads                               atomic.Int64
	walks, walkPages, walksGone                     atomic.Int64
	walkMismatches, walkUnverified                  atomic.Int64
	writes                                          atomic.Int64
	allowed5xx, unexpected5xx, throttled, connErrs  atomic.Int64
	faults, faultsSurvived                          atomic.Int64
	events, replayed, outOfOrder, relists, informed atomic.Int64
	lost                                            atomic.Int64
}

// scaleFaultStats is one fault kind's tally.
type scaleFaultStats struct {
	runs, survived, allowed5xx int
}

// faultStats returns the tally of fault kind name; s.mu must be held.
func (s *scaleRun) faultStats(name string) *scaleFaultStats {
	st, ok := s.byFault[name]
	if !ok {
		st = &scaleFaultStats{}
		s.byFault[name] = st
	}
	return st
}

func (s *scaleRun) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 50 {
		s.problems = append(s.problems, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// inCPFault reports whether a control-plane fault is under way or ended
// less than scaleCPGrace ago.
func (s *scaleRun) inCPFault() bool {
	return time.Now().Before(time.Unix(0, s.cpFaultUntil.Load()).Add(scaleCPGrace))
}

// lbGet sends one GET through the balancer on a new connection.
func (s *scaleRun) lbGet(ctx context.Context, path string, q url.Values) (int, []byte, error) {
	u := s.rs.Balancer.URL() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", acceptJSON)
	resp, err := s.lb.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// check5xx decides whether a 5xx listproxy gave is one the apiserver would
// have given: during (or right after) a control-plane outage, or when the
// apiserver answers the same request with a 5xx (or not at all) now.
func (s *scaleRun) check5xx(ctx context.Context, path string, q url.Values, code int, body []byte) {
	if s.inCPFault() {
		s.allowed5xx.Add(1)
		s.mu.Lock()
		st := s.faultStats(s.lastCPFault)
		st.allowed5xx++
		n, fault := st.allowed5xx, s.lastCPFault
		s.mu.Unlock()
		if n <= scaleLogged5xx {
			s.t.Logf("HTTP %d from listproxy during %q for %s?%s: %.300s", code, fault, path, q.Encode(), body)
		}
		return
	}
	direct, _, _, err := s.apic.get(ctx, path, q, acceptJSON)
	if err != nil || direct >= 500 {
		s.allowed5xx.Add(1)
		return
	}
	s.unexpected5xx.Add(1)
	s.problem("HTTP %d from listproxy for %s?%s, the apiserver answers %d: %.300s", code, path, q.Encode(), direct, body)
}

// retryLater handles the answers a client sends again after a pause:
// connection errors, 429s and 5xx (each 5xx checked against the
// apiserver). It reports whether it paused so that the caller sends the
// request again.
func (s *scaleRun) retryLater(ctx context.Context, path string, q url.Values, code int, body []byte, err error) bool {
	switch {
	case err != nil:
		s.connErrs.Add(1)
	case code == http.StatusTooManyRequests:
		s.throttled.Add(1)
	case code >= 500:
		s.check5xx(ctx, path, q, code, body)
	default:
		return false
	}
	pause(ctx, 100*time.Millisecond)
	return true
}

// scaleItem is the part of a ConfigMap the checks read.
type scaleItem struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

type scaleList struct {
	Metadata metav1.ListMeta `json:"metadata"`
	Items    []scaleItem     `json:"items"`
}

// TestReplicas: see the top of this file. Pass: no consistent read older
// than a write acknowledged before it was sent; every walk completes with
// the apiserver's list at its resourceVersion or gets the 410 the apiserver
// itself gives; every informer converges to the apiserver's state, and none
// sees an object go back in time; no 5xx the apiserver would not have
// given; every fault survived; every replica's peak RSS within bounds.
func TestReplicas(t *testing.T) {
	duration, soak := scaleDuration(t)
	ha := scaleTopology(t) == scaleTopologyHA
	// The single control plane, or the HA one: the replicas' upstream,
	// --etcd-servers, and the direct clients' config.
	var (
		cp          *framework.ControlPlane
		h           *framework.HA
		upstreamURL string
		etcdServers string
		directCfg   *rest.Config
	)
	if ha {
		h = framework.StartHA(t, framework.ControlPlaneConfig{}, scaleHAAPIServers)
		cp, upstreamURL, etcdServers = h.CP, h.URL, h.EtcdServers()
		directCfg = h.UserConfig(framework.UserAdmin)
		directCfg.Timeout = scaleHAClientTimeout
	} else {
		cp = framework.Start(t, framework.ControlPlaneConfig{})
		etcdServers = cp.EtcdEndpoint
		directCfg = cp.AdminConfig
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{scaleLinNS, scaleWalkNS} {
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(directCfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range scaleLinKeys {
		scaleCreate(ctx, t, cs, scaleLinNS, fmt.Sprintf("lin-%02d", i), "0")
	}
	for i := range scaleWalkObjs {
		scaleCreate(ctx, t, cs, scaleWalkNS, fmt.Sprintf("walk-%03d", i), "0")
	}

	startCtx, startCancel := context.WithTimeout(ctx, 3*time.Minute)
	rs := startReplicaSetAt(startCtx, t, cp, upstreamURL, scaleReplicas,
		"--etcd-servers="+etcdServers, "--resources=configmaps", "--preload=configmaps,configmaps/json",
		"--shutdown-delay=1s", "--shutdown-grace-period=10s")
	startCancel()
	s := &scaleRun{
		t: t, cp: cp, ha: h, rs: rs, cs: cs, apic: newRawClient(t, directCfg),
		lb:      &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute},
		acked:   map[string]int{},
		byFault: map[string]*scaleFaultStats{},
	}

	// Workloads until the faults are over.
	work, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.linWriter(work) })
	wg.Go(func() { s.walkWriter(work) })
	for range scaleReaders {
		wg.Go(func() { s.reader(work) })
	}
	for range scaleWalkers {
		wg.Go(func() { s.walker(work) })
	}
	informerStop := make(chan struct{})
	var informers []cache.SharedIndexInformer
	for i := range scaleWatchListInformers + scaleListWatchInformers {
		inf := s.informer(i < scaleWatchListInformers)
		informers = append(informers, inf)
		go inf.Run(informerStop)
	}
	defer close(informerStop)
	for i, inf := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("informer %d did not sync", i)
		}
	}

	begin := time.Now()
	s.faultSchedule(ctx, duration, soak)
	stopWork()
	wg.Wait()
	elapsed := time.Since(begin)

	// Every informer converges to the apiserver's state.
	s.converge(ctx, informers)

	var rss []string
	for _, r := range rs.Replicas {
		peak := r.PeakRSS()
		rss = append(rss, fmt.Sprintf("%d MiB", peak>>20))
		if peak > scaleMaxRSS {
			s.problem("replica %d peak RSS %d MiB, bound %d MiB", r.Index, peak>>20, scaleMaxRSS>>20)
		}
	}
	s.report(elapsed, rss)

	if n := s.faults.Load(); n == 0 || s.faultsSurvived.Load() != n {
		t.Errorf("faults survived %d of %d", s.faultsSurvived.Load(), n)
	}
	if s.walks.Load() == 0 || s.reads.Load() == 0 || s.events.Load() == 0 {
		t.Errorf("no work done: %d walks, %d reads, %d events", s.walks.Load(), s.reads.Load(), s.events.Load())
	}
	for name, n := range map[string]int64{
		"stale reads": s.staleReads.Load(), "walk mismatches": s.walkMismatches.Load(), "unexpected 5xx": s.unexpected5xx.Load(),
		"events out of order": s.outOfOrder.Load(), "informers not converged": s.lost.Load(),
	} {
		if n != 0 {
			t.Errorf("%s: %d", name, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		t.Error(p)
	}
}

// scaleDuration: LISTPROXY_SOAK_DURATION (make soak) runs the faults in a
// cycle for that long; unset, each fault runs once.
func scaleDuration(t *testing.T) (time.Duration, bool) {
	t.Helper()
	if os.Getenv("LISTPROXY_SOAK_DURATION") == "" {
		return 0, false
	}
	return soakDuration(t), true
}

// scaleTopologyHA is the LISTPROXY_SOAK_TOPOLOGY of the HA control plane.
const scaleTopologyHA = "ha"

// scaleTopology: LISTPROXY_SOAK_TOPOLOGY, "" (one etcd, one
// kube-apiserver) or "ha".
func scaleTopology(t *testing.T) string {
	t.Helper()
	switch v := os.Getenv("LISTPROXY_SOAK_TOPOLOGY"); v {
	case "", "single":
		return ""
	case scaleTopologyHA:
		return v
	default:
		t.Fatalf("LISTPROXY_SOAK_TOPOLOGY=%q: want ha, single or nothing", v)
		return ""
	}
}

func scaleCreate(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, v string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pause waits d or until ctx ends; workloads pace themselves with it.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// linWriter updates the consistent readers' keys with increasing values and
// records each acknowledged one.
func (s *scaleRun) linWriter(ctx context.Context) {
	rng := rand.New(rand.NewPCG(1, 2))
	for v := 1; ctx.Err() == nil; v++ {
		key := fmt.Sprintf("lin-%02d", rng.IntN(scaleLinKeys))
		patch := fmt.Sprintf(`{"data":{"v":"%d"}}`, v)
		if _, err := s.cs.CoreV1().ConfigMaps(scaleLinNS).Patch(ctx, key, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			pause(ctx, 200*time.Millisecond) // the control plane is down
			continue
		}
		s.writes.Add(1)
		s.mu.Lock()
		s.acked[key] = max(s.acked[key], v)
		s.mu.Unlock()
		pause(ctx, 20*time.Millisecond)
	}
}

// walkWriter churns the walked namespace: updates, and a delete and
// re-create now and then.
func (s *scaleRun) walkWriter(ctx context.Context) {
	rng := rand.New(rand.NewPCG(3, 4))
	for v := 1; ctx.Err() == nil; v++ {
		name := fmt.Sprintf("walk-%03d", rng.IntN(scaleWalkObjs))
		var err error
		cms := s.cs.CoreV1().ConfigMaps(scaleWalkNS)
		if v%10 == 0 {
			if err = cms.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": strconv.Itoa(v)}}, metav1.CreateOptions{})
			}
		} else {
			_, err = cms.Patch(ctx, name, "application/merge-patch+json", fmt.Appendf(nil, `{"data":{"v":"%d"}}`, v), metav1.PatchOptions{})
		}
		if err != nil {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		s.writes.Add(1)
		pause(ctx, 30*time.Millisecond)
	}
}

// reader sends consistent LISTs of the readers' keys through the balancer
// and checks each against the writes acknowledged before it was sent.
func (s *scaleRun) reader(ctx context.Context) {
	path := "/api/v1/namespaces/" + scaleLinNS + "/configmaps"
	for ctx.Err() == nil {
		s.mu.Lock()
		before := maps.Clone(s.acked)
		s.mu.Unlock()
		code, body, err := s.lbGet(ctx, path, nil)
		switch {
		case ctx.Err() != nil:
			return
		case s.retryLater(ctx, path, nil, code, body, err):
			continue
		case code != http.StatusOK:
			s.problem("consistent read: HTTP %d: %.300s", code, body)
			continue
		}
		var list scaleList
		if err := json.Unmarshal(body, &list); err != nil {
			s.problem("consistent read: %v", err)
			continue
		}
		s.reads.Add(1)
		for _, it := range list.Items {
			v, _ := strconv.Atoi(it.Data["v"])
			if want := before[it.Metadata.Name]; v < want {
				s.staleReads.Add(1)
				s.problem("stale consistent read at resourceVersion %s: %s=%d, but %d was acknowledged before the read was sent", list.Metadata.ResourceVersion, it.Metadata.Name, v, want)
			}
		}
	}
}

// walker walks the churned namespace in pages through the balancer (each
// page on a new connection, so on the next replica) and checks every
// complete walk against the apiserver's list at the walk's resourceVersion.
func (s *scaleRun) walker(ctx context.Context) {
	path := "/api/v1/namespaces/" + scaleWalkNS + "/configmaps"
	for ctx.Err() == nil {
		var items []scaleItem
		rv, token := "", ""
		gone := false
		for ctx.Err() == nil {
			q := url.Values{"limit": {strconv.Itoa(scaleWalkLimit)}}
			if token != "" {
				q.Set("continue", token)
			}
			code, body, err := s.lbGet(ctx, path, q)
			switch {
			case ctx.Err() != nil:
				return
			case s.retryLater(ctx, path, q, code, body, err):
				continue
			case code == http.StatusGone && token != "":
				gone = true
			case code != http.StatusOK:
				s.problem("walk page: HTTP %d: %.300s", code, body)
				gone = true // abandon the walk
			}
			if gone {
				break
			}
			var page scaleList
			if err := json.Unmarshal(body, &page); err != nil {
				s.problem("walk page: %v", err)
				gone = true
				break
			}
			s.walkPages.Add(1)
			if rv == "" {
				rv = page.Metadata.ResourceVersion
			} else if page.Metadata.ResourceVersion != rv {
				s.walkMismatches.Add(1)
				s.problem("walk page at resourceVersion %s, the walk began at %s", page.Metadata.ResourceVersion, rv)
			}
			items = append(items, page.Items...)
			token = page.Metadata.Continue
			if token == "" {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		if gone {
			s.checkGone(ctx, path, rv)
			continue
		}
		s.walks.Add(1)
		s.checkWalk(ctx, path, rv, items)
	}
}

// checkGone: a walk that got 410 must be one the apiserver also answers
// with 410 (its resourceVersion compacted).
func (s *scaleRun) checkGone(ctx context.Context, path, rv string) {
	if rv == "" {
		return
	}
	s.walksGone.Add(1)
	code, _, body, err := s.apic.get(ctx, path, url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}, "limit": {"1"}}, acceptJSON)
	if err != nil || code >= 500 || code == http.StatusTooManyRequests {
		s.walkUnverified.Add(1)
		return
	}
	if code != http.StatusGone {
		s.walkMismatches.Add(1)
		s.problem("walk at resourceVersion %s got 410 from listproxy; the apiserver answers %d: %.200s", rv, code, body)
	}
}

// checkWalk compares a complete walk with the apiserver's list at its
// resourceVersion.
func (s *scaleRun) checkWalk(ctx context.Context, path, rv string, items []scaleItem) {
	code, _, body, err := s.apic.get(ctx, path, url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}, acceptJSON)
	if err != nil || code >= 500 || code == http.StatusGone || code == http.StatusTooManyRequests {
		// The control plane is down or shutting down, or the state was
		// compacted since.
		s.walkUnverified.Add(1)
		return
	}
	var want scaleList
	if code != http.StatusOK || json.Unmarshal(body, &want) != nil {
		s.problem("the apiserver's list at resourceVersion %s: HTTP %d: %.200s", rv, code, body)
		return
	}
	got, exp := itemVersions(items), itemVersions(want.Items)
	if !slices.Equal(got, exp) {
		s.walkMismatches.Add(1)
		s.problem("walk at resourceVersion %s: %d items differ from the apiserver's %d (first difference %s)", rv, len(got), len(exp), firstDiff(got, exp))
	}
}

func itemVersions(items []scaleItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Metadata.Name + "@" + it.Metadata.ResourceVersion
	}
	return out
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " vs " + b[i]
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(a), len(b))
}

// informer returns an informer of the walked namespace through the
// balancer (one kept-alive connection, so one replica until it ends) whose
// handler counts events and checks that no object goes back in time.
func (s *scaleRun) informer(watchList bool) cache.SharedIndexInformer {
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: s.rs.Balancer.URL(), UserAgent: "scale-informer"})
	var lists atomic.Int64
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if lists.Add(1) > 1 {
				s.relists.Add(1)
			}
			return cs.CoreV1().ConfigMaps(scaleWalkNS).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents && lists.Add(1) > 1 {
				s.relists.Add(1)
			}
			return cs.CoreV1().ConfigMaps(scaleWalkNS).Watch(ctx, o)
		},
	}
	var lister cache.ListerWatcher = lw
	if !watchList {
		lister = cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{})
	}
	inf := cache.NewSharedIndexInformer(lister, &corev1.ConfigMap{}, 0, cache.Indexers{})
	var mu sync.Mutex
	last := map[string]uint64{}
	observe := func(obj any, deleted bool) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				mu.Lock()
				delete(last, d.Key)
				mu.Unlock()
				s.events.Add(1)
			}
			return
		}
		s.events.Add(1)
		rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		mu.Lock()
		defer mu.Unlock()
		prev, seen := last[cm.Name]
		switch {
		case seen && rv == prev && !deleted:
			s.replayed.Add(1) // a relist's replay of an unchanged object
		case seen && rv < prev:
			s.outOfOrder.Add(1)
			s.problem("informer saw %s go back from resourceVersion %d to %d", cm.Name, prev, rv)
		}
		if deleted {
			delete(last, cm.Name)
		} else {
			last[cm.Name] = rv
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, false) },
		UpdateFunc: func(_, obj any) { observe(obj, false) },
		DeleteFunc: func(obj any) { observe(obj, true) },
	})
	return inf
}

// converge waits until every informer holds exactly the apiserver's
// objects at their resourceVersions.
func (s *scaleRun) converge(ctx context.Context, informers []cache.SharedIndexInformer) {
	var want []string
	var diff string
	for i, inf := range informers {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := s.cs.CoreV1().ConfigMaps(scaleWalkNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			want = want[:0]
			for _, cm := range list.Items {
				want = append(want, cm.Name+"@"+cm.ResourceVersion)
			}
			var got []string
			for _, obj := range inf.GetStore().List() {
				cm := obj.(*corev1.ConfigMap)
				got = append(got, cm.Name+"@"+cm.ResourceVersion)
			}
			slices.Sort(got)
			slices.Sort(want)
			diff = firstDiff(got, want)
			return slices.Equal(got, want), nil
		})
		if err != nil {
			s.lost.Add(1)
			s.problem("informer %d did not converge to the apiserver's state (%s): %v", i, diff, err)
		} else {
			s.informed.Add(1)
		}
	}
}

// scaleFault is one fault: do injects it and returns once it is over.
type scaleFault struct {
	name string
	cp   bool // a control-plane outage
	do   func(ctx context.Context, s *scaleRun) error
}

// The faults both topologies inject.
var (
	scaleRollingRestart = scaleFault{name: "rolling restart", do: func(ctx context.Context, s *scaleRun) error {
		for i := range s.rs.Replicas {
			if err := s.rs.Terminate(ctx, i); err != nil {
				return err
			}
			if err := s.rs.Start(ctx, i); err != nil {
				return err
			}
			if err := s.balanced(ctx); err != nil {
				return err
			}
		}
		return nil
	}}
	scaleReplicaKill = scaleFault{name: "replica SIGKILL", do: func(ctx context.Context, s *scaleRun) error {
		i := rand.IntN(len(s.rs.Replicas))
		if err := s.rs.Kill(ctx, i); err != nil {
			return err
		}
		return s.rs.Start(ctx, i)
	}}
	scaleCompaction = scaleFault{name: "etcd compaction", do: func(ctx context.Context, s *scaleRun) error {
		_, err := framework.CompactEtcd(ctx, s.cp.EtcdEndpoints, true)
		return err
	}}
)

// scaleFaults are the single control plane's faults.
var scaleFaults = []scaleFault{
	scaleRollingRestart,
	scaleReplicaKill,
	{name: "apiserver restart", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		if err := s.cp.StopAPIServer(); err != nil {
			return err
		}
		return s.cp.StartAPIServer(ctx)
	}},
	{name: "etcd restart", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		if err := s.cp.StopEtcd(); err != nil {
			return err
		}
		return s.cp.StartEtcd(ctx)
	}},
	scaleCompaction,
}

// scaleHAFaults are the HA control plane's faults: its etcd restart is the
// leader's, its apiserver restart one of several, and a kube-apiserver
// that hangs and a balancer that drops its connections join them. Each
// counts as a control-plane outage (a 5xx is allowed while it lasts and
// scaleCPGrace after): the clients of a killed or paused kube-apiserver,
// or of a dropped connection, lose their requests in flight, and writes
// fail while etcd elects a leader.
var scaleHAFaults = []scaleFault{
	scaleRollingRestart,
	scaleReplicaKill,
	{name: "etcd leader killed", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		leader, err := s.ha.KillEtcdLeader(ctx)
		if err != nil {
			return err
		}
		s.t.Logf("etcd member %d, the leader, killed", leader)
		pause(ctx, scaleHADown)
		return s.ha.CP.StartEtcdMember(ctx, leader)
	}},
	{name: "kube-apiserver killed", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		i := s.apiserverTurn % s.ha.APIServers()
		if err := s.ha.KillAPIServer(i); err != nil {
			return err
		}
		s.t.Logf("kube-apiserver %d killed", i)
		pause(ctx, scaleHADown)
		return s.ha.StartAPIServer(ctx, i)
	}},
	{name: "kube-apiserver paused", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		// Another one than the last killed.
		i := (s.apiserverTurn + 1) % s.ha.APIServers()
		s.apiserverTurn++
		if err := s.ha.PauseAPIServer(ctx, i); err != nil {
			return err
		}
		s.t.Logf("kube-apiserver %d paused", i)
		pause(ctx, scaleHAPauseHold)
		// The rest of the control plane serves: so must every replica,
		// whichever kube-apiserver its connections reached.
		err := s.everyReplicaReads(ctx)
		resumeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return errors.Join(err, s.ha.ResumeAPIServer(resumeCtx, i))
	}},
	{name: "apiserver connections dropped", cp: true, do: func(ctx context.Context, s *scaleRun) error {
		s.t.Logf("the apiserver balancer dropped %d connections", s.ha.Balancer.DropConnections())
		return nil
	}},
	scaleCompaction,
}

// everyReplicaReads waits until each replica, asked directly, answers a
// consistent read of the readers' keys with 200.
func (s *scaleRun) everyReplicaReads(ctx context.Context) error {
	client := &http.Client{Timeout: 10 * time.Second}
	for _, r := range s.rs.Replicas {
		u := r.URL() + "/api/v1/namespaces/" + scaleLinNS + "/configmaps"
		last := ""
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return false, err
			}
			resp, err := client.Do(req)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			last = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body)
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			return fmt.Errorf("replica %d answers no consistent read (last: %s): %w", r.Index, last, err)
		}
	}
	return nil
}

// balanced waits until the balancer sees every replica ready.
func (s *scaleRun) balanced(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for i := range s.rs.Replicas {
			if !s.rs.Balancer.Ready(i) {
				return false, nil
			}
		}
		return true, nil
	})
}

// faultSchedule injects every fault once (soak: in a cycle until duration
// is over) with the workloads running between them. A fault is survived
// when afterwards every replica is ready behind the balancer and a
// consistent read through it succeeds; on the HA topology, when every
// replica answers a consistent read itself as well (and, for a paused
// kube-apiserver, already while it is paused).
func (s *scaleRun) faultSchedule(ctx context.Context, duration time.Duration, soak bool) {
	gap := 5 * time.Second
	if soak {
		gap = 20 * time.Second
	}
	faults := scaleFaults
	if s.ha != nil {
		faults = scaleHAFaults
	}
	end := time.Now().Add(duration)
	pause(ctx, gap)
	for cycle := 0; cycle == 0 || soak && time.Now().Before(end); cycle++ {
		for _, f := range faults {
			if soak && cycle > 0 && !time.Now().Before(end) {
				return
			}
			s.faults.Add(1)
			fctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			begin := time.Now()
			s.mu.Lock()
			s.faultStats(f.name).runs++
			if f.cp {
				s.lastCPFault = f.name
				s.cpFaultUntil.Store(time.Now().Add(time.Hour).UnixNano())
			}
			s.mu.Unlock()
			err := f.do(fctx, s)
			if f.cp {
				s.cpFaultUntil.Store(time.Now().UnixNano())
			}
			if err == nil {
				err = s.balanced(fctx)
			}
			if err == nil && s.ha != nil {
				err = s.everyReplicaReads(fctx)
			}
			if err == nil {
				err = wait.PollUntilContextTimeout(fctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					code, _, err := s.lbGet(ctx, "/api/v1/namespaces/"+scaleLinNS+"/configmaps", nil)
					return err == nil && code == http.StatusOK, nil
				})
			}
			cancel()
			if err != nil {
				s.problem("fault %q not survived: %v", f.name, err)
			} else {
				s.faultsSurvived.Add(1)
				s.mu.Lock()
				s.faultStats(f.name).survived++
				s.mu.Unlock()
			}
			s.t.Logf("fault %q over in %v", f.name, time.Since(begin).Round(time.Millisecond))
			pause(ctx, gap)
		}
	}
}

// report prints the run's summary table.
func (s *scaleRun) report(elapsed time.Duration, rss []string) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("duration (faults and workloads)", elapsed.Round(time.Second))
	if s.ha != nil {
		row("control plane", fmt.Sprintf("HA: %d etcd members, %d kube-apiservers", len(s.cp.EtcdEndpoints), s.ha.APIServers()))
		row("apiserver balancer connections", s.ha.Balancer.Connections())
	} else {
		row("control plane", "1 etcd, 1 kube-apiserver")
	}
	row("replicas / replica starts", fmt.Sprintf("%d / %d", len(s.rs.Replicas), s.starts()))
	row("balancer connections", s.rs.Balancer.Connections())
	row("writes acknowledged", s.writes.Load())
	row("consistent reads (stale)", fmt.Sprintf("%d (%d)", s.reads.Load(), s.staleReads.Load()))
	row("walks complete / 410 / pages", fmt.Sprintf("%d / %d / %d", s.walks.Load(), s.walksGone.Load(), s.walkPages.Load()))
	row("walk mismatches / unverifiable", fmt.Sprintf("%d / %d", s.walkMismatches.Load(), s.walkUnverified.Load()))
	row("informers converged", fmt.Sprintf("%d of %d", s.informed.Load(), s.informed.Load()+s.lost.Load()))
	row("events delivered", s.events.Load())
	row("events out of order (lost ordering)", s.outOfOrder.Load())
	row("events replayed by relists / relists", fmt.Sprintf("%d / %d", s.replayed.Load(), s.relists.Load()))
	row("5xx unexpected / during outages", fmt.Sprintf("%d / %d", s.unexpected5xx.Load(), s.allowed5xx.Load()))
	row("429 retried / connection errors retried", fmt.Sprintf("%d / %d", s.throttled.Load(), s.connErrs.Load()))
	row("faults survived", fmt.Sprintf("%d of %d", s.faultsSurvived.Load(), s.faults.Load()))
	s.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(s.byFault)) {
		st := s.byFault[name]
		row("  "+name, fmt.Sprintf("%d of %d, 5xx during it %d", st.survived, st.runs, st.allowed5xx))
	}
	s.mu.Unlock()
	row("peak RSS per replica", strings.Join(rss, ", "))
	_ = w.Flush()
	s.t.Logf("summary:\n%s", b.String())
}

func (s *scaleRun) starts() int {
	n := 0
	for _, r := range s.rs.Replicas {
		n += r.Starts()
	}
	return n
}
