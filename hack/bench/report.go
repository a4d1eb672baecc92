package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// report is everything one run measured; it is written as JSON and
// rendered as Markdown.
type report struct {
	Started     string             `json:"started"`
	Duration    string             `json:"duration"`
	Config      reportConfig       `json:"config"`
	LoadAvgEnd  string             `json:"load_avg_end"`
	ObjectBytes int                `json:"object_json_bytes"`
	IdleCPU     map[string]float64 `json:"idle_cpu_per_second"`
	Rows        []row              `json:"scenarios"`
	Freshness   *freshness         `json:"freshness,omitempty"`
	// FreshnessQuiet is Freshness for a quiet resource.
	FreshnessQuiet *freshness        `json:"freshness_quiet,omitempty"`
	Memory         []memorySample    `json:"memory"`
	MemoryCheck    []check           `json:"memory_checks"`
	Steady         *steadyResult     `json:"steady,omitempty"`
	NodeAgents     *nodeAgentsResult `json:"node_agents,omitempty"`
	Rollout        *rolloutResult    `json:"rollout,omitempty"`
	Table          *tableResult      `json:"table,omitempty"`
	// SlowWatchLists is the informer storm's memory line.
	SlowWatchLists *slowWatchListsResult `json:"slow_watch_lists,omitempty"`
}

type reportConfig struct {
	// KubeVersion is the control-plane release measured (KUBE_VERSION).
	KubeVersion string `json:"kube_version"`
	Pods        int    `json:"pods"`
	Namespaces  int    `json:"namespaces"`
	Nodes       int    `json:"nodes"`
	Reps        int    `json:"reps"`
	Churn       string `json:"churn"`
	WriteRate   int    `json:"write_rate"`
	WalkLimits  []int  `json:"walk_limits"`
	CPUs        int    `json:"cpus"`
	LoadAvg     string `json:"load_avg_start"`
	// ListproxyArgs and ListproxyEnv are what listproxy ran with beyond
	// the harness's own flags.
	ListproxyArgs []string `json:"listproxy_args,omitempty"`
	ListproxyEnv  []string `json:"listproxy_env,omitempty"`
	// ConsistentProof is how listproxy proved consistent reads: etcd or
	// apiserver.
	ConsistentProof string `json:"consistent_proof"`
}

// side is one target's measurements of a scenario. Times are seconds;
// CPU is user+system time of the answering processes, net of their idle
// rate.
type side struct {
	Requests      int     `json:"requests"`
	WallP50       float64 `json:"wall_p50_s"`
	WallP99       float64 `json:"wall_p99_s"`
	CPUPerRequest float64 `json:"cpu_per_request_s"`
	CPUTotal      float64 `json:"cpu_total_s"`
	Bytes         int64   `json:"bytes_per_response"`
	// Answers counts responses (each page of a walk); NotSnapshot those of
	// listproxy's not served from a snapshot.
	Answers     int `json:"answers"`
	NotSnapshot int `json:"not_from_snapshot"`
	NotGzip     int `json:"not_gzipped,omitempty"`
	// ContentChecked answers of listproxy's were compared with the
	// apiserver's at the same resourceVersion; ContentMismatch differed.
	ContentChecked  int            `json:"content_checked,omitempty"`
	ContentMismatch int            `json:"content_mismatches,omitempty"`
	FirstMismatch   string         `json:"first_mismatch,omitempty"`
	Extra           map[string]num `json:"extra,omitempty"`
	// APIServerCPUTotal and APIServerCPUPerRequest are, for listproxy's
	// side of scenarios that measure it, the CPU time kube-apiserver+etcd
	// spent meanwhile.
	APIServerCPUTotal      float64 `json:"apiserver_cpu_total_s,omitempty"`
	APIServerCPUPerRequest float64 `json:"apiserver_cpu_per_request_s,omitempty"`
	// APIServerCPUCalls, APIServerCPUNet and APIServerCPUCallStdDev are,
	// for alternated scenarios, the calls measured, the sum and the
	// standard deviation of kube-apiserver+etcd CPU time per call on this
	// side, net of the idle or background rate and not held at zero (a
	// sum below zero: less than the rate predicted); the spread is the
	// noise of the totals.
	APIServerCPUCalls      int     `json:"apiserver_cpu_calls,omitempty"`
	APIServerCPUNet        float64 `json:"apiserver_cpu_net_s,omitempty"`
	APIServerCPUCallStdDev float64 `json:"apiserver_cpu_call_stddev_s,omitempty"`
	// EtcdCPUTotal is the CPU time etcd alone spent during this side's
	// requests (on listproxy's side: revision probes and progress
	// requests), net of its idle rate.
	EtcdCPUTotal float64 `json:"etcd_cpu_total_s"`
}

