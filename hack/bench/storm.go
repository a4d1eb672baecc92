package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
)

// stormResult is one storm: when each informer synced, and the stores of
// the informers kept for a content check.
type stormResult struct {
	all   time.Duration   // until every informer synced
	each  []time.Duration // per informer
	bytes int64           // response body bytes read until all synced
	kept  []cache.SharedIndexInformer
	close func()
}

// countingTransport counts the response body bytes its client reads.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{ReadCloser: resp.Body, n: t.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// restConfigFor is the client configuration of an agent talking to t: the
// apiserver with the admin's credentials, or listproxy (which uses its
// own) over plain HTTP. Everything else is client-go's default. Each
// agent dials its own connections, as separate processes would, rather
// than sharing client-go's cached transport.
func (e *env) restConfigFor(t *target, read *atomic.Int64) *rest.Config {
	var cfg *rest.Config
	if t.proxied {
		cfg = &rest.Config{Host: t.base}
	} else {
		cfg = rest.CopyConfig(e.cp.AdminConfig)
	}
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: read} }
	return cfg
}

// stripPod keeps what the content check compares: an informer's store of
// bare pods costs the harness little memory, while every pod is still
// received and decoded as a real agent's would be.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: p.Namespace, Name: p.Name, ResourceVersion: p.ResourceVersion, UID: p.UID,
	}}, nil
}

