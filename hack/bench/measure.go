package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/listproxy/listproxy/test/framework"
)

// userAgent must not start with "curl": listproxy pretty-prints for curl
// as the apiserver does, which means passing through.
const userAgent = "listproxy-bench/1.0 (linux/amd64)"

const (
	acceptJSON     = "application/json"
	acceptProtobuf = "application/vnd.kubernetes.protobuf"
)

// target is one side of a comparison: the apiserver or listproxy.
type target struct {
	name    string
	base    string
	client  *http.Client
	token   string // bearer token, if any
	pids    []int  // processes whose CPU time answers this side's requests
	proxied bool
}

// request is one HTTP request: a GET unless method says otherwise.
type request struct {
	path   string // with query
	accept string
	gzip   bool // send Accept-Encoding: gzip
	keep   bool // return the body (else it is counted and discarded)
	// head, when keep is not set, returns the body's first head bytes
	// (enough for a list's metadata) and discards the rest.
	head int
	// method, body and contentType: a request with a body, such as a
	// PATCH.
	method      string
	body        string
	contentType string
}

// result is one response.
type result struct {
	status       int
	bytes        int64     // body bytes on the wire (compressed when gzipped)
	at           time.Time // when the request was sent
	dur          time.Duration
	servedFrom   string
	fromSnapshot bool
	gzipped      bool
	body         []byte
}

// do sends req and reads the whole response.
func (t *target) do(ctx context.Context, req request) (result, error) {
	method := cmp.Or(req.method, http.MethodGet)
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, t.base+req.path, body)
	if err != nil {
		return result{}, err
	}
	hr.Header.Set("User-Agent", userAgent)
	hr.Header.Set("Accept", req.accept)
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if req.gzip {
		hr.Header.Set("Accept-Encoding", "gzip")
	}
	if t.token != "" {
		hr.Header.Set("Authorization", "Bearer "+t.token)
	}
	begin := time.Now()
	resp, err := t.client.Do(hr)
	if err != nil {
		return result{}, fmt.Errorf("%s %s %s: %w", t.name, method, req.path, err)
	}
	defer resp.Body.Close()
	var res result
	switch {
	case req.keep:
		var buf bytes.Buffer
		_, err = io.Copy(&buf, resp.Body)
		res.body = buf.Bytes()
		res.bytes = int64(buf.Len())
	case req.head > 0:
		var buf bytes.Buffer
		_, err = io.CopyN(&buf, resp.Body, int64(req.head))
		var rest int64
		if err == nil || errors.Is(err, io.EOF) {
			rest, err = io.Copy(io.Discard, resp.Body)
		}
		res.body = buf.Bytes()
		res.bytes = int64(buf.Len()) + rest
	default:
		res.bytes, err = io.Copy(io.Discard, resp.Body)
	}
	res.at, res.dur = begin, time.Since(begin)
	if err != nil {
		return result{}, fmt.Errorf("%s %s %s: read body: %w", t.name, method, req.path, err)
	}
	res.status = resp.StatusCode
	res.servedFrom = resp.Header.Get("X-Listproxy-Served-From")
	res.fromSnapshot = res.servedFrom == "snapshot"
	res.gzipped = resp.Header.Get("Content-Encoding") == "gzip"
	if res.status != http.StatusOK {
		snippet := res.body
		if len(snippet) > 300 {
			snippet = snippet[:300]
		}
		return res, fmt.Errorf("%s %s %s: %d %s", t.name, method, req.path, res.status, snippet)
	}
	return res, nil
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is the user+system CPU time of pids so far.
func cpuTime(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		total += processCPU(pid)
	}
	return total
}

// processCPU is the CPU time of process pid so far, all its threads
// (exited ones too), from its process CPU clock in nanoseconds; where that
// clock cannot be read, from utime+stime in /proc/PID/stat, in clock ticks.
func processCPU(pid int) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	return procStatCPU(pid)
}

// processCPUClock is the id of pid's process CPU clock: the kernel's
// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED).
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return (^int32(pid))<<3 | cpuclockSched
}

// minCPU is the least CPU time a side must have used for its CPU figure to
// count: 5 ms, or 5 clock ticks where CPU time is read in clock ticks.
var minCPU = func() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(processCPUClock(os.Getpid()), &ts) == nil {
		return 5 * time.Millisecond
	}
	return 5 * time.Second / clockTicks
}()

// procStatCPU is utime+stime of pid from /proc/PID/stat.
func procStatCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3,
	// utime field 14, stime field 15.
	s := string(data)
	s = s[strings.LastIndexByte(s, ')')+2:]
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / clockTicks
}

// rssBytes is the resident set size of pid from /proc/PID/status.
func rssBytes(pid int) int64 {
	return procStatusBytes(pid, "VmRSS")
}

// procStatusBytes is the field (in kB, such as VmRSS or VmHWM) of
// /proc/PID/status in bytes, or 0.
func procStatusBytes(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sampler accumulates the CPU time of a target across measured intervals,
// net of its idle background rate.
type sampler struct {
	t        *target
	idleRate float64 // CPU seconds per second when idle
	cpu      time.Duration
	wall     time.Duration
	start    time.Duration
	begin    time.Time
	// less is CPU time of work other than the scenario's within the
	// intervals (the writes a scenario runs beside it), subtracted.
	less float64
}

func (s *sampler) startInterval() {
	s.start = cpuTime(s.t.pids)
	s.begin = time.Now()
}

func (s *sampler) endInterval() {
	s.cpu += cpuTime(s.t.pids) - s.start
	s.wall += time.Since(s.begin)
}

// seconds is the measured CPU time minus what the processes would have
// spent idle in the same wall time and less, never below zero.
func (s *sampler) seconds() float64 {
	return math.Max(0, s.net())
}

// net is seconds before it is held at zero: what a stretch of the
// intervals cost is net after it less net before it.
func (s *sampler) net() float64 {
	return s.cpu.Seconds() - s.idleRate*s.wall.Seconds() - s.less
}

// stddev is the sample standard deviation of xs (0 for fewer than two).
func stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return math.Sqrt(sq / float64(len(xs)-1))
}