// targetSpec is what docs/performance.md holds a scenario to;
// zero fields are not checked.
type targetSpec struct {
	CPU             float64 `json:"cpu_ratio_min,omitempty"`
	Wall            float64 `json:"wall_p50_ratio_min,omitempty"`
	WallP99         float64 `json:"wall_p99_ratio_min,omitempty"`
	LastFirst       float64 `json:"last_over_first_page_max,omitempty"`
	ProxiedCPUMax   float64 `json:"listproxy_cpu_per_request_max_s,omitempty"`
	FreshnessP99Max float64 `json:"freshness_wait_p99_max_s,omitempty"`
	// APIServerCPU is the least ratio of kube-apiserver+etcd CPU time
	// direct over the same through listproxy.
	APIServerCPU float64 `json:"apiserver_cpu_ratio_min,omitempty"`
	// APIServerCPUAtMostDirect: kube-apiserver+etcd CPU time during the
	// requests through listproxy must not exceed the same during the
	// requests direct by more than the noise (cpuNoise).
	APIServerCPUAtMostDirect bool `json:"apiserver_cpu_at_most_direct,omitempty"`
	// EtcdCPU is the least ratio of etcd's CPU time during the requests
	// direct over the same through listproxy.
	EtcdCPU float64 `json:"etcd_cpu_ratio_min,omitempty"`
	// WallP99AddedMax and WallP50AddedMax are the most listproxy's latency
	// may exceed the apiserver's, in seconds.
	WallP99AddedMax float64 `json:"wall_p99_added_max_s,omitempty"`
	WallP50AddedMax float64 `json:"wall_p50_added_max_s,omitempty"`
	// PassThrough: listproxy must pass every request through (not serve
	// it from a snapshot).
	PassThrough bool `json:"pass_through,omitempty"`
	// NoContentCheck: the answers' content is not compared (a shape whose
	// content other scenarios and the e2e tests check).
	NoContentCheck bool `json:"no_content_check,omitempty"`
}

// contentCheck names the check of listproxy's answers against the
// apiserver's at the same resourceVersion.
const contentCheck = "content = apiserver at same RV"

type check struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  num    `json:"got"`
	Text string `json:"text"`
	Met  bool   `json:"met"`
}

type row struct {
	Scenario     string     `json:"scenario"`
	Direct       side       `json:"apiserver"`
	Proxied      side       `json:"listproxy"`
	WallRatio    num        `json:"wall_p50_ratio"`
	WallP99Ratio num        `json:"wall_p99_ratio"`
	CPURatio     num        `json:"cpu_ratio"`
	Target       targetSpec `json:"target"`
	Checks       []check    `json:"checks"`
	Notes        string     `json:"notes,omitempty"`
}

type freshness struct {
	WritesPerSecond float64 `json:"writes_per_second"`
	WritesFailed    int64   `json:"writes_failed"`
	WritesDropped   int64   `json:"writes_dropped"`
	WaitP50         num     `json:"wait_p50_s"`
	WaitP99         num     `json:"wait_p99_s"`
	Served          float64 `json:"served"`
	NotServed       float64 `json:"not_proven"`
	// Probes, AuxWatches and ProofPaths are the apiserver's share of the
	// proofs without etcd (BENCH_CONSISTENT_PROOF=apiserver): probe LISTs
	// and auxiliary watches sent, and proofs by path.
	Probes     float64            `json:"apiserver_probes,omitempty"`
	AuxWatches float64            `json:"aux_watches,omitempty"`
	ProofPaths map[string]float64 `json:"proof_paths,omitempty"`
}

