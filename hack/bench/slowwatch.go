package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/listproxy/listproxy/pkg/wire"
)

// A slow watch-list's client reads slowChunk bytes per slowTick (3.2 MiB/s)
// through a TCP receive buffer of slowRcvBuf bytes, so that listproxy's
// writes wait for it rather than fill kernel buffers: a watch-list of
// 10,000 pods (~57 MiB) takes about 18 s, one of 30,000 about 53 s, and
// larger ones are cut by listproxy's --list-write-timeout (60 s).
const (
	slowChunk  = 32 << 10
	slowTick   = 10 * time.Millisecond
	slowRcvBuf = 64 << 10
	// slowWait bounds the sub-scenario: the queue wait (5 s), the write
	// timeout (60 s) and margin. A client still reading then has hung.
	slowWait = 3 * time.Minute
	// slowSample is how often listproxy's RSS and admission gauges are
	// sampled.
	slowSample = 100 * time.Millisecond
	// slowWarmWrites is how long the writes run before RSS is read, so
	// that "before" includes them.
	slowWarmWrites = 2 * time.Second
)

// slowWatchListsResult is the slow watch-lists sub-scenario of the
// informer storm: listproxy's peak RSS while many clients read watch-lists
// of every pod slowly, against the bound on in-flight list bytes.
type slowWatchListsResult struct {
	Clients              int   `json:"clients"`
	MaxInflightListBytes int64 `json:"max_inflight_list_bytes"`
	ReadBytesPerSecond   int64 `json:"client_read_bytes_per_s"`
	// WatchListBytes is the body of one finished watch-list (initial
	// events and their end bookmark).
	WatchListBytes int64 `json:"watch_list_bytes,omitempty"`
	WriteRate      num   `json:"writes_per_s"`
	Seconds        num   `json:"seconds"`
	// RSSBefore is listproxy's RSS with its pods store synced, under the
	// writes, before the clients; RSSPeak the highest during them (VmHWM
	// reset before, or the highest VmRSS sampled: PeakSource says which).
	RSSBefore  int64  `json:"rss_before_bytes"`
	RSSPeak    int64  `json:"rss_peak_bytes"`
	PeakSource string `json:"rss_peak_source"`
	// Client outcomes: initial events read to their end, 429, cut short
	// before their end (the write deadline), other errors, still reading
	// at slowWait.
	Finished    int    `json:"finished"`
	Rejected    int    `json:"rejected_429"`
	Cut         int    `json:"cut_short"`
	Failed      int    `json:"failed"`
	FirstError  string `json:"first_error,omitempty"`
	Hung        int    `json:"hung"`
	NotSnapshot int    `json:"not_from_snapshot"`
	// listproxy's metrics over the sub-scenario: responses that waited
	// for room (listproxy_lists_queue_wait_seconds_count), rejections by
	// reason, write timeouts, and the highest gauges sampled.
	Waited           num     `json:"waited"`
	RejectedTimeout  num     `json:"rejected_timeout"`
	RejectedCanceled num     `json:"rejected_cancelled"`
	WriteTimeouts    num     `json:"write_timeouts"`
	MaxInflight      num     `json:"max_inflight"`
	MaxInflightBytes num     `json:"max_inflight_bytes"`
	MaxQueued        num     `json:"max_queued"`
	Checks           []check `json:"checks"`
}