// storm starts n pod informers against t at once, with client-go's
// defaults (v0.37: WatchListClient on, so each one's first request is a
// watch-list), and waits until every one has synced. The informers are
// left running until close is called; keep says which are returned.
func (e *env) storm(ctx context.Context, t *target, n int, keep func(i int) bool) (stormResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	factories := make([]informers.SharedInformerFactory, n)
	infs := make([]cache.SharedIndexInformer, n)
	var read atomic.Int64
	for i := range n {
		cs, err := kubernetes.NewForConfig(e.restConfigFor(t, &read))
		if err != nil {
			cancel()
			return stormResult{}, err
		}
		factories[i] = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(stripPod))
		infs[i] = factories[i].Core().V1().Pods().Informer()
	}
	res := stormResult{each: make([]time.Duration, n)}
	res.close = func() {
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}
	begin := time.Now()
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	var wg sync.WaitGroup
	for i, inf := range infs {
		wg.Go(func() {
			select {
			case <-inf.HasSyncedChecker().Done():
				res.each[i] = time.Since(begin)
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	res.all = time.Since(begin)
	res.bytes = read.Load()
	if err := ctx.Err(); err != nil {
		res.close()
		return stormResult{}, err
	}
	for i, inf := range infs {
		if keep(i) {
			res.kept = append(res.kept, inf)
		}
	}
	return res, nil
}

// convergeTimeout bounds how long an informer may take, once the writes
// have stopped, to hold what the apiserver lists.
const convergeTimeout = time.Minute

// checkConverged compares an informer's store, once the writes have
// stopped, with the apiserver's LIST of pods: the same pods at the same
// resourceVersions. It polls the store, and lists again every few seconds
// (a write sent before the stop may land after a LIST), until they are
// equal or convergeTimeout has passed; then it reports the last difference.
func checkConverged(ctx context.Context, api *target, inf cache.SharedIndexInformer) error {
	return converge(ctx, api, "informer", func(want listView) error { return storeDiff(inf.GetStore(), want) })
}

// converge polls diff, the first difference between what informers hold
// and the apiserver's LIST of pods want, listing again every few seconds,
// until it is nil or convergeTimeout has passed; then it reports the last
// difference, of what ("informer").
func converge(ctx context.Context, api *target, what string, diff func(want listView) error) error {
	deadline := time.Now().Add(convergeTimeout)
	for {
		res, err := api.do(ctx, request{path: "/api/v1/pods", accept: acceptProtobuf, keep: true})
		if err != nil {
			return err
		}
		want, err := decodeList(res)
		if err != nil {
			return fmt.Errorf("apiserver LIST of pods: %w", err)
		}
		relist := time.Now().Add(5 * time.Second)
		for {
			err := diff(want)
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not converged %s after the writes stopped: %w", what, convergeTimeout, err)
			}
			if time.Now().After(relist) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// storeDiff is the first difference between an informer's store and the
// apiserver's list want, or nil.
func storeDiff(store cache.Store, want listView) error {
	if got := len(store.ListKeys()); got != len(want.items) {
		return fmt.Errorf("informer holds %d pods, the apiserver lists %d at RV %s", got, len(want.items), want.rv)
	}
	for _, o := range want.items {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		key := m.GetNamespace() + "/" + m.GetName()
		obj, ok, _ := store.GetByKey(key)
		if !ok {
			return fmt.Errorf("informer lacks pod %s, listed at RV %s", key, want.rv)
		}
		if got := obj.(*corev1.Pod).ResourceVersion; got != m.GetResourceVersion() {
			return fmt.Errorf("informer has pod %s at RV %s, the apiserver %s (list at RV %s)", key, got, m.GetResourceVersion(), want.rv)
		}
	}
	return nil
}

// stormWritesBase is how long the writes run alone to measure their own
// CPU cost. Not tuned: 10 s at 50 writes/s gives 500 changes.
const stormWritesBase = 10 * time.Second

// writesCost runs the storm's writes alone for stormWritesBase and returns
// the CPU time per write of kube-apiserver+etcd and of listproxy (its
// stores following them), net of their idle rates.
func (b *bench) writesCost(ctx context.Context) (api, proxy float64, err error) {
	direct, proxied := sampler{t: b.env.direct, idleRate: b.idleDirect}, sampler{t: b.env.proxied, idleRate: b.idleProxied}
	direct.startInterval()
	proxied.startInterval()
	w := b.env.startWriter(ctx, b.cfg.stormWrites)
	select {
	case <-ctx.Done():
	case <-time.After(stormWritesBase):
	}
	w.stop()
	settle(ctx, b.idleDirect+b.idleProxied, b.env.direct, b.env.proxied)
	direct.endInterval()
	proxied.endInterval()
	n := w.done.Load()
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("informer storm: no write succeeded (%d failed)", w.failed.Load())
	}
	return direct.seconds() / float64(n), proxied.seconds() / float64(n), nil
}

// informerStorm is the "informer storm" scenario: BENCH_INFORMERS pod
// informers start at once against the apiserver, then, separately,
// against listproxy, alternating which side goes first, while pods change
// at BENCH_STORM_WRITES per second (through the apiserver, on both sides,
// from the storm's start until every informer synced). Per side it
// measures the time until all have synced and the CPU time of
// kube-apiserver+etcd (both sides) and of listproxy (proxied side), less
// the writes' own cost (measured before, with the writes alone). Every
// watch-list through listproxy must have been served from its pods store
// (listproxy_watch_served_total), none passed through; the first and last
// informer of each listproxy storm must hold, once the writes stopped,
// what the apiserver lists. Then BENCH_SLOW_WATCHLISTS slow watch-lists
// measure listproxy's peak RSS (slowWatchLists).
func (b *bench) informerStorm(ctx context.Context) error {
	n := b.cfg.informers
	name := fmt.Sprintf("informer storm, %d pod informers (watch-list)", n)
	if b.cfg.stormWrites > 0 {
		name += fmt.Sprintf(", %d writes/s", b.cfg.stormWrites)
	}
	logf("scenario: %s (%d reps); warm: %s", name, b.cfg.reps, b.stormWarmed())
	var apiPerWrite, proxyPerWrite float64
	if b.cfg.stormWrites > 0 {
		var err error
		if apiPerWrite, proxyPerWrite, err = b.writesCost(ctx); err != nil {
			return err
		}
		logf("  writes alone: apiserver+etcd %s, listproxy %s CPU per write", ms(apiPerWrite), ms(proxyPerWrite))
	}
	d, p := b.newSeries(b.env.direct), b.newSeries(b.env.proxied)
	// The apiserver's and etcd's CPU time while informers sync through
	// listproxy.
	apiViaProxy := sampler{t: b.env.direct, idleRate: b.idleDirect}
	var served, passed, passedRequests float64
	var writes, writesFailed int64
	var writeSeconds float64
	for i := range b.cfg.reps {
		order := []*series{d, p}
		if i%2 == 1 {
			order = []*series{p, d}
		}
		for _, s := range order {
			before, err := scrape(ctx, b.env.proxied)
			if err != nil {
				return err
			}
			keep := func(j int) bool { return s.t.proxied && (j == 0 || j == n-1) }
			s.cpu.startInterval()
			if s.t.proxied {
				apiViaProxy.startInterval()
			}
			var w *writer
			if b.cfg.stormWrites > 0 {
				w = b.env.startWriter(ctx, b.cfg.stormWrites)
			}
			res, err := b.env.storm(ctx, s.t, n, keep)
			var done int64
			if w != nil {
				w.stop()
				done = w.done.Load()
				writes += done
				writesFailed += w.failed.Load()
				writeSeconds += w.end.Sub(w.begin).Seconds()
			}
			s.cpu.endInterval()
			if s.t.proxied {
				apiViaProxy.endInterval()
			}
			if err != nil {
				return err
			}
			// The writes' own cost is not the storm's.
			if s.t.proxied {
				s.cpu.less += proxyPerWrite * float64(done)
				apiViaProxy.less += apiPerWrite * float64(done)
			} else {
				s.cpu.less += apiPerWrite * float64(done)
			}
			// Off the clock: the intervals above have ended.
			for _, inf := range res.kept {
				s.noteCheck(checkConverged(ctx, b.env.direct, inf))
			}
			res.close()
			s.durs = append(s.durs, res.all.Seconds())
			s.bytes = append(s.bytes, res.bytes/int64(n))
			for _, e := range res.each {
				s.extra["informer_sync_s"] = append(s.extra["informer_sync_s"], e.Seconds())
			}
			after, err := scrape(ctx, b.env.proxied)
			if err != nil {
				return err
			}
			if s.t.proxied {
				served += initialWatchLists(after) - initialWatchLists(before)
				passed += after.Sum("listproxy_watch_passed_through_total") - before.Sum("listproxy_watch_passed_through_total")
				passedRequests += after.Sum("listproxy_http_requests_total", `verb="watch"`, `source="apiserver"`) -
					before.Sum("listproxy_http_requests_total", `verb="watch"`, `source="apiserver"`)
			}
			logf("  %s: %d informers synced in %s, %d writes meanwhile", s.t.name, n, ms(res.all.Seconds()), done)
		}
	}
	// Every informer sends one watch-list; any watch passed through
	// (a retry included) counts against the scenario.
	p.answers = n*b.cfg.reps + int(max(passed, passedRequests))
	p.notSnapshot = max(0, p.answers-int(served))
	requests := n * b.cfg.reps
	ps := p.side(requests)
	ps.APIServerCPUTotal = apiViaProxy.seconds()
	ps.APIServerCPUPerRequest = ps.APIServerCPUTotal / float64(requests)
	writesNote := "no writes"
	if b.cfg.stormWrites > 0 {
		// Before the subtraction, for the record: the estimate of the
		// writes' own cost may exceed what they cost during a storm.
		rawVia := apiViaProxy.less + apiViaProxy.seconds()
		if apiViaProxy.seconds() == 0 {
			rawVia = max(0, apiViaProxy.cpu.Seconds()-apiViaProxy.idleRate*apiViaProxy.wall.Seconds())
		}
		writesNote = fmt.Sprintf("%d pod writes during the storms (%.0f/s achieved of %d/s, %d failed), their own CPU subtracted (alone: apiserver+etcd %s, listproxy %s per write); "+
			"apiserver+etcd CPU during the storms through listproxy before the subtraction %s, the writes' estimate %s; "+
			"the content check is the first and last informer's store against the apiserver's LIST once the writes stopped",
			writes, float64(writes)/max(writeSeconds, 1e-9), b.cfg.stormWrites, writesFailed, ms(apiPerWrite), ms(proxyPerWrite), ms(rawVia), ms(apiViaProxy.less))
	}
	note := fmt.Sprintf("client-go defaults (JSON, WatchListClient on), one connection per informer; %s; per-informer sync p50/p99: apiserver %s / %s, listproxy %s / %s; "+
		"apiserver+etcd CPU per informer %s direct, %s through listproxy; %0.f watch-lists served from snapshots, %0.f passed through; "+
		"warm before the storm: %s",
		writesNote, ms(d.side(1).Extra["informer_sync_s_p50"]), ms(d.side(1).Extra["informer_sync_s_p99"]),
		ms(ps.Extra["informer_sync_s_p50"]), ms(ps.Extra["informer_sync_s_p99"]),
		ms(d.cpu.seconds()/float64(requests)), ms(ps.APIServerCPUPerRequest), served, max(passed, passedRequests), b.stormWarmed())
	b.addRow(name, d.side(requests), ps, targetSpec{APIServerCPU: 20, Wall: 1, CPU: 10}, note)
	if b.cfg.slowWatchLists > 0 {
		return b.slowWatchLists(ctx)
	}
	return nil
}

// initialWatchLists counts the watches listproxy served that started with
// initial events (watch-lists): listproxy_watch_served_total with a start
// label of initial_*.
func initialWatchLists(m framework.Metrics) float64 {
	var n float64
	for _, s := range m["listproxy_watch_served_total"] {
		if strings.HasPrefix(s.Labels["start"], "initial_") {
			n += s.Value
		}
	}
	return n
}

// stormWarmed says what was warm before the storm.
func (b *bench) stormWarmed() string {
	if b.cfg.consistentProof == "apiserver" {
		return "listproxy's pods stores (JSON, protobuf) synced; no etcd address (consistent reads proven through the apiserver)"
	}
	return "listproxy's pods stores (JSON, protobuf) synced, its etcd progress tracker started"
}