// Settling: a side's CPU time for a measured interval runs until its
// processes are back at their idle rate, not only until its last response.
// A large response leaves garbage whose collection runs after it (the
// apiserver's after a walk took up to 1.1 s of CPU, listproxy's under a
// millisecond); that is the response's cost too, and left running it would
// overlap the next interval, of the other side.
const (
	settleWindow = 100 * time.Millisecond // CPU rate sampled over this
	settleSlack  = 0.02                   // CPU seconds per second above idle still counted as idle
	settleMax    = 5 * time.Second        // a process busy for longer is left to it
)

// settle waits until the processes of ts together spend no more than
// idleRate+settleSlack CPU seconds per second over a settleWindow, or
// settleMax has passed. It returns how long it waited.
func settle(ctx context.Context, idleRate float64, ts ...*target) time.Duration {
	var pids []int
	for _, t := range ts {
		pids = append(pids, t.pids...)
	}
	begin := time.Now()
	for time.Since(begin) < settleMax && ctx.Err() == nil {
		if cpuRate(ctx, pids, settleWindow) <= idleRate+settleSlack {
			break
		}
	}
	return time.Since(begin)
}

// measureIdle samples the CPU rate of t's processes over d.
func measureIdle(ctx context.Context, t *target, d time.Duration) float64 {
	return cpuRate(ctx, t.pids, d)
}

// cpuRate samples the CPU seconds per second that pids spend together over
// d, or until ctx is done.
func cpuRate(ctx context.Context, pids []int, d time.Duration) float64 {
	c0, w0 := cpuTime(pids), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return (cpuTime(pids) - c0).Seconds() / time.Since(w0).Seconds()
}

// percentile is the nearest-rank percentile p (0..100) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(rank, len(s)-1))]
}

func median(xs []float64) float64 { return percentile(xs, 50) }

// listContinue reads metadata.continue from the head of a JSON list
// response (typed lists put metadata before items, for the apiserver and
// listproxy alike) without decoding the items.
func listContinue(body []byte) (string, error) {
	m, err := listMetadata(body)
	return m.Continue, err
}

// listMeta is a list's metadata.
type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
}

// listMetadata reads the metadata of a JSON list response from its head,
// as listContinue; body may be the head alone (request.head).
func listMetadata(body []byte) (listMeta, error) {
	i := bytes.Index(body, []byte(`,"items":`))
	if i < 0 {
		return listMeta{}, fmt.Errorf("no items in list response %.200q", body)
	}
	var head struct {
		Metadata listMeta `json:"metadata"`
	}
	if err := json.Unmarshal(append(body[:i:i], '}'), &head); err != nil {
		return listMeta{}, fmt.Errorf("decode list metadata: %w", err)
	}
	return head.Metadata, nil
}

// scrape reads t's /metrics.
func scrape(ctx context.Context, t *target) (framework.Metrics, error) {
	return framework.ScrapeMetrics(ctx, t.client, t.base+"/metrics")
}

// histogramQuantile estimates quantile q of the observations of histogram
// name (restricted by match) made between scrapes a and b, interpolating
// linearly within a bucket as Prometheus' histogram_quantile does.
func histogramQuantile(a, b framework.Metrics, name string, q float64, match ...string) (float64, float64) {
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for _, m := range []struct {
		scrape framework.Metrics
		sign   float64
	}{{b, 1}, {a, -1}} {
		for _, s := range m.scrape[name+"_bucket"] {
			if !s.Matches(match...) {
				continue
			}
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err != nil {
				continue
			}
			buckets = append(buckets, bucket{le, m.sign * s.Value})
		}
	}
	slices.SortFunc(buckets, func(x, y bucket) int { return cmpFloat(x.le, y.le) })
	// Merge equal bounds (several label sets, and the two scrapes).
	var merged []bucket
	for _, bk := range buckets {
		if len(merged) > 0 && merged[len(merged)-1].le == bk.le {
			merged[len(merged)-1].count += bk.count
			continue
		}
		merged = append(merged, bk)
	}
	if len(merged) == 0 {
		return math.NaN(), 0
	}
	total := merged[len(merged)-1].count
	if total == 0 {
		return math.NaN(), 0
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, bk := range merged {
		if bk.count >= rank {
			if math.IsInf(bk.le, 1) {
				return prevLE, total
			}
			if bk.count == prevCount {
				return bk.le, total
			}
			return prevLE + (bk.le-prevLE)*(rank-prevCount)/(bk.count-prevCount), total
		}
		prevLE, prevCount = bk.le, bk.count
	}
	return prevLE, total
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func numCPU() int { return runtime.NumCPU() }

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// delta is how much the samples of name with every label pair grew from
// before to after.
func delta(before, after framework.Metrics, name string, pairs ...string) float64 {
	return after.Sum(name, pairs...) - before.Sum(name, pairs...)
}
