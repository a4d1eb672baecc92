package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// coldInformers is how many pod informers the cold-replica storm starts:
// half watch-list clients (client-go's default), half LIST+WATCH.
const coldInformers = 20

// coldTarget is the least ratio of the apiserver's one full LIST (the
// sync) over its CPU during a storm on a cold replica, as a maximum: the
// storm may cost at most 1.2 of those lists.
const coldTarget = 1.2

// noWatchList marks a ListWatch as not supporting watch-list semantics
// (client-go watchlist.DoesClientNotSupportWatchListSemantics): its
// reflector lists, then watches.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// startExtraListproxy starts another listproxy process beside the
// harness's, with the same flags plus extra, on a new port, and waits until
// its /readyz answers 200. stop ends it.
func (e *env) startExtraListproxy(ctx context.Context, name string, extra ...string) (*target, func(), error) {
	clusterDir := filepath.Join(e.cfg.out, "cluster")
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{
		"--kubeconfig=" + filepath.Join(clusterDir, "admin.kubeconfig"),
		"--listen-address=" + addr,
		"--continue-token-keys-file=" + filepath.Join(clusterDir, "continue-token-keys"),
	}
	args = append(args, e.cfg.proofArgs(e.cp.EtcdEndpoint)...)
	args = append(append(args, e.cfg.listproxyArgs...), extra...)
	restore, err := setEnv(e.cfg.listproxyEnv)
	if err != nil {
		return nil, nil, err
	}
	p, err := framework.StartProcess(name, e.cfg.listproxyBin, args, filepath.Join(clusterDir, name+".log"))
	restore()
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		if err := p.Stop(); err != nil {
			logf("stop %s: %v", name, err)
		}
	}
	t := newProxiedTarget("http://"+addr, p.Pid())
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(waitCtx, http.MethodGet, t.base+"/readyz", nil)
		if resp, err := t.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return t, stop, nil
			}
		}
		select {
		case <-p.Done():
			_, exitErr := p.Exited()
			return nil, nil, fmt.Errorf("%s exited: %w\n%s", name, exitErr, framework.LogTail(p.LogFile, 30))
		case <-waitCtx.Done():
			stop()
			return nil, nil, fmt.Errorf("%s not ready: %w\n%s", name, waitCtx.Err(), framework.LogTail(p.LogFile, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mixedStorm starts n pod informers against t at once, even ones with
// watch-list and odd ones with LIST+WATCH, and waits until all have synced.
// It returns when they synced and the pods the first one holds.
func (e *env) mixedStorm(ctx context.Context, t *target, n int) (time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var read atomic.Int64
	infs := make([]cache.SharedIndexInformer, n)
	for i := range n {
		cs, err := kubernetes.NewForConfig(e.restConfigFor(t, &read))
		if err != nil {
			return 0, 0, err
		}
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().Pods("").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cs.CoreV1().Pods("").Watch(ctx, o)
			},
		}
		var lister cache.ListerWatcher = lw
		if i%2 == 1 {
			lister = cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{})
		}
		infs[i] = cache.NewSharedIndexInformerWithOptions(lister, &corev1.Pod{}, cache.SharedIndexInformerOptions{})
		if err := infs[i].SetTransform(stripPod); err != nil {
			return 0, 0, err
		}
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for _, inf := range infs {
		go inf.Run(ctx.Done())
		wg.Go(func() { cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	return time.Since(begin), len(infs[0].GetStore().ListKeys()), nil
}

// fullListCPU is the apiserver+etcd CPU time of one full LIST of pods as
// listproxy's sync sends it: JSON pages of 500, resourceVersion unset.
func (b *bench) fullListCPU(ctx context.Context) (float64, error) {
	s := sampler{t: b.env.direct, idleRate: b.idleDirect}
	s.startInterval()
	token := ""
	for {
		path := "/api/v1/pods?limit=500"
		if token != "" {
			path += "&continue=" + token
		}
		res, err := b.env.direct.do(ctx, request{path: path, accept: acceptJSON, keep: true})
		if err != nil {
			return 0, err
		}
		if token, err = listContinue(res.body); err != nil {
			return 0, err
		}
		if token == "" {
			break
		}
	}
	s.endInterval()
	return s.seconds(), nil
}

// coldStorm is the "cold replica" scenario: per repetition, the apiserver's
// CPU time for one full LIST of pods (the sync a listproxy store does);
// coldInformers informers started at once against the apiserver; and the
// same informers started against a listproxy that has just become ready
// and holds no store, whose requests wait for the one sync in flight
// (--cold-store-wait). Target: the apiserver spends at most coldTarget
// times one full LIST on the cold storm, and less than on the storm
// direct. Then a listproxy with --preload=pods measures the memory one
// protobuf store (the default for built-in resources) costs once ready.
func (b *bench) coldStorm(ctx context.Context) error {
	n := coldInformers
	reps := min(b.cfg.reps, 3)
	name := fmt.Sprintf("cold replica storm, %d pod informers (10 watch-list, 10 LIST+WATCH)", n)
	logf("scenario: %s (%d reps)", name, reps)
	d := b.newSeries(b.env.direct)
	p := &series{t: &target{name: "cold listproxy", proxied: true}, extra: map[string][]float64{}}
	apiViaProxy := sampler{t: b.env.direct, idleRate: b.idleDirect}
	var fullLists []float64
	for i := range reps {
		full, err := b.fullListCPU(ctx)
		if err != nil {
			return err
		}
		fullLists = append(fullLists, full)

		d.cpu.startInterval()
		took, got, err := b.env.mixedStorm(ctx, b.env.direct, n)
		d.cpu.endInterval()
		if err != nil {
			return err
		}
		d.durs = append(d.durs, took.Seconds())
		logf("  apiserver: %d informers synced %d pods in %s", n, got, ms(took.Seconds()))

		cold, stop, err := b.env.startExtraListproxy(ctx, fmt.Sprintf("listproxy-cold-%d", i), "--resources=pods")
		if err != nil {
			return err
		}
		idleRSS := rssBytes(cold.pids[0])
		before := cpuTime(cold.pids)
		apiViaProxy.startInterval()
		took, got, err = b.env.mixedStorm(ctx, cold, n)
		apiViaProxy.endInterval()
		p.cpu.cpu += cpuTime(cold.pids) - before
		if err == nil {
			var m framework.Metrics
			if m, err = scrape(ctx, cold); err == nil {
				passed := m.Sum("listproxy_http_requests_total", `verb="list"`, `source="apiserver"`) +
					m.Sum("listproxy_http_requests_total", `verb="watch"`, `source="apiserver"`)
				p.answers += n
				p.notSnapshot += int(passed)
				p.extra["rss_after_sync_mib"] = append(p.extra["rss_after_sync_mib"], float64(rssBytes(cold.pids[0]))/(1<<20))
				p.extra["rss_idle_mib"] = append(p.extra["rss_idle_mib"], float64(idleRSS)/(1<<20))
			}
		}
		stop()
		if err != nil {
			return err
		}
		p.durs = append(p.durs, took.Seconds())
		if got != b.cfg.pods {
			p.mismatches++
			if p.mismatch == "" {
				p.mismatch = fmt.Sprintf("an informer synced %d pods of %d", got, b.cfg.pods)
			}
		}
		p.checked++
		logf("  cold listproxy: %d informers synced %d pods in %s", n, got, ms(took.Seconds()))
	}

	// Warm start: the memory of one preloaded store (protobuf) of every pod.
	warm, stop, err := b.env.startExtraListproxy(ctx, "listproxy-preload", "--resources=pods", "--preload=pods")
	if err != nil {
		return err
	}
	preloadRSS := rssBytes(warm.pids[0])
	stop()

	requests := n * reps
	ds, ps := d.side(requests), p.side(requests)
	ps.APIServerCPUTotal = apiViaProxy.seconds()
	ps.APIServerCPUPerRequest = ps.APIServerCPUTotal / float64(requests)
	full := median(fullLists)
	perStorm := ps.APIServerCPUTotal / float64(reps)
	note := fmt.Sprintf("apiserver+etcd CPU: one full LIST (JSON, pages of 500) %s; per storm direct %s, on a cold listproxy %s (%.2f× one full LIST); "+
		"cold listproxy RSS idle %s MiB, after the storm %s MiB; a listproxy with --preload=pods (protobuf) ready at %.0f MiB RSS (%.1f MiB per 10,000 pods over the idle one)",
		ms(full), ms(ds.CPUTotal/float64(reps)), ms(perStorm), perStorm/full,
		fmt.Sprintf("%.0f", float64(ps.Extra["rss_idle_mib_p50"])), fmt.Sprintf("%.0f", float64(ps.Extra["rss_after_sync_mib_p50"])),
		float64(preloadRSS)/(1<<20), (float64(preloadRSS)/(1<<20)-float64(ps.Extra["rss_idle_mib_p50"]))*10000/float64(b.cfg.pods))
	b.addRow(name, ds, ps, targetSpec{APIServerCPU: 1}, note)
	r := &b.report.Rows[len(b.report.Rows)-1]
	r.Checks = append(r.Checks, check{
		Name: "apiserver+etcd CPU per cold storm", Want: fmt.Sprintf("≤ %g× one full LIST", coldTarget),
		Got: num(perStorm / full), Text: fmt.Sprintf("%.2f×", perStorm/full), Met: full > 0 && perStorm <= coldTarget*full,
	})
	logf("  %s", strings.TrimSpace(note))
	return nil
}
