package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// steadyResult is the steady-state watch scenario's report.
type steadyResult struct {
	Watchers  int `json:"watchers"`
	Namespace int `json:"namespaces"`
	// Per side ("apiserver", "listproxy").
	Sides map[string]*steadySide `json:"sides"`
	// BaseAPIServerWatches is the apiserver's open pod watches before
	// either side's watchers open (listproxy's stores' own among them).
	BaseAPIServerWatches num `json:"apiserver_pod_watches_before"`
	// IdleBytesPerWatcher is listproxy's heap and stack growth per open
	// watcher before the writes start.
	IdleBytesPerWatcher num     `json:"listproxy_idle_bytes_per_watcher"`
	Checks              []check `json:"checks"`
}

type steadySide struct {
	WriteRate num `json:"writes_per_s"`
	Events    int `json:"events"`
	// DelayP50 and DelayP99 are seconds from sending a write to a watcher
	// reading its event.
	DelayP50 num `json:"delay_p50_s"`
	DelayP99 num `json:"delay_p99_s"`
	// APIServerWatches is the apiserver's open pod watches
	// (apiserver_longrunning_requests) while the watchers were open.
	APIServerWatches num `json:"apiserver_pod_watches"`
	CPU              num `json:"cpu_s"` // of the answering processes
	NotSnapshot      int `json:"not_from_snapshot,omitempty"`
}

// steadyDuration is how long writes run per side. Not tuned: 30 s at 100
// writes/s gives 3,000 writes, each read by watchers/namespaces watchers.
const steadyDuration = 30 * time.Second

// steady is the "steady state" scenario: BENCH_WATCHERS pod watchers, each
// of one namespace (round robin), open at once from the current
// resourceVersion and stay open while pods of every namespace change at
// BENCH_WRITE_RATE; first against the apiserver, then through listproxy.
// It measures the apiserver's open pod watches, the delay from sending a
// write to each watcher reading its event (p50, p99), and listproxy's heap
// and stack growth per idle watcher. Targets: the apiserver holds a pod
// watch per listproxy store instead of one per watcher; delivery p99 through
// listproxy ≤ direct + 5 ms; ≤ 32 KiB per idle watcher.
func (b *bench) steady(ctx context.Context) error {
	n := b.cfg.watchers
	logf("scenario: steady state, %d pod watchers under %d writes/s for %s per side", n, b.cfg.writeRate, steadyDuration)
	res := &steadyResult{Watchers: n, Namespace: numNamespaces, Sides: map[string]*steadySide{}}
	base, err := apiserverPodWatches(ctx, b.env.direct)
	if err != nil {
		return err
	}
	res.BaseAPIServerWatches = base
	for _, t := range []*target{b.env.direct, b.env.proxied} {
		s, idle, err := b.steadySide(ctx, t, n)
		if err != nil {
			return err
		}
		res.Sides[t.name] = s
		if t.proxied {
			res.IdleBytesPerWatcher = num(idle)
		}
		logf("  %s: %d events, delay p50 %s p99 %s, apiserver pod watches %.0f, %.0f writes/s, CPU %.1f s%s", t.name, s.Events,
			ms(float64(s.DelayP50)), ms(float64(s.DelayP99)), float64(s.APIServerWatches), float64(s.WriteRate), float64(s.CPU), notFromSnapshot(s.NotSnapshot))
	}
	d, p := res.Sides["apiserver"], res.Sides["listproxy"]
	res.Checks = []check{
		{Name: "apiserver pod watches added by the watchers", Want: "none through listproxy (its stores watch once per format)", Got: p.APIServerWatches - base,
			Text: fmt.Sprintf("%.0f through listproxy, %.0f direct (%.0f open before)", float64(p.APIServerWatches-base), float64(d.APIServerWatches-base), float64(base)),
			Met:  p.APIServerWatches <= base},
		{Name: "delivery p99", Want: "≤ direct + 5 ms", Got: p.DelayP99 - d.DelayP99,
			Text: fmt.Sprintf("%s vs %s", ms(float64(p.DelayP99)), ms(float64(d.DelayP99))), Met: p.DelayP99 <= d.DelayP99+0.005},
		{Name: "memory per idle watcher", Want: "≤ 32 KiB", Got: res.IdleBytesPerWatcher,
			Text: fmt.Sprintf("%.1f KiB", float64(res.IdleBytesPerWatcher)/1024), Met: res.IdleBytesPerWatcher <= 32<<10},
		{Name: "from snapshots", Want: "all", Got: num(p.NotSnapshot), Text: fmt.Sprintf("%d of %d passed through", p.NotSnapshot, n), Met: p.NotSnapshot == 0},
	}
	b.report.Steady = res
	return nil
}

