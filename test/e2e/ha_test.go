package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// TestHAControlPlane runs checkLinearizable against an HA control plane
// (a 3-member etcd, two kube-apiservers behind a probing TCP balancer):
// writers through the balancer, readers through listproxy, whose upstream
// is the balancer and whose etcd client knows every member. While it runs
// the etcd leader is killed and restarted, kube-apiserver 0 is killed and
// restarted, kube-apiserver 1 is paused and resumed, and the balancer
// drops every connection. No read may be stale; reads may pass through or
// be unavailable during a fault, and some are served from snapshots before
// and after. Alongside, client-go informers through listproxy must end
// equal to the apiserver's list, and a watch through listproxy from a
// resourceVersion before the faults, resumed whenever it ends, must see
// exactly etcd's changes of the namespace in etcd's order. Afterwards the
// stores serve from snapshots again.
func TestHAControlPlane(t *testing.T) {
	const ns = "ha"
	h := framework.StartHA(t, framework.ControlPlaneConfig{}, 2)
	lp := framework.StartListproxyAt(t, h.CP, h.URL, "--etcd-servers="+h.EtcdServers())
	ctx := t.Context()
	scrape := func() framework.Metrics { return framework.Scrape(t, nil, lp.URL+"/metrics") }
	served := func(m framework.Metrics) float64 {
		return m.Sum("listproxy_freshness_consistent_reads_total", `resource="configmaps"`, `outcome="served"`)
	}
	path := "/api/v1/namespaces/" + ns + "/configmaps"

	// Started by the faults once checkLinearizable has created the
	// namespace, stopped when the test has compared them.
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var (
		infs                 []cache.SharedIndexInformer
		diff                 *haDiffWatch
		oracle               *etcdOracle
		start, beforeFaults  framework.Metrics
		afterFaults          framework.Metrics
		faultLog             []string
		faultsBegan, faultsE time.Time
	)
	faults := func(ctx context.Context) {
		step := func(d time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
		fault := func(what string, do func(ctx context.Context) error) bool {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			begin := time.Now()
			if err := do(ctx); err != nil {
				t.Errorf("%s: %v", what, err)
				return false
			}
			faultLog = append(faultLog, fmt.Sprintf("%s (%v)", what, time.Since(begin).Round(time.Millisecond)))
			return true
		}

		// Before the faults: a resourceVersion to watch from, the oracle
		// and the watches.
		list, err := h.Clientset(framework.UserAdmin).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("list before the faults: %v", err)
			return
		}
		from := parseRV(t, list.ResourceVersion)
		if oracle, err = watchEtcd(watchCtx, h.CP.EtcdEndpoints, "/registry/configmaps/"+ns+"/", from); err != nil {
			t.Errorf("etcd watch: %v", err)
			return
		}
		diff = &haDiffWatch{
			lp: newRawClient(t, lp.Config()), direct: newRawClient(t, h.UserConfig(framework.UserAdmin)),
			path: path, from: from,
		}
		go diff.run(watchCtx)
		lpcs := kubernetes.NewForConfigOrDie(lp.Config())
		f := informers.NewSharedInformerFactoryWithOptions(lpcs, 0, informers.WithNamespace(ns))
		infs = append(infs, f.Core().V1().ConfigMaps().Informer(), listWatchConfigMapInformer(lpcs, ns))
		f.Start(watchCtx.Done())
		go infs[1].Run(watchCtx.Done())
		for i, inf := range infs {
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				t.Errorf("informer %d never synced", i)
				return
			}
		}
		if !step(3 * time.Second) {
			return
		}
		beforeFaults = scrape()
		faultsBegan = time.Now()

		// (a) The etcd leader killed, and restarted once another leads.
		var leader int
		if !fault("etcd leader killed", func(ctx context.Context) error {
			leader, err = h.KillEtcdLeader(ctx)
			if err != nil {
				return err
			}
			// The survivors elect one of themselves.
			return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				next, err := h.CP.EtcdLeader(ctx)
				return err == nil && next != leader, nil
			})
		}) || !step(2*time.Second) {
			return
		}
		if !fault(fmt.Sprintf("etcd member %d restarted", leader), func(ctx context.Context) error { return h.CP.StartEtcdMember(ctx, leader) }) ||
			!step(2*time.Second) {
			return
		}
		// (b) kube-apiserver 0 killed and restarted, then 1 paused and
		// resumed.
		if !fault("kube-apiserver 0 killed", func(context.Context) error { return h.KillAPIServer(0) }) || !step(time.Second) {
			return
		}
		if !fault("kube-apiserver 0 restarted", func(ctx context.Context) error { return h.StartAPIServer(ctx, 0) }) || !step(time.Second) {
			return
		}
		if !fault("kube-apiserver 1 paused", func(ctx context.Context) error { return h.PauseAPIServer(ctx, 1) }) || !step(3*time.Second) {
			return
		}
		if !fault("kube-apiserver 1 resumed", func(ctx context.Context) error { return h.ResumeAPIServer(ctx, 1) }) || !step(2*time.Second) {
			return
		}
		// (c) Every connection through the balancer dropped once.
		fault("balancer connections dropped", func(context.Context) error {
			faultLog = append(faultLog, fmt.Sprintf("%d connections", h.Balancer.DropConnections()))
			return nil
		})
		faultsE = time.Now()
		afterFaults = scrape()
	}

	start = scrape()
	res := checkLinearizable(t, h.CP, lp, linRun{
		namespace: ns, duration: 45 * time.Second, writers: linWriters, writeTo: h.Clientset(framework.UserAdmin),
		// The writers wait while etcd elects a leader and an apiserver
		// restarts or hangs, on a machine running three etcd members and
		// two apiservers; the writes in flight when a fault strikes fail,
		// up to one per writer and reader per fault.
		minWriteRate: 10, faultyWrites: 5 * (linWriters + linReaders),
		passThrough: true, unavailable: true, faults: faults,
	})
	end := scrape()
	if afterFaults == nil {
		t.Fatalf("the faults did not complete: %v", faultLog)
	}
	t.Logf("faults in %v: %s", faultsE.Sub(faultsBegan).Round(time.Millisecond), strings.Join(faultLog, ", "))
	before, after := served(beforeFaults)-served(start), served(end)-served(afterFaults)
	t.Logf("%d LISTs, %.1f%% served from snapshots, %d unavailable; consistent reads served from snapshots: %.0f before the faults, %.0f during, %.0f after; consistent reads: %s",
		res.lists, 100*float64(res.fromSnapshot)/float64(max(res.lists, 1)), res.unavailable,
		before, served(afterFaults)-served(beforeFaults), after, outcomes(start, end))
	if before == 0 || after == 0 {
		t.Errorf("consistent reads served from snapshots: %.0f before the faults, %.0f after; want some in each", before, after)
	}

	// The informers end with the apiserver's state.
	direct := h.Clientset(framework.UserAdmin)
	for i, inf := range infs {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := direct.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			want := map[string]string{}
			for _, cm := range list.Items {
				want[cm.Name] = cm.ResourceVersion
			}
			got := map[string]string{}
			for _, obj := range inf.GetStore().List() {
				cm := obj.(*corev1.ConfigMap)
				got[cm.Name] = cm.ResourceVersion
			}
			last = cmp.Diff(want, got)
			return last == "", nil
		})
		if err != nil {
			t.Errorf("informer %d (watch-list %v) never equalled the apiserver's list (-want +got):\n%s", i, i == 0, last)
		}
	}

	// The differential watch saw exactly etcd's changes.
	compared := compareWithEtcd(ctx, t, diff, oracle)
	stopWatches()

	// Every store serves from snapshots again, and is ready.
	lpc := newRawClient(t, lp.Config())
	waitServed(ctx, t, lpc, path, url.Values{})
	var watchFrom string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := getListAnswer(ctx, lpc, path, url.Values{})
		if err != nil || p.code != http.StatusOK {
			return false, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, hdr, refusal := openWatchOrRefusal(wctx, t, lpc, path, url.Values{"watch": {"1"}, "resourceVersion": {p.meta.ResourceVersion}}, wire.JSON)
		watchFrom = refusal
		if hdr != nil {
			watchFrom = hdr.Get(httpapi.HeaderServedFrom)
		}
		return watchFrom == httpapi.SourceSnapshot, nil
	})
	if err != nil {
		t.Errorf("a watch from the latest resourceVersion is served from %q, want %s: %v", watchFrom, httpapi.SourceSnapshot, err)
	}
	for _, format := range []string{"json", "protobuf"} {
		awaitMetric(ctx, t, lp.URL, 30*time.Second, 1, "listproxy_snapshot_watch_healthy", `resource="configmaps"`, `format="`+format+`"`)
	}
	diff.mu.Lock()
	errs := diff.errs
	diff.mu.Unlock()
	t.Logf("differential watch: %d events compared with etcd's, %d opens (%d served from snapshots), %d ended by an error %q; %d informers converged",
		compared, diff.opens.Load(), diff.fromSnapshot.Load(), diff.failures.Load(), errs, len(infs))
}