type memorySample struct {
	Phase          string  `json:"phase"`
	Objects        float64 `json:"objects"`
	SnapshotBytes  float64 `json:"snapshot_bytes"`
	HistoryBytes   float64 `json:"history_bytes"`
	HistoryDepth   float64 `json:"history_depth"`
	HeapInuse      float64 `json:"heap_inuse_bytes"`
	HeapAlloc      float64 `json:"heap_alloc_bytes"`
	NextGC         float64 `json:"next_gc_bytes"`
	GOGC           float64 `json:"gogc_percent"`
	LiveHeap       float64 `json:"live_heap_estimate_bytes"`
	RSS            float64 `json:"rss_bytes"`
	ListproxyProcs float64 `json:"rss_proc_bytes"`
	RSSRatio       float64 `json:"rss_over_snapshot"`
	HeapRatio      float64 `json:"heap_over_snapshot"`
	HistoryRatio   float64 `json:"history_over_snapshot"`
	APIServerRSS   float64 `json:"apiserver_rss_bytes"`
}

func (r *row) evaluate() {
	t := r.Target
	add := func(name, want string, got float64, text string, met bool) {
		r.Checks = append(r.Checks, check{Name: name, Want: want, Got: num(got), Text: text, Met: met})
	}
	// A figure measured on answers listproxy did not serve from a snapshot,
	// or served wrong, says nothing about listproxy: each scenario must be
	// all snapshot answers, with the content the apiserver gives.
	p := r.Proxied
	fromSnapshot := p.Answers - p.NotSnapshot
	if t.PassThrough {
		add("passed through", "all", float64(p.NotSnapshot), fmt.Sprintf("%d/%d", p.NotSnapshot, p.Answers), fromSnapshot == 0 && p.Answers > 0)
	} else {
		add("from snapshots", "all", float64(fromSnapshot), fmt.Sprintf("%d/%d", fromSnapshot, p.Answers), p.NotSnapshot == 0 && p.Answers > 0)
	}
	if p.NotGzip > 0 {
		add("gzipped", "all", float64(p.NotGzip), fmt.Sprintf("%d not", p.NotGzip), false)
	}
	if !t.NoContentCheck && !t.PassThrough {
		add(contentCheck, "all equal", float64(p.ContentMismatch),
			fmt.Sprintf("%d/%d equal", p.ContentChecked-p.ContentMismatch, p.ContentChecked), p.ContentChecked > 0 && p.ContentMismatch == 0)
	}
	if t.WallP99AddedMax > 0 {
		added := p.WallP99 - r.Direct.WallP99
		add("wall p99 added", "≤ "+ms(t.WallP99AddedMax), added, fmt.Sprintf("%+.1f ms", added*1000), added <= t.WallP99AddedMax)
	}
	if t.WallP50AddedMax > 0 {
		added := p.WallP50 - r.Direct.WallP50
		add("wall p50 added", "≤ "+ms(t.WallP50AddedMax), added, fmt.Sprintf("%+.1f ms", added*1000), added <= t.WallP50AddedMax)
	}
	// A side that used less than minCPU was not measured, and a ratio over
	// it (often infinite) proves nothing.
	least := minCPU.Seconds()
	notMeasured := "not measured (under " + minCPU.String() + " of CPU; raise BENCH_REPS)"
	measured := p.CPUTotal >= least && r.Direct.CPUTotal >= least
	if t.CPU > 0 {
		text := fmt.Sprintf("%.1f×", r.CPURatio)
		if !measured {
			text = notMeasured
		}
		add("CPU", fmt.Sprintf("≥ %g×", t.CPU), float64(r.CPURatio), text, measured && float64(r.CPURatio) >= t.CPU)
	}
	// lower checks that processes spent at least min times less CPU while
	// the clients went through listproxy (via) than directly. With noise
	// (the chance spread of via), it is missed only when via exceeds
	// direct/min by more than the noise.
	lower := func(name string, min, direct, via, noise float64) {
		got := ratio(direct, via)
		text := fmt.Sprintf("%.1f×", got)
		if via < least/5 {
			// Under a fifth of minCPU through listproxy: the ratio is at
			// least what that would give.
			got = direct / (least / 5)
			text = fmt.Sprintf("> %.0f× (%s vs under %s)", got, ms(direct), minCPU/5)
		}
		directMeasured := direct >= least
		met := directMeasured && got >= min
		if directMeasured && !met && noise > 0 && via-direct/min <= noise {
			met = true
			text += fmt.Sprintf(" (%s through listproxy, within the noise %s of direct/%g)", ms(via), ms(noise), min)
		}
		if !directMeasured {
			text = "not measured (" + name + " direct under " + minCPU.String() + ")"
		}
		add(name, fmt.Sprintf("≥ %g× lower through listproxy", min), got, text, met)
	}
	if t.APIServerCPU > 0 {
		lower("apiserver+etcd CPU", t.APIServerCPU, r.Direct.CPUTotal, p.APIServerCPUTotal, callNoise(p))
	}
	if t.EtcdCPU > 0 {
		lower("etcd CPU", t.EtcdCPU, r.Direct.EtcdCPUTotal, p.EtcdCPUTotal, 0)
	}
	if t.APIServerCPUAtMostDirect {
		// Net sums where measured per call: holding a side at zero would
		// bias the difference.
		direct, via := r.Direct.CPUTotal, p.APIServerCPUTotal
		if r.Direct.APIServerCPUCalls > 0 && p.APIServerCPUCalls > 0 {
			direct, via = r.Direct.APIServerCPUNet, p.APIServerCPUNet
		}
		n := float64(max(1, p.Requests))
		noise := cpuNoise(r.Direct, p)
		text := fmt.Sprintf("%s vs %s direct per request", msSigned(via/n), msSigned(direct/n))
		if via > direct {
			text += fmt.Sprintf(", over by %s (noise %s)", ms((via-direct)/n), ms(noise/n))
		}
		add("apiserver+etcd CPU", "≤ direct", via-direct, text, via <= direct+noise)
	}
	if t.Wall > 0 {
		add("wall p50", fmt.Sprintf("≥ %g×", t.Wall), float64(r.WallRatio), fmt.Sprintf("%.1f×", r.WallRatio), float64(r.WallRatio) >= t.Wall)
	}
	if t.WallP99 > 0 {
		add("wall p99", fmt.Sprintf("≥ %g×", t.WallP99), float64(r.WallP99Ratio), fmt.Sprintf("%.1f×", r.WallP99Ratio), float64(r.WallP99Ratio) >= t.WallP99)
	}
	if t.LastFirst > 0 {
		first, last := r.Proxied.Extra["first_page_s_p50"], r.Proxied.Extra["last_page_s_p50"]
		got := ratio(float64(last), float64(first))
		add("last/first page", fmt.Sprintf("≤ %g×", t.LastFirst), got, fmt.Sprintf("%.2f×", got), got <= t.LastFirst)
	}
	if t.ProxiedCPUMax > 0 {
		got := r.Proxied.CPUPerRequest
		text := ms(got)
		if p.CPUTotal < least {
			text = notMeasured
		}
		add("listproxy CPU per walk", "≤ "+ms(t.ProxiedCPUMax), got, text, p.CPUTotal >= least && got <= t.ProxiedCPUMax)
	}
	if t.FreshnessP99Max > 0 {
		got := float64(r.Proxied.Extra["freshness_wait_p99_s"])
		add("freshness wait p99", "≤ "+ms(t.FreshnessP99Max), got, ms(got), got <= t.FreshnessP99Max)
	}
}

