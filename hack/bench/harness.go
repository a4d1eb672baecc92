package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
)

// The measuring harness the scenarios run on: both sides' CPU rates, the
// series of one side's measurements, the alternation of the two sides,
// memory samples and the report's rows.

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
