package main

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listproxy/listproxy/pkg/wire"
)

// nodeAgentsResult is the node agents scenario's report.
type nodeAgentsResult struct {
	Watchers int `json:"watchers"`
	// NodesWithPods is how many of the watchers' nodes hold pods (the
	// seeded nodes); the writes change pods of those nodes only.
	NodesWithPods int                        `json:"nodes_with_pods"`
	Sides         map[string]*nodeAgentsSide `json:"sides"`
	// BaseCPUPerChange is each side's CPU per change for the same writes
	// with none of the scenario's watchers open ("apiserver": apiserver
	// and etcd, "listproxy": listproxy): the cost of the writes and of
	// listproxy's own store, subtracted to get the watchers' cost.
	BaseCPUPerChange map[string]num `json:"base_cpu_s_per_change"`
	// IdleRSSPerWatcher is listproxy's RSS growth per open watcher before
	// the writes start.
	IdleRSSPerWatcher num     `json:"listproxy_idle_rss_bytes_per_watcher"`
	Checks            []check `json:"checks"`
}

type nodeAgentsSide struct {
	WriteRate num `json:"writes_per_s"`
	Writes    int `json:"writes"`
	Events    int `json:"events"`
	// OpenSeconds is how long opening every watch-list took (initial
	// events and their end bookmark read).
	OpenSeconds num `json:"open_s"`
	DelayP50    num `json:"delay_p50_s"`
	DelayP99    num `json:"delay_p99_s"`
	// CPUPerChange is the answering processes' CPU per write (apiserver
	// and etcd direct, listproxy proxied); WatchersCPUPerChange is the
	// same minus BaseCPUPerChange.
	CPUPerChange         num `json:"cpu_s_per_change"`
	WatchersCPUPerChange num `json:"watchers_cpu_s_per_change"`
	NotSnapshot          int `json:"not_from_snapshot,omitempty"`
}

// nodeAgentsDuration is how long writes run per interval. Not tuned: 20 s
// at 100 writes/s gives 2,000 changes per side.
const nodeAgentsDuration = 20 * time.Second

// nodeAgentsOpenConcurrency bounds the watch-lists being opened at once,
// as node agents that start over a few seconds rather than at one instant.
const nodeAgentsOpenConcurrency = 64

// nodeAgents is the "node agents" scenario: BENCH_NODE_WATCHERS watchers,
// watcher i watching the pods of node i (fieldSelector=spec.nodeName=NODE,
// as a kubelet) with client-go's reflector's default start, a watch-list
// (sendInitialEvents=true, allowWatchBookmarks=true,
// resourceVersionMatch=NotOlderThan, resourceVersion ""), stay open while
// pods change at BENCH_WRITE_RATE, spread over the seeded nodes; first
// against the apiserver, then through listproxy. Before them, the same
// writes run with no scenario watcher open, to measure the cost of the
// writes themselves. It reports each side's CPU per change with and without
// that base, the delay from sending a write to its node's watcher reading
// its event, and listproxy's RSS growth per idle watcher. Targets:
// listproxy's CPU per change ≤ 2× the apiserver's and etcd's (the
// answering processes', as every scenario compares them); delivery p99
// ≤ direct + 5 ms; ≤ 32 KiB RSS per idle watcher.
func (b *bench) nodeAgents(ctx context.Context) error {
	n := b.cfg.nodeWatchers
	logf("scenario: node agents, %d watchers of one node's pods each under %d writes/s for %s per side", n, b.cfg.writeRate, nodeAgentsDuration)
	res := &nodeAgentsResult{Watchers: n, NodesWithPods: min(n, numNodes), Sides: map[string]*nodeAgentsSide{}, BaseCPUPerChange: map[string]num{}}

	// The base: the same writes, no scenario watcher, both sides sampled.
	direct, proxied := sampler{t: b.env.direct, idleRate: b.idleDirect}, sampler{t: b.env.proxied, idleRate: b.idleProxied}
	direct.startInterval()
	proxied.startInterval()
	sent, _ := b.nodeAgentsWrites(ctx)
	settle(ctx, b.idleDirect+b.idleProxied, b.env.direct, b.env.proxied)
	direct.endInterval()
	proxied.endInterval()
	if len(sent) == 0 {
		return fmt.Errorf("node agents: no write succeeded")
	}
	res.BaseCPUPerChange["apiserver"] = num(direct.seconds() / float64(len(sent)))
	res.BaseCPUPerChange["listproxy"] = num(proxied.seconds() / float64(len(sent)))
	logf("  base (writes only): apiserver+etcd %s, listproxy %s CPU per change", ms(float64(res.BaseCPUPerChange["apiserver"])), ms(float64(res.BaseCPUPerChange["listproxy"])))

	for _, t := range []*target{b.env.direct, b.env.proxied} {
		s, rss, err := b.nodeAgentsSide(ctx, t, n)
		if err != nil {
			return err
		}
		s.WatchersCPUPerChange = s.CPUPerChange - res.BaseCPUPerChange[t.name]
		res.Sides[t.name] = s
		if t.proxied {
			res.IdleRSSPerWatcher = num(rss)
		}
		logf("  %s: opened in %s, %d writes, %d events, delay p50 %s p99 %s, CPU per change %s (watchers' %s)%s", t.name, ms(float64(s.OpenSeconds)), s.Writes, s.Events,
			ms(float64(s.DelayP50)), ms(float64(s.DelayP99)), ms(float64(s.CPUPerChange)), ms(float64(s.WatchersCPUPerChange)), notFromSnapshot(s.NotSnapshot))
	}
	d, p := res.Sides["apiserver"], res.Sides["listproxy"]
	res.Checks = []check{
		{Name: "CPU per change", Want: "≤ 2× the apiserver's", Got: p.CPUPerChange,
			Text: fmt.Sprintf("%s vs %s (less the writes' own: %s vs %s)", ms(float64(p.CPUPerChange)), ms(float64(d.CPUPerChange)), ms(float64(p.WatchersCPUPerChange)), ms(float64(d.WatchersCPUPerChange))),
			Met:  p.CPUPerChange <= 2*d.CPUPerChange},
		{Name: "delivery p99", Want: "≤ direct + 5 ms", Got: p.DelayP99 - d.DelayP99,
			Text: fmt.Sprintf("%s vs %s", ms(float64(p.DelayP99)), ms(float64(d.DelayP99))), Met: p.DelayP99 <= d.DelayP99+0.005},
		{Name: "RSS per idle watcher", Want: "≤ 32 KiB", Got: res.IdleRSSPerWatcher,
			Text: fmt.Sprintf("%.1f KiB", float64(res.IdleRSSPerWatcher)/1024), Met: res.IdleRSSPerWatcher <= 32<<10},
		{Name: "from snapshots", Want: "all", Got: num(p.NotSnapshot), Text: fmt.Sprintf("%d of %d passed through", p.NotSnapshot, n), Met: p.NotSnapshot == 0},
	}
	b.report.NodeAgents = res
	return nil
}

