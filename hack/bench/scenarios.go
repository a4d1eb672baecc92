package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// bench runs the scenarios and fills the report.
type bench struct {
	cfg    config
	env    *env
	report *report
	// idle CPU rates (CPU seconds per second) of each side's processes,
	// and of etcd alone.
	idleDirect, idleProxied, idleEtcd float64
	// background, while set, replaces the idle rates in the series that
	// newSeries makes: the rates measured with a scenario's background
	// work (its writes) running alone, so that their cost is subtracted
	// from every interval as the idle rate is.
	background *cpuRates
}

// cpuRates are CPU seconds per second of kube-apiserver+etcd (the direct
// side's processes), of listproxy, and of etcd alone.
type cpuRates struct {
	direct, proxied, etcd float64
}

// measureRates samples the rates of both sides' processes and of etcd over
// d, at once.
func (b *bench) measureRates(ctx context.Context, d time.Duration) cpuRates {
	var r cpuRates
	var wg sync.WaitGroup
	wg.Go(func() { r.direct = measureIdle(ctx, b.env.direct, d) })
	wg.Go(func() { r.proxied = measureIdle(ctx, b.env.proxied, d) })
	wg.Go(func() { r.etcd = measureIdle(ctx, b.env.etcd, d) })
	wg.Wait()
	return r
}