// listWatchConfigMapInformer is a configmap informer of ns whose reflector
// lists and then watches (no watch-list).
func listWatchConfigMapInformer(cs kubernetes.Interface, ns string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), &corev1.ConfigMap{}, 0, cache.Indexers{})
}

// haEvent is one change as a watch reports it.
type haEvent struct {
	Type string
	Name string
	RV   uint64
}

// etcdOracle collects etcd's changes under a key prefix from a revision.
type etcdOracle struct {
	client *clientv3.Client
	mu     sync.Mutex
	events []haEvent // guarded by mu
	err    error     // guarded by mu; the watch failed
	rev    int64     // guarded by mu; the revision the watch has reached
}

// watchEtcd watches prefix from the revision after rv with every member as
// an endpoint, until ctx ends.
func watchEtcd(ctx context.Context, endpoints []string, prefix string, rv uint64) (*etcdOracle, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	o := &etcdOracle{client: client}
	ch := client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(rv)+1), clientv3.WithPrevKV())
	go func() {
		defer client.Close()
		for resp := range ch {
			o.mu.Lock()
			if err := resp.Err(); err != nil {
				o.err = err
			}
			o.rev = max(o.rev, resp.Header.Revision)
			for _, ev := range resp.Events {
				e := haEvent{Type: string(watch.Modified), Name: strings.TrimPrefix(string(ev.Kv.Key), prefix), RV: uint64(ev.Kv.ModRevision)}
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					e.Type = string(watch.Deleted)
				case ev.IsCreate():
					e.Type = string(watch.Added)
				}
				o.events = append(o.events, e)
			}
			o.mu.Unlock()
		}
	}()
	return o, nil
}