// slowWatchLists is the storm's memory line: BENCH_SLOW_WATCHLISTS
// clients open a watch-list of every pod at once (client-go's reflector's
// start: sendInitialEvents=true, resourceVersionMatch=NotOlderThan,
// resourceVersion "") and read it slowly, against a listproxy of its own
// started with --max-inflight-list-bytes=BENCH_SLOW_INFLIGHT_BYTES (the
// harness's listproxy keeps the default, so that the other scenarios are
// not throttled), while pods change at BENCH_STORM_WRITES per second. It
// reports listproxy's RSS before and its peak during them, the client
// outcomes and listproxy's admission metrics. Targets: peak RSS ≤ RSS
// before + the bound; every watch-list served from the snapshot store;
// every client finished, got 429, or was cut by the write deadline.
func (b *bench) slowWatchLists(ctx context.Context) error {
	n := b.cfg.slowWatchLists
	bound := b.cfg.slowInflight
	logf("scenario: %d slow watch-lists of all pods (%s/s each) against a listproxy with --max-inflight-list-bytes=%d (%s), %d writes/s",
		n, bytesText(slowChunk*int64(time.Second/slowTick)), bound, bytesText(bound), b.cfg.stormWrites)
	const name = "listproxy-slow"
	t, stop, err := b.env.startExtraListproxy(ctx, name, fmt.Sprintf("--max-inflight-list-bytes=%d", bound))
	if err != nil {
		return err
	}
	defer stop()
	if err := warmStore(ctx, t, acceptJSON, filepath.Join(b.env.cfg.out, "cluster", name+".log")); err != nil {
		return err
	}
	pid := t.pids[0]
	res := &slowWatchListsResult{Clients: n, MaxInflightListBytes: bound, ReadBytesPerSecond: slowChunk * int64(time.Second/slowTick)}

	var w *writer
	if b.cfg.stormWrites > 0 {
		w = b.env.startWriter(ctx, b.cfg.stormWrites)
		defer w.stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(slowWarmWrites):
		}
	}
	settle(ctx, b.idleProxied, t)
	res.RSSBefore = rssBytes(pid)
	before, err := scrape(ctx, t)
	if err != nil {
		return err
	}
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+);
	// without it the peak is the highest RSS sampled.
	res.PeakSource = "sampled VmRSS"
	if err := writeFile(fmt.Sprintf("/proc/%d/clear_refs", pid), "5"); err == nil {
		res.PeakSource = "VmHWM"
	}

	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	var peakRSS int64
	var maxInflight, maxBytes, maxQueued float64
	sampled.Go(func() {
		tick := time.NewTicker(slowSample)
		defer tick.Stop()
		for {
			peakRSS = max(peakRSS, rssBytes(pid))
			if m, err := scrape(sampleCtx, t); err == nil {
				maxInflight = max(maxInflight, m.Sum("listproxy_lists_inflight"))
				maxBytes = max(maxBytes, m.Sum("listproxy_lists_inflight_bytes"))
				maxQueued = max(maxQueued, m.Sum("listproxy_lists_queued"))
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	client := slowClient()
	defer client.CloseIdleConnections()
	runCtx, cancel := context.WithTimeout(ctx, slowWait)
	defer cancel()
	outcomes := make([]slowOutcome, n)
	var clients sync.WaitGroup
	begin := time.Now()
	for i := range n {
		clients.Go(func() { outcomes[i] = slowWatchList(runCtx, client, t) })
	}
	clients.Wait()
	res.Seconds = num(time.Since(begin).Seconds())
	stopSampling()
	sampled.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if w != nil {
		res.WriteRate = num(w.stop())
	}
	res.RSSPeak = peakRSS
	if res.PeakSource == "VmHWM" {
		res.RSSPeak = max(res.RSSPeak, procStatusBytes(pid, "VmHWM"))
	}
	after, err := scrape(ctx, t)
	if err != nil {
		return err
	}
	delta := func(name string, match ...string) num {
		return num(after.Sum(name, match...) - before.Sum(name, match...))
	}
	res.Waited = delta("listproxy_lists_queue_wait_seconds_count")
	res.RejectedTimeout = delta("listproxy_lists_rejected_total", `reason="timeout"`)
	res.RejectedCanceled = delta("listproxy_lists_rejected_total", `reason="cancelled"`)
	res.WriteTimeouts = delta("listproxy_lists_write_timeouts_total")
	res.MaxInflight, res.MaxInflightBytes, res.MaxQueued = num(maxInflight), num(maxBytes), num(maxQueued)
	for _, o := range outcomes {
		switch o.kind {
		case slowFinished:
			res.Finished++
			res.WatchListBytes = o.bytes
		case slowRejected:
			res.Rejected++
		case slowCut:
			res.Cut++
		case slowHung:
			res.Hung++
		default:
			res.Failed++
			if res.FirstError == "" && o.err != nil {
				res.FirstError = o.err.Error()
			}
		}
		if o.notSnapshot {
			res.NotSnapshot++
		}
	}
	limit := res.RSSBefore + bound
	served := res.Finished + res.Cut
	res.Checks = []check{
		{Name: "peak RSS", Want: "≤ RSS before + --max-inflight-list-bytes", Got: num(res.RSSPeak),
			Text: fmt.Sprintf("%s ≤ %s + %s = %s", mib(float64(res.RSSPeak)), mib(float64(res.RSSBefore)), mib(float64(bound)), mib(float64(limit))),
			Met:  res.RSSPeak <= limit},
		{Name: "from snapshots", Want: "all", Got: num(res.NotSnapshot), Text: fmt.Sprintf("%d of %d answered passed through", res.NotSnapshot, served), Met: res.NotSnapshot == 0},
		{Name: "ended", Want: "finished, 429 or cut by the write deadline", Got: num(res.Failed + res.Hung),
			Text: fmt.Sprintf("%d finished, %d × 429, %d cut, %d failed, %d still reading after %s", res.Finished, res.Rejected, res.Cut, res.Failed, res.Hung, slowWait),
			Met:  res.Failed == 0 && res.Hung == 0},
	}
	logf("  %d slow watch-lists in %s: %d finished, %d × 429, %d cut, %d failed, %d hung; listproxy RSS %s before, %s peak (%s), bound %s; %0.f waited for room, max in flight %0.f (%s), max queued %0.f",
		n, ms(float64(res.Seconds)), res.Finished, res.Rejected, res.Cut, res.Failed, res.Hung, mib(float64(res.RSSBefore)), mib(float64(res.RSSPeak)), res.PeakSource, mib(float64(bound)),
		float64(res.Waited), float64(res.MaxInflight), mib(float64(res.MaxInflightBytes)), float64(res.MaxQueued))
	b.report.SlowWatchLists = res
	return nil
}

type slowKind int

const (
	slowFailed slowKind = iota
	slowFinished
	slowRejected
	slowCut
	slowHung
)

type slowOutcome struct {
	kind        slowKind
	bytes       int64
	notSnapshot bool
	err         error
}

// slowClient is an HTTP client whose connections have a small TCP receive
// buffer, one connection per request in flight.
func slowClient() *http.Client {
	dialer := &net.Dialer{
		Timeout: 30 * time.Second,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, slowRcvBuf)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	return &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableCompression: true}}
}

// slowWatchList opens a watch-list of every pod on t and reads its initial
// events slowly until their end bookmark, then closes it.
func slowWatchList(ctx context.Context, client *http.Client, t *target) slowOutcome {
	const path = "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=&timeoutSeconds=3600"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return slowOutcome{err: err}
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", acceptJSON)
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return slowOutcome{kind: slowHung}
		}
		return slowOutcome{err: fmt.Errorf("%s watch-list: %w", t.name, err)}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusTooManyRequests:
		_, _ = io.Copy(io.Discard, resp.Body)
		return slowOutcome{kind: slowRejected}
	default:
		return slowOutcome{err: fmt.Errorf("%s watch-list: status %d", t.name, resp.StatusCode)}
	}
	out := slowOutcome{notSnapshot: resp.Header.Get("X-Listproxy-Served-From") != "snapshot"}
	tick := time.NewTicker(slowTick)
	defer tick.Stop()
	body := &slowReader{ctx: ctx, r: resp.Body, tick: tick.C}
	d := wire.NewWatchDecoder(wire.JSON, body, wire.WatchOptions{})
	for {
		ev, err := d.Next()
		if err != nil {
			out.bytes = body.n
			if ctx.Err() != nil {
				out.kind = slowHung
			} else {
				// The connection ended before the initial events did:
				// listproxy's write deadline.
				out.kind = slowCut
			}
			return out
		}
		if ev.InitialEventsEnd {
			out.kind, out.bytes = slowFinished, body.n
			return out
		}
	}
}

// slowReader reads at most slowChunk bytes of r per tick.
type slowReader struct {
	ctx  context.Context
	r    io.ReadCloser
	tick <-chan time.Time
	left int
	n    int64
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		select {
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		case <-s.tick:
			s.left = slowChunk
		}
	}
	n, err := s.r.Read(p[:min(len(p), s.left)])
	s.left -= n
	s.n += int64(n)
	return n, err
}

func (s *slowReader) Close() error { return s.r.Close() }

// writeFile writes data to the existing file path (such as one of /proc).
func writeFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
