package main

import (
	"context"
	"fmt"
	"net/url"
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