// haDiffWatch watches path through listproxy from a resourceVersion,
// resumed from the last one seen (events and bookmarks) whenever it ends,
// as client-go's RetryWatcher does.
type haDiffWatch struct {
	lp, direct rawClient
	path       string
	from       uint64

	mu     sync.Mutex
	events []haEvent // guarded by mu
	last   uint64    // guarded by mu; the last resourceVersion seen
	// gone is set when listproxy answered 410 for a watch from last:
	// historyLost when the apiserver had no history there either.
	gone, historyLost bool     // guarded by mu
	errs              []string // guarded by mu; why watches ended early

	opens, fromSnapshot, failures atomic.Int64
}

func (d *haDiffWatch) snapshot() (events []haEvent, last uint64, gone, historyLost bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]haEvent(nil), d.events...), d.last, d.gone, d.historyLost
}

func (d *haDiffWatch) run(ctx context.Context) {
	d.mu.Lock()
	d.last = d.from
	d.mu.Unlock()
	for ctx.Err() == nil {
		d.mu.Lock()
		from := d.last
		d.mu.Unlock()
		err := d.watchOnce(ctx, from)
		if errors.Is(err, errWatchGone) {
			lost := d.apiserverLacks(ctx, from)
			d.mu.Lock()
			d.gone, d.historyLost = true, lost
			d.mu.Unlock()
			return
		}
		if err != nil && ctx.Err() == nil {
			d.failures.Add(1)
			d.mu.Lock()
			d.errs = append(d.errs, err.Error())
			d.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // pace retries while a fault lasts
			}
		}
	}
}

var errWatchGone = errors.New("410 Gone")