// cpuNoise is how far apart two sides' kube-apiserver+etcd CPU totals may
// be by chance: three standard errors of their difference, from the spread
// of the CPU per call on each side (the background writes' CPU falls into
// the short intervals unevenly, as do garbage collections), and at least
// minCPU.
func cpuNoise(d, p side) float64 {
	return max(math.Hypot(callNoise(d), callNoise(p)), minCPU.Seconds())
}

// callNoise is three standard errors of one side's kube-apiserver+etcd
// CPU total, from its spread per call; 0 where it was not measured per
// call.
func callNoise(s side) float64 {
	return 3 * math.Sqrt(float64(s.APIServerCPUCalls)) * s.APIServerCPUCallStdDev
}

// memoryChecks holds the memory samples to the targets: RSS at most 1.5×
// the cached object bytes, and history under churn at most +10%.
func (r *report) memoryChecks() {
	r.MemoryCheck = nil
	for _, s := range r.Memory {
		r.MemoryCheck = append(r.MemoryCheck, check{
			Name: "RSS / cached bytes, " + s.Phase, Want: "≤ 1.5×", Got: num(s.RSSRatio),
			Text: fmt.Sprintf("%.2f×", s.RSSRatio), Met: s.RSSRatio <= 1.5,
		})
	}
	if n := len(r.Memory); n > 0 && strings.Contains(r.Memory[n-1].Phase, "churn") {
		s := r.Memory[n-1]
		r.MemoryCheck = append(r.MemoryCheck, check{
			Name: "history bytes / cached bytes, " + s.Phase, Want: "≤ +10%", Got: num(s.HistoryRatio),
			Text: fmt.Sprintf("+%.1f%%", 100*s.HistoryRatio), Met: s.HistoryRatio <= 0.10,
		})
	}
}