func (b *bench) runAll(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"memory", b.memoryIdle},
		{"", b.idleCPU},
		{"full", b.fullList},
		{"walk", b.walks},
		{"firstpage", b.firstPage},
		{"nodename", b.nodeName},
		{"table", b.table},
		{"consistent", b.consistent},
		{"consistent-quiet", b.consistentQuiet},
		{"parity", b.parity},
		{"storm", b.informerStorm},
		{"steady", b.steady},
		{"nodeagents", b.nodeAgents},
		{"sharded", b.sharded},
		{"cold", b.coldStorm},
		{"rollout", b.rollout},
		{"memory", b.memoryChurn},
	}
	for _, s := range steps {
		if s.name != "" && !b.cfg.scenarios[s.name] {
			continue
		}
		if err := s.fn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// series collects one side's measurements of a scenario.
type series struct {
	t           *target
	cpu         sampler
	etcd        sampler   // etcd alone, over the same intervals as cpu
	api         sampler   // on listproxy's side, kube-apiserver+etcd over its intervals
	apiCalls    []float64 // kube-apiserver+etcd CPU per alternated call (net; see apiNet)
	durs        []float64
	bytes       []int64
	answers     int // responses (a walk counts each page)
	notSnapshot int
	notGzip     int
	extra       map[string][]float64
	// settle, when set, waits for every process to go quiet (see settle);
	// the clock restarts after an off-clock check only once it returns.
	settle func()
	// Content checks of listproxy's answers against the apiserver's.
	checked    int
	mismatches int
	mismatch   string // the first
}

func (b *bench) newSeries(t *target) *series {
	rates := cpuRates{direct: b.idleDirect, proxied: b.idleProxied, etcd: b.idleEtcd}
	if b.background != nil {
		rates = *b.background
	}
	idle := rates.direct
	if t.proxied {
		idle = rates.proxied
	}
	// api is what the requests through listproxy cost the apiserver: its
	// freshness probes, what it passed through.
	return &series{
		t: t, cpu: sampler{t: t, idleRate: idle}, etcd: sampler{t: b.env.etcd, idleRate: rates.etcd},
		api:   sampler{t: b.env.direct, idleRate: rates.direct},
		extra: map[string][]float64{},
	}
}

// add records one request (or one unit, such as a walk) of res.
func (s *series) add(res result, wantGzip bool) {
	s.durs = append(s.durs, res.dur.Seconds())
	s.bytes = append(s.bytes, res.bytes)
	s.answer(res)
	if wantGzip && !res.gzipped {
		s.notGzip++
	}
}

// answer counts one response and whether listproxy answered it from a
// snapshot.
func (s *series) answer(res result) {
	s.answers++
	if s.t.proxied && !res.fromSnapshot {
		s.notSnapshot++
	}
}

// startInterval and endInterval bracket a measured interval of the side's
// processes and of etcd.
func (s *series) startInterval() {
	s.cpu.startInterval()
	s.etcd.startInterval()
	if s.t.proxied {
		s.api.startInterval()
	}
}

func (s *series) endInterval() {
	s.cpu.endInterval()
	s.etcd.endInterval()
	if s.t.proxied {
		s.api.endInterval()
	}
}

// apiNet is the net kube-apiserver+etcd CPU time of the side's intervals
// so far (sampler.net): of its own processes directly, of the apiserver's
// through listproxy.
func (s *series) apiNet() float64 {
	if s.t.proxied {
		return s.api.net()
	}
	return s.cpu.net()
}

// sampled says whether the i-th of n requests of a scenario has its content
// checked: the first, the last and about eight in between.
func sampled(i, n int) bool {
	return i == 0 || i == n-1 || i%max(1, n/8) == 0
}

// offClock runs f outside the series' CPU and wall accounting: content
// checks cost the harness and the apiserver, not the side measured.
func (s *series) offClock(f func()) {
	s.endInterval()
	defer s.startInterval()
	f()
	if s.settle != nil {
		s.settle()
	}
}

// checkContent compares listproxy's answer res to path (asked without a
// resourceVersion) with the apiserver's answer at the same resourceVersion,
// off the clock. It does nothing on the apiserver side.
func (s *series) checkContent(ctx context.Context, api *target, path string, res result) {
	if !s.t.proxied {
		return
	}
	s.offClock(func() {
		got, err := decodeList(res)
		if err == nil {
			_, err = compareWithAPIServer(ctx, api, exactAt(path, got.rv), got)
		}
		s.noteCheck(err)
	})
}

// noteCheck records the outcome of one content check.
func (s *series) noteCheck(err error) {
	s.checked++
	if err != nil {
		s.mismatches++
		if s.mismatch == "" {
			s.mismatch = err.Error()
		}
		logf("  CONTENT MISMATCH: %v", err)
	}
}

func (s *series) side(requests int) side {
	sd := side{
		Requests:        requests,
		WallP50:         median(s.durs),
		WallP99:         percentile(s.durs, 99),
		CPUPerRequest:   s.cpu.seconds() / float64(max(1, requests)),
		CPUTotal:        s.cpu.seconds(),
		EtcdCPUTotal:    s.etcd.seconds(),
		Answers:         s.answers,
		NotSnapshot:     s.notSnapshot,
		NotGzip:         s.notGzip,
		ContentChecked:  s.checked,
		ContentMismatch: s.mismatches,
		FirstMismatch:   s.mismatch,
	}
	if s.t.proxied {
		sd.APIServerCPUTotal = s.api.seconds()
		sd.APIServerCPUPerRequest = sd.APIServerCPUTotal / float64(max(1, requests))
	}
	sd.APIServerCPUCalls, sd.APIServerCPUCallStdDev = len(s.apiCalls), stddev(s.apiCalls)
	for _, c := range s.apiCalls {
		sd.APIServerCPUNet += c
	}
	if len(s.bytes) > 0 {
		var total int64
		for _, n := range s.bytes {
			total += n
		}
		sd.Bytes = total / int64(len(s.bytes))
	}
	if len(s.extra) > 0 {
		sd.Extra = map[string]num{}
		for k, xs := range s.extra {
			sd.Extra[k+"_p50"] = num(median(xs))
			sd.Extra[k+"_p99"] = num(percentile(xs, 99))
		}
	}
	return sd
}

// alternate runs fn n times on each side, alternating which side goes
// first, with each side's CPU time sampled around its own calls only.
func (b *bench) alternate(ctx context.Context, n int, fn func(ctx context.Context, s *series, i int) error) (*series, *series, error) {
	return b.alternatePaced(ctx, n, false, fn)
}

// alternateSettled is alternate for calls that each do much work (a full
// LIST, a walk, a batch of clients): every process settles before a call
// is timed, and the side's interval runs until its processes have settled
// after the call, so that the work a call leaves behind is counted for its
// side and runs into no other interval. "trailing_cpu_s" records, per call,
// how much CPU time the side spent after its last response.
func (b *bench) alternateSettled(ctx context.Context, n int, fn func(ctx context.Context, s *series, i int) error) (*series, *series, error) {
	return b.alternatePaced(ctx, n, true, fn)
}

func (b *bench) alternatePaced(ctx context.Context, n int, settled bool, fn func(ctx context.Context, s *series, i int) error) (*series, *series, error) {
	d, p := b.newSeries(b.env.direct), b.newSeries(b.env.proxied)
	settleAll := func() {
		// The harness's own garbage (read responses, decoded checks) is
		// collected now, not while it reads the next timed responses.
		runtime.GC()
		settle(ctx, b.idleDirect+b.idleProxied, b.env.direct, b.env.proxied)
	}
	if settled {
		d.settle, p.settle = settleAll, settleAll
	}
	for i := range n {
		order := []*series{d, p}
		if i%2 == 1 {
			order = []*series{p, d}
		}
		for _, s := range order {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			if settled {
				settleAll()
			}
			apiBefore := s.apiNet()
			s.startInterval()
			err := fn(ctx, s, i)
			if settled {
				before := cpuTime(s.t.pids)
				settleAll()
				s.extra["trailing_cpu_s"] = append(s.extra["trailing_cpu_s"], (cpuTime(s.t.pids) - before).Seconds())
			}
			s.endInterval()
			s.apiCalls = append(s.apiCalls, s.apiNet()-apiBefore)
			if err != nil {
				return nil, nil, err
			}
		}
	}
	return d, p, nil
}

func (b *bench) idleCPU(ctx context.Context) error {
	r := b.measureRates(ctx, 5*time.Second)
	b.idleDirect, b.idleProxied, b.idleEtcd = r.direct, r.proxied, r.etcd
	b.report.IdleCPU = map[string]float64{"apiserver+etcd": b.idleDirect, "listproxy": b.idleProxied, "etcd": b.idleEtcd}
	logf("idle CPU: apiserver+etcd %.3f, listproxy %.3f CPU-s/s (subtracted from measurements)", b.idleDirect, b.idleProxied)
	return ctx.Err()
}

func (b *bench) fullList(ctx context.Context) error {
	cases := []struct {
		name, accept string
		gzip         bool
		target       targetSpec
	}{
		{"full LIST, JSON", acceptJSON, false, targetSpec{CPU: 30, Wall: 10}},
		{"full LIST, protobuf", acceptProtobuf, false, targetSpec{CPU: 30, Wall: 10}},
		{"full LIST, JSON + gzip", acceptJSON, true, targetSpec{CPU: 10}},
	}
	for _, c := range cases {
		logf("scenario: %s (%d reps)", c.name, b.cfg.reps)
		req := request{path: "/api/v1/pods", accept: c.accept, gzip: c.gzip}
		d, p, err := b.alternateSettled(ctx, b.cfg.reps, func(ctx context.Context, s *series, i int) error {
			// A sampled repetition through listproxy adds a checked
			// LIST off the clock before the measured one: reading a
			// whole list into memory to compare it is slower than
			// discarding it, as the measured requests of both sides do.
			if s.t.proxied && sampled(i, b.cfg.reps) {
				var err error
				s.offClock(func() {
					checked := req
					checked.keep = true
					var res result
					if res, err = s.t.do(ctx, checked); err != nil {
						return
					}
					s.answer(res)
					got, cerr := decodeList(res)
					if cerr == nil {
						_, cerr = compareWithAPIServer(ctx, b.env.direct, exactAt(req.path, got.rv), got)
					}
					s.noteCheck(cerr)
				})
				if err != nil {
					return err
				}
			}
			res, err := s.t.do(ctx, req)
			if err != nil {
				return err
			}
			s.add(res, c.gzip)
			return nil
		})
		if err != nil {
			return err
		}
		ds, ps := d.side(b.cfg.reps), p.side(b.cfg.reps)
		b.addRow(c.name, ds, ps, c.target, trailingNote(ds, ps))
	}
	return nil
}

// walk walks collection (a path without query) in pages of limit
// (resourceVersion unset, as kubectl does). A measured walk records
// its wall time, bytes and first and last page times. A checked walk compares
// every page with the apiserver's at the same resourceVersion and runs wholly
// off the clock: it counts answers and checks only, so that the checks'
// pauses between pages do not change what a measured walk costs either side.
func walk(ctx context.Context, s *series, api *target, collection string, limit int, check bool) error {
	if check {
		var err error
		s.offClock(func() { err = walkPages(ctx, s, api, collection, limit, true) })
		return err
	}
	return walkPages(ctx, s, api, collection, limit, false)
}

func walkPages(ctx context.Context, s *series, api *target, collection string, limit int, check bool) error {
	begin := time.Now()
	var total result
	var pages []float64
	first := collection + "?limit=" + strconv.Itoa(limit)
	cont, apiCont := "", ""
	for {
		path := first
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		res, err := s.t.do(ctx, request{path: path, accept: acceptJSON, keep: true})
		if err != nil {
			return err
		}
		pages = append(pages, res.dur.Seconds())
		total.bytes += res.bytes
		s.answer(res)
		if cont, err = listContinue(res.body); err != nil {
			return err
		}
		if check {
			got, err := decodeList(res)
			if err != nil {
				s.noteCheck(err)
				return nil
			}
			apiPath := exactAt(first, got.rv)
			if len(pages) > 1 {
				apiPath = first + "&continue=" + url.QueryEscape(apiCont)
			}
			want, err := compareWithAPIServer(ctx, api, apiPath, got)
			if err != nil {
				s.noteCheck(err)
				return nil // the walks diverged; compare no further
			}
			apiCont = want.cont
			if cont == "" {
				s.noteCheck(nil)
			}
		}
		if cont == "" {
			break
		}
	}
	if check {
		return nil
	}
	total.dur = time.Since(begin)
	s.durs = append(s.durs, total.dur.Seconds())
	s.bytes = append(s.bytes, total.bytes)
	s.extra["first_page_s"] = append(s.extra["first_page_s"], pages[0])
	s.extra["last_page_s"] = append(s.extra["last_page_s"], pages[len(pages)-1])
	s.extra["pages"] = append(s.extra["pages"], float64(len(pages)))
	return nil
}

func (b *bench) walks(ctx context.Context) error {
	for _, limit := range b.cfg.walkLimits {
		name := fmt.Sprintf("paginated walk, limit=%d", limit)
		logf("scenario: %s (%d reps)", name, b.cfg.reps)
		d, p, err := b.alternateSettled(ctx, b.cfg.reps, func(ctx context.Context, s *series, i int) error {
			// A sampled repetition through listproxy adds a checked walk
			// before the measured one.
			if s.t.proxied && sampled(i, b.cfg.reps) {
				if err := walk(ctx, s, b.env.direct, "/api/v1/pods", limit, true); err != nil {
					return err
				}
			}
			return walk(ctx, s, b.env.direct, "/api/v1/pods", limit, false)
		})
		if err != nil {
			return err
		}
		ps := p.side(b.cfg.reps)
		ds := d.side(b.cfg.reps)
		note := fmt.Sprintf("first/last page p50: apiserver %s / %s, listproxy %s / %s; etcd CPU per walk: direct %s, through listproxy %s",
			ms(ds.Extra["first_page_s_p50"]), ms(ds.Extra["last_page_s_p50"]),
			ms(ps.Extra["first_page_s_p50"]), ms(ps.Extra["last_page_s_p50"]),
			ms(ds.EtcdCPUTotal/float64(b.cfg.reps)), ms(ps.EtcdCPUTotal/float64(b.cfg.reps)))
		note += "; " + trailingNote(ds, ps)
		spec := targetSpec{CPU: 30, LastFirst: 1.2}
		if continuePagesFromEtcd(b.report.Config.KubeVersion) {
			// The apiserver reads every continue page from etcd: the
			// walk is where listproxy must save the most.
			spec.CPU, spec.Wall, spec.EtcdCPU = 50, 10, 20
		}
		if limit == 1000 {
			spec.ProxiedCPUMax = 0.100
		}
		b.addRow(name, ds, ps, spec, note)
	}
	return nil
}

// trailingNote says how much of a settled scenario's CPU time each side
// spent after its last response (see alternateSettled).
func trailingNote(ds, ps side) string {
	return fmt.Sprintf("CPU after the last response, p50 per call: apiserver %s, listproxy %s",
		ms(ds.Extra["trailing_cpu_s_p50"]), ms(ps.Extra["trailing_cpu_s_p50"]))
}

// continuePagesFromEtcd reports whether the apiserver of release version
// (MAJOR.MINOR.PATCH) reads continue pages from etcd: before 1.34 its watch
// cache kept no snapshots for them.
func continuePagesFromEtcd(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major == 1 && minor < 34
}

func (b *bench) firstPage(ctx context.Context) error {
	req := request{path: "/api/v1/pods?limit=500", accept: acceptJSON}
	name := "first page limit=500, 1 client"
	logf("scenario: %s (%d requests per side)", name, b.cfg.firstPageN)
	d, p, err := b.alternate(ctx, b.cfg.firstPageN, func(ctx context.Context, s *series, i int) error {
		req := req
		check := s.t.proxied && sampled(i, b.cfg.firstPageN)
		req.keep = check
		res, err := s.t.do(ctx, req)
		if err != nil {
			return err
		}
		s.add(res, false)
		if check {
			s.checkContent(ctx, b.env.direct, req.path, res)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.addRow(name, d.side(b.cfg.firstPageN), p.side(b.cfg.firstPageN), targetSpec{Wall: 10}, "")

	const perClient = 10
	name = fmt.Sprintf("first page limit=500, %d clients", b.cfg.concurrency)
	logf("scenario: %s (%d batches of %d×%d per side)", name, b.cfg.reps, b.cfg.concurrency, perClient)
	var mu sync.Mutex
	d, p, err = b.alternateSettled(ctx, b.cfg.reps, func(ctx context.Context, s *series, _ int) error {
		var wg sync.WaitGroup
		errs := make(chan error, b.cfg.concurrency)
		// One answer per batch (client 0's first) is checked after the batch.
		var kept result
		for c := range b.cfg.concurrency {
			wg.Go(func() {
				for j := range perClient {
					req := req
					req.keep = s.t.proxied && c == 0 && j == 0
					res, err := s.t.do(ctx, req)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					s.add(res, false)
					if req.keep {
						kept = res
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if s.t.proxied {
			s.checkContent(ctx, b.env.direct, req.path, kept)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := b.cfg.reps * b.cfg.concurrency * perClient
	b.addRow(name, d.side(n), p.side(n), targetSpec{WallP99: 5}, "")
	return nil
}

func (b *bench) nodeName(ctx context.Context) error {
	n := b.cfg.selectorRequests
	name := "pods by spec.nodeName (kubelet)"
	logf("scenario: %s (%d requests per side)", name, n)
	d, p, err := b.alternate(ctx, n, func(ctx context.Context, s *series, i int) error {
		path := "/api/v1/pods?fieldSelector=" + url.QueryEscape("spec.nodeName="+nodeName(i%numNodes))
		check := s.t.proxied && sampled(i, n)
		res, err := s.t.do(ctx, request{path: path, accept: acceptJSON, keep: check})
		if err != nil {
			return err
		}
		s.add(res, false)
		if check {
			s.checkContent(ctx, b.env.direct, path, res)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.addRow(name, d.side(n), p.side(n), targetSpec{Wall: 5}, "resourceVersion unset (consistent)")
	return nil
}

func (b *bench) consistent(ctx context.Context) error {
	name := fmt.Sprintf("consistent first page limit=500 under %d writes/s", b.cfg.writeRate)
	f, err := b.consistentReads(ctx, name, "/api/v1/pods?limit=500", b.cfg.consistentN, 0.110)
	b.report.Freshness = f
	return err
}

// consistentReads is a consistent-read scenario: n consistent LISTs of path
// per side, alternating, while pods are written at BENCH_WRITE_RATE, with
// listproxy's freshness wait and, without etcd, what its proofs cost the
// apiserver. Its row's target is a freshness wait p99 ≤ p99Max.
func (b *bench) consistentReads(ctx context.Context, name, path string, n int, p99Max float64) (*freshness, error) {
	logf("scenario: %s (%d requests per side)", name, n)
	w := b.env.startWriter(ctx, b.cfg.writeRate)
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second): // reach the write rate
	}
	before, err := scrape(ctx, b.env.proxied)
	if err != nil {
		w.stop()
		return nil, err
	}
	req := request{path: path, accept: acceptJSON}
	d, p, err := b.alternate(ctx, n, func(ctx context.Context, s *series, i int) error {
		req := req
		check := s.t.proxied && sampled(i, n)
		req.keep = check
		res, err := s.t.do(ctx, req)
		if err != nil {
			return err
		}
		s.add(res, false)
		if check {
			s.checkContent(ctx, b.env.direct, req.path, res)
		}
		return nil
	})
	if err != nil {
		w.stop()
		return nil, err
	}
	after, err := scrape(ctx, b.env.proxied)
	rate := w.stop()
	if err != nil {
		return nil, err
	}
	// Every consistent read counts, those that fell back included: a
	// fallback's wait (until it gave up) is what its client waited before
	// being passed through.
	const hist = "listproxy_freshness_wait_duration_seconds"
	p50, count := histogramQuantile(before, after, hist, 0.50)
	p99, _ := histogramQuantile(before, after, hist, 0.99)
	served := after.Sum(hist+"_count", `outcome="served"`) - before.Sum(hist+"_count", `outcome="served"`)
	notServed := count - served
	f := &freshness{
		WritesPerSecond: rate, WritesFailed: w.failed.Load(), WritesDropped: w.dropped.Load(),
		WaitP50: num(p50), WaitP99: num(p99), Served: served, NotServed: notServed,
		Probes:     delta(before, after, "listproxy_freshness_apiserver_probe_duration_seconds_count"),
		AuxWatches: delta(before, after, "listproxy_freshness_aux_watches_total"),
		ProofPaths: map[string]float64{},
	}
	var paths []string
	for _, path := range []string{"fast", "aux", "no_bookmarks", "inconclusive", "timeout"} {
		if n := delta(before, after, "listproxy_freshness_apiserver_proofs_total", `path="`+path+`"`); n > 0 {
			f.ProofPaths[path] = n
			paths = append(paths, fmt.Sprintf("%s %.0f", path, n))
		}
	}
	ps := p.side(n)
	ps.Extra = map[string]num{"freshness_wait_p50_s": num(p50), "freshness_wait_p99_s": num(p99)}
	note := fmt.Sprintf("writes %.0f/s achieved; listproxy freshness wait p50 %s, p99 %s (histogram of all %0.f consistent reads, %0.f of them not proven and passed through); CPU includes the writes",
		rate, ms(p50), ms(p99), count, notServed)
	if b.cfg.consistentProof == "apiserver" {
		note += fmt.Sprintf("; proven through the apiserver: %.0f probes, %.0f auxiliary watches, proofs by path: %s", f.Probes, f.AuxWatches, strings.Join(paths, ", "))
	}
	b.addRow(name, d.side(n), ps, targetSpec{FreshnessP99Max: p99Max}, note)
	return f, nil
}

// quietNamespace holds the quiet resource of the "consistent-quiet"
// scenario: quietConfigMaps configmaps that nothing writes.
const (
	quietNamespace  = "bench-quiet"
	quietConfigMaps = 20
)

// consistentQuiet is the consistent-read scenario on a quiet resource in a
// busy cluster: consistent LISTs of configmaps nothing writes, while pods
// are written at BENCH_WRITE_RATE, so that the cluster's revision moves
// past the configmaps' last change. With etcd, its progress notifications
// prove it; without, an auxiliary watch's bookmark does.
func (b *bench) consistentQuiet(ctx context.Context) error {
	if err := b.env.createQuietConfigMaps(ctx); err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + quietNamespace + "/configmaps"
	if err := warmPath(ctx, b.env.proxied, path+"?resourceVersion=0", acceptJSON, b.env.listproxy.LogFile); err != nil {
		return err
	}
	name := fmt.Sprintf("consistent LIST of a quiet resource (%d configmaps) under %d pod writes/s", quietConfigMaps, b.cfg.writeRate)
	f, err := b.consistentReads(ctx, name, path, max(b.cfg.consistentN/4, 10), 2.5)
	b.report.FreshnessQuiet = f
	return err
}

func (b *bench) memoryIdle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second): // let the warm-up's garbage be collected
	}
	return b.memorySample(ctx, "idle, after warm-up")
}

func (b *bench) memoryChurn(ctx context.Context) error {
	if err := b.memorySample(ctx, "after the scenarios"); err != nil {
		return err
	}
	if b.cfg.churn <= 0 {
		return nil
	}
	logf("churn: %d writes/s for %s", b.cfg.writeRate, b.cfg.churn)
	w := b.env.startWriter(ctx, b.cfg.writeRate)
	select {
	case <-ctx.Done():
	case <-time.After(b.cfg.churn):
	}
	rate := w.stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return b.memorySample(ctx, fmt.Sprintf("after %s of churn (%.0f writes/s)", b.cfg.churn, rate))
}

func (b *bench) memorySample(ctx context.Context, phase string) error {
	m, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	var apiserverRSS int64
	for _, p := range b.env.cp.Processes() {
		if p.Name == "kube-apiserver" {
			apiserverRSS = rssBytes(p.Pid())
		}
	}
	s := memorySample{
		Phase:          phase,
		SnapshotBytes:  m.Sum("listproxy_snapshot_bytes"),
		HistoryBytes:   m.Sum("listproxy_snapshot_history_bytes"),
		HistoryDepth:   m.Sum("listproxy_snapshot_history_depth"),
		Objects:        m.Sum("listproxy_snapshot_objects"),
		HeapInuse:      m.Sum("go_memstats_heap_inuse_bytes"),
		HeapAlloc:      m.Sum("go_memstats_heap_alloc_bytes"),
		NextGC:         m.Sum("go_memstats_next_gc_bytes"),
		GOGC:           100,
		RSS:            m.Sum("process_resident_memory_bytes"),
		APIServerRSS:   float64(apiserverRSS),
		ListproxyProcs: float64(rssBytes(b.env.listproxy.Pid())),
	}
	if m.Has("go_gc_gogc_percent") {
		s.GOGC = m.Sum("go_gc_gogc_percent")
	}
	if s.GOGC > 0 {
		s.LiveHeap = s.NextGC / (1 + s.GOGC/100)
	}
	if s.SnapshotBytes > 0 {
		s.RSSRatio = s.RSS / s.SnapshotBytes
		s.HeapRatio = s.HeapInuse / s.SnapshotBytes
		s.HistoryRatio = s.HistoryBytes / s.SnapshotBytes
	}
	b.report.Memory = append(b.report.Memory, s)
	logf("memory %s: snapshots %s (+%s history), live heap ~%s, heap in use %s, RSS %s (%.2f× snapshots)", phase,
		mib(s.SnapshotBytes), mib(s.HistoryBytes), mib(s.LiveHeap), mib(s.HeapInuse), mib(s.RSS), s.RSSRatio)
	return nil
}

func (b *bench) addRow(name string, d, p side, spec targetSpec, note string) {
	r := row{Scenario: name, Direct: d, Proxied: p, Target: spec, Notes: note}
	r.WallRatio = num(ratio(d.WallP50, p.WallP50))
	r.WallP99Ratio = num(ratio(d.WallP99, p.WallP99))
	r.CPURatio = num(ratio(d.CPUPerRequest, p.CPUPerRequest))
	r.evaluate()
	b.report.Rows = append(b.report.Rows, r)
	logf("  %s: wall p50 %s vs %s (%.1f×), CPU/req %s vs %s (%.1f×), %s vs %s%s",
		name, ms(d.WallP50), ms(p.WallP50), r.WallRatio, ms(d.CPUPerRequest), ms(p.CPUPerRequest), r.CPURatio,
		bytesText(d.Bytes), bytesText(p.Bytes), notSnapshotText(p))
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return a / b
}

func notSnapshotText(p side) string {
	s := ""
	if p.NotSnapshot > 0 {
		s += fmt.Sprintf(" (%d listproxy answers NOT from a snapshot)", p.NotSnapshot)
	}
	if p.NotGzip > 0 {
		s += fmt.Sprintf(" (%d listproxy answers not gzipped)", p.NotGzip)
	}
	return s
}