// watchOnce runs one watch from rv; it returns nil when the watch ended
// normally, errWatchGone on a 410.
func (d *haDiffWatch) watchOnce(ctx context.Context, rv uint64) error {
	// A short timeout makes the watch resume often.
	q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatUint(rv, 10)}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"4"}}
	body, hdr, err := openRawWatch(ctx, d.lp, d.path, q)
	if err != nil {
		return err
	}
	defer body.Close()
	d.opens.Add(1)
	if hdr.Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot {
		d.fromSnapshot.Add(1)
	}
	dec := json.NewDecoder(body)
	for {
		var ev metav1.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ev.Type == string(watch.Error) {
			var s metav1.Status
			if err := json.Unmarshal(ev.Object.Raw, &s); err != nil {
				return fmt.Errorf("ERROR event: %w", err)
			}
			if s.Code == http.StatusGone {
				return errWatchGone
			}
			return fmt.Errorf("ERROR event: %d %s", s.Code, s.Message)
		}
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(ev.Object.Raw, &obj); err != nil {
			return fmt.Errorf("%s event: %w", ev.Type, err)
		}
		objRV, err := strconv.ParseUint(obj.ResourceVersion, 10, 64)
		if err != nil {
			return fmt.Errorf("%s event: resourceVersion %q", ev.Type, obj.ResourceVersion)
		}
		d.mu.Lock()
		if ev.Type != string(watch.Bookmark) {
			d.events = append(d.events, haEvent{Type: ev.Type, Name: obj.Name, RV: objRV})
		}
		d.last = objRV
		d.mu.Unlock()
	}
}

// apiserverLacks reports whether the apiserver (through the balancer) also
// answers a watch from rv with 410.
func (d *haDiffWatch) apiserverLacks(ctx context.Context, rv uint64) bool {
	q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatUint(rv, 10)}, "timeoutSeconds": {"1"}}
	body, _, err := openRawWatch(ctx, d.direct, d.path, q)
	if errors.Is(err, errWatchGone) {
		return true
	}
	if err != nil {
		return false
	}
	defer body.Close()
	var ev metav1.WatchEvent
	if err := json.NewDecoder(body).Decode(&ev); err != nil || ev.Type != string(watch.Error) {
		return false
	}
	var s metav1.Status
	return json.Unmarshal(ev.Object.Raw, &s) == nil && s.Code == http.StatusGone
}

// openRawWatch opens a JSON watch; errWatchGone for a 410 answer.
func openRawWatch(ctx context.Context, c rawClient, path string, q url.Values) (io.ReadCloser, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "listproxy-e2e")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusGone {
			return nil, nil, errWatchGone
		}
		return nil, nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
	}
	return resp.Body, resp.Header, nil
}

// compareWithEtcd waits until etcd's watch has reached etcd's current
// revision and the differential watch has seen etcd's last change, then
// compares the two sequences. It returns the number of events compared.
func compareWithEtcd(ctx context.Context, t *testing.T, d *haDiffWatch, o *etcdOracle) int {
	t.Helper()
	resp, err := o.client.Get(ctx, "compact_rev_key", clientv3.WithCountOnly())
	if err != nil {
		t.Errorf("etcd revision: %v", err)
		return 0
	}
	current := resp.Header.Revision
	var want, got []haEvent
	var last uint64
	var gone, historyLost bool
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_ = o.client.RequestProgress(ctx)
		o.mu.Lock()
		reached, werr := o.rev, o.err
		want = append([]haEvent(nil), o.events...)
		o.mu.Unlock()
		if werr != nil {
			return false, werr
		}
		got, last, gone, historyLost = d.snapshot()
		return reached >= current && (gone || len(want) == 0 || last >= want[len(want)-1].RV), nil
	})
	if err != nil {
		t.Errorf("the etcd watch or the differential watch never reached etcd's revision %d (watch through listproxy at %d): %v", current, last, err)
	}
	switch {
	case gone && historyLost:
		t.Logf("differential watch: listproxy and the apiserver both answered 410 for a watch from %d: no history to compare past it", last)
		want = want[:min(len(got), len(want))]
	case gone:
		t.Errorf("differential watch: listproxy answered 410 for a watch from %d, which the apiserver still serves", last)
	}
	if len(want) == 0 {
		t.Errorf("etcd saw no change of the namespace during the run")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("watch through listproxy from %d differs from etcd's changes (-etcd +listproxy):\n%s", d.from, diff)
	}
	return len(got)
}