func (r *report) markdown() string {
	r.memoryChecks()
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "### listproxy vs kube-apiserver v%s: %d pods (~%s JSON each), %d namespaces, %d nodes\n\n",
		c.KubeVersion, c.Pods, bytesText(int64(r.ObjectBytes)), c.Namespaces, c.Nodes)
	fmt.Fprintf(&b, "Run %s, %s; %d CPUs, load average %s at start, %s at end; %d repetitions; idle CPU subtracted: apiserver+etcd %.3f, listproxy %.3f CPU-s/s.",
		r.Started, r.Duration, c.CPUs, c.LoadAvg, r.LoadAvgEnd, c.Reps, r.IdleCPU["apiserver+etcd"], r.IdleCPU["listproxy"])
	if len(c.ListproxyArgs)+len(c.ListproxyEnv) > 0 {
		fmt.Fprintf(&b, " listproxy ran with `%s`.", strings.TrimSpace(strings.Join(c.ListproxyEnv, " ")+" "+strings.Join(c.ListproxyArgs, " ")))
	}
	b.WriteString("\n\n")
	b.WriteString("Wall times are p50 / p99 per request (per walk for walks); CPU is user+system seconds per request of kube-apiserver+etcd (direct) or listproxy (proxied); ratios are apiserver ÷ listproxy.\n\n")
	b.WriteString("| scenario | n | apiserver wall p50 / p99 | listproxy wall p50 / p99 | wall ratio p50 (p99) | apiserver CPU/req | listproxy CPU/req | CPU ratio | bytes apiserver / listproxy | targets |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %d | %s / %s | %s / %s | %s (%s) | %s | %s | %s | %s / %s | %s |\n",
			row.Scenario, row.Direct.Requests,
			ms(row.Direct.WallP50), ms(row.Direct.WallP99),
			ms(row.Proxied.WallP50), ms(row.Proxied.WallP99),
			times(row.WallRatio), times(row.WallP99Ratio),
			ms(row.Direct.CPUPerRequest), ms(row.Proxied.CPUPerRequest), times(row.CPURatio),
			bytesText(row.Direct.Bytes), bytesText(row.Proxied.Bytes)+notSnapshotText(row.Proxied),
			checksText(row.Checks))
	}
	var notes []string
	for _, row := range r.Rows {
		if row.Notes != "" {
			notes = append(notes, fmt.Sprintf("- %s: %s", row.Scenario, row.Notes))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	if len(r.Memory) > 0 {
		b.WriteString("\n| listproxy memory | objects (all formats) | cached object bytes | history bytes (depth) | live heap (est.) | Go heap in use | RSS | RSS / cached | heap / cached | kube-apiserver RSS |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Memory {
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s (%.0f) | %s | %s | %s | %.2f× | %.2f× | %s |\n",
				s.Phase, s.Objects, mib(s.SnapshotBytes), mib(s.HistoryBytes), s.HistoryDepth,
				mib(s.LiveHeap), mib(s.HeapInuse), mib(s.RSS), s.RSSRatio, s.HeapRatio, mib(s.APIServerRSS))
		}
		b.WriteString("\nLive heap is estimated as go_memstats_next_gc_bytes / (1 + GOGC/100): the heap marked live by the last GC.\n")
		b.WriteString("\n")
		for _, ch := range r.MemoryCheck {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	if st := r.Steady; st != nil {
		fmt.Fprintf(&b, "\n| steady state: %d pod watchers (one namespace each, of %d) | writes/s | events read | delivery p50 / p99 | apiserver pod watches | CPU (answering processes) |\n", st.Watchers, st.Namespace)
		b.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, name := range []string{"apiserver", "listproxy"} {
			if s := st.Sides[name]; s != nil {
				fmt.Fprintf(&b, "| %s | %.0f | %d | %s / %s | %.0f | %.1f s |\n", name, float64(s.WriteRate), s.Events,
					ms(float64(s.DelayP50)), ms(float64(s.DelayP99)), float64(s.APIServerWatches), float64(s.CPU))
			}
		}
		b.WriteString("\nDelivery is from sending a write to a watcher reading its event.\n\n")
		for _, ch := range st.Checks {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	if na := r.NodeAgents; na != nil {
		fmt.Fprintf(&b, "\n| node agents: %d watchers of one node's pods (%d nodes with pods) | writes/s | events read | watch-lists opened in | delivery p50 / p99 | CPU per change | without the writes' own |\n", na.Watchers, na.NodesWithPods)
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		for _, name := range []string{"apiserver", "listproxy"} {
			if s := na.Sides[name]; s != nil {
				fmt.Fprintf(&b, "| %s | %.0f | %d | %s | %s / %s | %s | %s |\n", name, float64(s.WriteRate), s.Events, ms(float64(s.OpenSeconds)),
					ms(float64(s.DelayP50)), ms(float64(s.DelayP99)), ms(float64(s.CPUPerChange)), ms(float64(s.WatchersCPUPerChange)))
			}
		}
		fmt.Fprintf(&b, "\nCPU: apiserver and etcd direct, listproxy proxied; the writes with no watcher open cost %s (apiserver+etcd) and %s (listproxy) per change. Delivery is from sending a write to its node's watcher reading its event.\n\n",
			ms(float64(na.BaseCPUPerChange["apiserver"])), ms(float64(na.BaseCPUPerChange["listproxy"])))
		for _, ch := range na.Checks {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	if sw := r.SlowWatchLists; sw != nil {
		fmt.Fprintf(&b, "\n| %d slow watch-lists of all pods (%s/s each), --max-inflight-list-bytes=%s, %.0f writes/s | listproxy RSS before | peak (%s) | finished | 429 | cut by the write deadline | waited for room | max in flight (bytes) | max queued |\n",
			sw.Clients, bytesText(sw.ReadBytesPerSecond), bytesText(sw.MaxInflightListBytes), float64(sw.WriteRate), sw.PeakSource)
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		fmt.Fprintf(&b, "| listproxy (its own, for this line), %s | %s | %s | %d | %d | %d | %.0f | %.0f (%s) | %.0f |\n",
			ms(float64(sw.Seconds)), mib(float64(sw.RSSBefore)), mib(float64(sw.RSSPeak)), sw.Finished, sw.Rejected, sw.Cut,
			float64(sw.Waited), float64(sw.MaxInflight), mib(float64(sw.MaxInflightBytes)), float64(sw.MaxQueued))
		fmt.Fprintf(&b, "\nOne watch-list's body is %s; listproxy counted %.0f rejections on timeout, %.0f on cancel, %.0f write timeouts.\n\n",
			bytesText(sw.WatchListBytes), float64(sw.RejectedTimeout), float64(sw.RejectedCanceled), float64(sw.WriteTimeouts))
		for _, ch := range sw.Checks {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	if r.Table != nil {
		b.WriteString(r.Table.markdown())
	}
	if ro := r.Rollout; ro != nil {
		fmt.Fprintf(&b, "\n| rolling restart of %d replicas, %d informers + %d walkers, over %s | apiserver+etcd CPU | walks | walks cut short | pages not from snapshots |\n",
			ro.Replicas, ro.Informers, ro.Walkers, ms(float64(ro.Seconds)))
		b.WriteString("|---|---:|---:|---:|---:|\n")
		for _, name := range []string{"apiserver", "listproxy"} {
			if s := ro.Sides[name]; s != nil {
				fmt.Fprintf(&b, "| %s | %.1f s | %d | %d | %d |\n", name, float64(s.APIServerCPU), s.Walks, s.WalkErrors, s.NotSnapshot)
			}
		}
		b.WriteString("\napiserver: the same clients, synced and walking, directly for the rollout's wall time; listproxy: during the rolling restart.\n\n")
		for _, ch := range ro.Checks {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	return b.String()
}

// missed lists every check that was not met, scenarios and memory alike.
func (r *report) missed() []string {
	r.memoryChecks()
	var out []string
	for _, row := range r.Rows {
		for _, c := range row.Checks {
			if c.Met {
				continue
			}
			line := fmt.Sprintf("%s: %s %s, got %s", row.Scenario, c.Name, c.Want, c.Text)
			if c.Name == contentCheck && row.Proxied.FirstMismatch != "" {
				line += "; first: " + row.Proxied.FirstMismatch
			}
			out = append(out, line)
		}
	}
	for _, c := range r.MemoryCheck {
		if !c.Met {
			out = append(out, fmt.Sprintf("memory: %s %s, got %s", c.Name, c.Want, c.Text))
		}
	}
	if r.Steady != nil {
		for _, c := range r.Steady.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("steady: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	if r.NodeAgents != nil {
		for _, c := range r.NodeAgents.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("nodeagents: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	if r.SlowWatchLists != nil {
		for _, c := range r.SlowWatchLists.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("storm, slow watch-lists: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	if r.Table != nil && r.Table.Feed != nil {
		for _, c := range r.Table.Feed.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("table, feed: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	if r.Table != nil && r.Table.Memory != nil {
		for _, c := range r.Table.Memory.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("table, memory: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	if r.Rollout != nil {
		for _, c := range r.Rollout.Checks {
			if !c.Met {
				out = append(out, fmt.Sprintf("rollout: %s %s, got %s", c.Name, c.Want, c.Text))
			}
		}
	}
	return out
}

func checksText(cs []check) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s: %s %s", c.Name, c.Want, c.Text, mark(c.Met)))
	}
	return strings.Join(parts, "; ")
}

func mark(met bool) string {
	if met {
		return "✅"
	}
	return "❌"
}

// write stores the report as results.{md,json} and a timestamped copy.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md := r.markdown()
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	for name, data := range map[string][]byte{
		"results.md": []byte(md), "results.json": js,
		"results-" + stamp + ".md": []byte(md), "results-" + stamp + ".json": js,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// num is a float that is written to JSON as null when it is NaN or
// infinite (a ratio over a CPU time too small to measure).
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func ms[F ~float64](v F) string {
	s := float64(v)
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return "–"
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 0.1:
		return fmt.Sprintf("%.0f ms", s*1000)
	case s >= 0.01:
		return fmt.Sprintf("%.1f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f ms", s*1000)
	}
}

// msSigned is ms for a figure that may be below zero.
func msSigned(v float64) string {
	if v < 0 {
		return "−" + ms(-v)
	}
	return ms(v)
}

func times[F ~float64](v F) string {
	x := float64(v)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.1f×", x)
}

func mib(n float64) string { return fmt.Sprintf("%.0f MiB", n/(1<<20)) }

func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}