func notFromSnapshot(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d NOT from a snapshot)", n)
}

// arrival is one event a watcher read.
type arrival struct {
	rv string
	at time.Time
}

// steadySide runs the scenario against t and returns its figures and, for
// listproxy, its heap and stack growth per idle watcher.
func (b *bench) steadySide(ctx context.Context, t *target, n int) (*steadySide, float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rv, err := currentRV(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	var before framework.Metrics
	if t.proxied {
		if before, err = scrape(ctx, t); err != nil {
			return nil, 0, err
		}
	}
	arrivals := make([][]arrival, n)
	var notSnapshot atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	opened := make(chan error, n)
	for i := range n {
		ns := namespaceName(i % numNamespaces)
		path := fmt.Sprintf("/api/v1/namespaces/%s/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion=%s", ns, rv)
		wg.Go(func() {
			resp, err := openStream(ctx, t, path)
			opened <- err
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if t.proxied && resp.Header.Get("X-Listproxy-Served-From") != "snapshot" {
				notSnapshot.Add(1)
			}
			d := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
			for {
				ev, err := d.Next()
				if err != nil {
					return
				}
				if ev.Type == wire.Modified {
					arrivals[i] = append(arrivals[i], arrival{rv: ev.ResourceVersion, at: time.Now()})
				}
			}
		})
	}
	for range n {
		if err := <-opened; err != nil {
			return nil, 0, err
		}
	}
	s := &steadySide{NotSnapshot: int(notSnapshot.Load())}
	idle := 0.0
	if t.proxied {
		after, err := scrape(ctx, t)
		if err != nil {
			return nil, 0, err
		}
		grown := after.Sum("go_memstats_heap_inuse_bytes") + after.Sum("go_memstats_stack_inuse_bytes") -
			before.Sum("go_memstats_heap_inuse_bytes") - before.Sum("go_memstats_stack_inuse_bytes")
		idle = grown / float64(n)
	}
	if s.APIServerWatches, err = apiserverPodWatches(ctx, b.env.direct); err != nil {
		return nil, 0, err
	}

	cpu := sampler{t: t}
	cpu.startInterval()
	sent, rate := b.steadyWrites(ctx)
	// Events of the last writes are still on their way: wait as long
	// as the slowest delivery may take before ending the watches.
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
	cpu.endInterval()
	cancel()
	wg.Wait()
	s.CPU = num(cpu.seconds())
	s.WriteRate = num(rate)
	delays := deliveryDelays(arrivals, sent)
	s.Events = len(delays)
	s.DelayP50, s.DelayP99 = num(percentile(delays, 50)), num(percentile(delays, 99))
	return s, idle, nil
}

// deliveryDelays returns, for each event the watchers read whose write is
// in sent, the seconds from sending the write to reading its event.
func deliveryDelays(arrivals [][]arrival, sent map[string]time.Time) []float64 {
	var delays []float64
	for _, as := range arrivals {
		for _, a := range as {
			if at, ok := sent[a.rv]; ok {
				delays = append(delays, a.at.Sub(at).Seconds())
			}
		}
	}
	return delays
}

// steadyWrites patches pods at BENCH_WRITE_RATE for steadyDuration and
// returns when each resulting resourceVersion's write was sent, and the
// achieved rate.
func (b *bench) steadyWrites(ctx context.Context) (map[string]time.Time, float64) {
	return b.writes(ctx, steadyDuration, "steady")
}

// writes patches pods at BENCH_WRITE_RATE for d, each pod's annotation
// bench.listproxy.io/TAG, and returns when each resulting
// resourceVersion's write was sent, and the achieved rate.
func (b *bench) writes(ctx context.Context, d time.Duration, tag string) (map[string]time.Time, float64) {
	return b.writesAt(ctx, b.cfg.writeRate, d, tag)
}

// writesAt is writes at rate per second.
func (b *bench) writesAt(ctx context.Context, rate int, d time.Duration, tag string) (map[string]time.Time, float64) {
	var mu sync.Mutex
	sent := map[string]time.Time{}
	begin := time.Now()
	done := paceWrites(ctx, rate, d, func(i int) bool {
		p := b.env.pods[(i*7919)%len(b.env.pods)]
		// Unique per run and write, so that no patch is a no-op.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.listproxy.io/%s":"%d-%d"}}}`, tag, begin.UnixNano(), i)
		at := time.Now()
		pod, err := b.env.client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
		if err != nil {
			return false
		}
		mu.Lock()
		sent[pod.ResourceVersion] = at
		mu.Unlock()
		return true
	})
	return sent, float64(done) / time.Since(begin).Seconds()
}

// openStream starts a JSON watch and returns its response once the head
// arrived.
func openStream(ctx context.Context, t *target, path string) (*http.Response, error) {
	return openStreamAs(ctx, t, path, acceptJSON)
}

// openStreamAs starts a watch asking for accept and returns its response
// once the head arrived.
func openStreamAs(ctx context.Context, t *target, path, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", accept)
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s watch %s: %w", t.name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s watch %s: status %d", t.name, path, resp.StatusCode)
	}
	return resp, nil
}