// nodeAgentsSide opens the watchers against t, runs the writes, and returns
// its figures and, for listproxy, its RSS growth per idle watcher.
func (b *bench) nodeAgentsSide(ctx context.Context, t *target, n int) (*nodeAgentsSide, float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rssBefore := int64(0)
	if t.proxied {
		rssBefore = rssBytes(t.pids[0])
	}
	arrivals := make([][]arrival, n)
	var notSnapshot atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	synced := make(chan error, n)
	slots := make(chan struct{}, nodeAgentsOpenConcurrency)
	begin := time.Now()
	for i := range n {
		path := "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=&timeoutSeconds=3600&fieldSelector=" +
			url.QueryEscape("spec.nodeName="+nodeName(i))
		wg.Go(func() {
			slots <- struct{}{}
			resp, err := openStream(ctx, t, path)
			if err != nil {
				<-slots
				synced <- err
				return
			}
			defer resp.Body.Close()
			if t.proxied && resp.Header.Get("X-Listproxy-Served-From") != "snapshot" {
				notSnapshot.Add(1)
			}
			d := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
			initial := true
			for {
				ev, err := d.Next()
				if err != nil {
					if initial {
						<-slots
						synced <- fmt.Errorf("%s watch %s: before the initial events ended: %w", t.name, path, err)
					}
					return
				}
				switch {
				case initial && ev.InitialEventsEnd:
					initial = false
					<-slots
					synced <- nil
				case !initial && ev.Type == wire.Modified:
					arrivals[i] = append(arrivals[i], arrival{rv: ev.ResourceVersion, at: time.Now()})
				}
			}
		})
	}
	for range n {
		if err := <-synced; err != nil {
			return nil, 0, err
		}
	}
	s := &nodeAgentsSide{NotSnapshot: int(notSnapshot.Load()), OpenSeconds: num(time.Since(begin).Seconds())}
	cpu := b.newSeries(t).cpu
	// Opening is done when the answering processes are idle again.
	settle(ctx, cpu.idleRate, t)
	idle := 0.0
	if t.proxied {
		idle = float64(rssBytes(t.pids[0])-rssBefore) / float64(n)
	}

	cpu.startInterval()
	sent, rate := b.nodeAgentsWrites(ctx)
	// Events of the last writes are still on their way, and the
	// processes' work after them counts too.
	settle(ctx, cpu.idleRate, t)
	cpu.endInterval()
	cancel()
	wg.Wait()
	s.Writes = len(sent)
	s.WriteRate = num(rate)
	if len(sent) > 0 {
		s.CPUPerChange = num(cpu.seconds() / float64(len(sent)))
	}
	delays := deliveryDelays(arrivals, sent)
	s.Events = len(delays)
	s.DelayP50, s.DelayP99 = num(percentile(delays, 50)), num(percentile(delays, 99))
	return s, idle, nil
}

// nodeAgentsWrites patches pods at BENCH_WRITE_RATE for nodeAgentsDuration
// (the steady state's writes: pods of every seeded node in turn).
func (b *bench) nodeAgentsWrites(ctx context.Context) (map[string]time.Time, float64) {
	return b.writes(ctx, nodeAgentsDuration, "node-agents")
}