// currentRV is t's latest resourceVersion of pods (resourceVersion=0).
func currentRV(ctx context.Context, t *target) (string, error) {
	return listRV(ctx, t, "/api/v1/pods?resourceVersion=0&limit=1")
}

// listRV is the resourceVersion of t's LIST at path.
func listRV(ctx context.Context, t *target, path string) (string, error) {
	res, err := t.do(ctx, request{path: path, accept: acceptJSON, keep: true})
	if err != nil {
		return "", err
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(res.body, &list); err != nil {
		return "", fmt.Errorf("%s: LIST %s: %w", t.name, path, err)
	}
	if list.Metadata.ResourceVersion == "" {
		return "", fmt.Errorf("%s: no resourceVersion in LIST %s", t.name, path)
	}
	if _, err := strconv.ParseUint(list.Metadata.ResourceVersion, 10, 64); err != nil {
		return "", err
	}
	return list.Metadata.ResourceVersion, nil
}

// apiserverPodWatches reads the apiserver's open pod watches.
func apiserverPodWatches(ctx context.Context, api *target) (num, error) {
	res, err := api.do(ctx, request{path: "/metrics", accept: "text/plain", keep: true})
	if err != nil {
		return 0, err
	}
	m, err := framework.ParseMetrics(bytes.NewReader(res.body))
	if err != nil {
		return 0, err
	}
	return num(m.Sum("apiserver_longrunning_requests", `verb="WATCH"`, `resource="pods"`)), nil
}

// paceWrites calls write with 0, 1, … from 16 workers, rate a second, for
// d or until ctx ends, and returns how many calls reported success. A
// number is skipped when every worker is busy, so the workers never fall
// behind the pace.
func paceWrites(ctx context.Context, rate int, d time.Duration, write func(i int) bool) int {
	jobs := make(chan int, 64)
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				if write(i) {
					done.Add(1)
				}
			}
		})
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	stop := time.After(d)
pace:
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			break pace
		case <-stop:
			break pace
		case <-tick.C:
		}
		select {
		case jobs <- i:
		default:
		}
	}
	close(jobs)
	wg.Wait()
	return int(done.Load())
}
