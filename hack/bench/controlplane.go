package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/workload"
)

// The control-plane scenario's workload (BENCH_SCENARIOS=controlplane) and
// targets: through listproxy, a Deployment's reconcile p99 at most
// controlPlaneReconcileSlack above direct's, a namespace's deletion at
// most controlPlaneDeletionSlack above direct's slowest.
var controlPlaneWorkload = workload.Config{
	Nodes: 50, PodsPerNode: 250,
	Namespaces: 20, DeletedNamespaces: 5,
	Deployments: 50, Replicas: 10,
	MeasureLatency:  true,
	ReconcileProbes: 40,
}

const (
	controlPlaneReconcileSlack = 50 * time.Millisecond
	controlPlaneDeletionSlack  = time.Second
	// controlPlaneRestartWindow is how long the components' restart is
	// measured: their informers' lists and watch-lists of the converged
	// cluster take a few seconds of it.
	controlPlaneRestartWindow = 40 * time.Second
	// controlPlaneReadRatio is how many times less apiserver CPU in its
	// LIST and WATCH handlers the components' restart must cost through
	// listproxy.
	controlPlaneReadRatio = 10
)

// controlPlaneSide is one run of the workload, directly or through
// listproxy.
type controlPlaneSide struct {
	Side string `json:"side"`
	Rep  int    `json:"rep"`
	// FirstPhase and SecondPhase are the workload's phases to
	// convergence, in seconds.
	FirstPhase  num `json:"first_phase_s"`
	SecondPhase num `json:"second_phase_s"`
	// Reconcile and Rescale are Deployments' times from create (change)
	// to ready, in seconds: p50 and p99.
	ReconcileP50 num `json:"reconcile_p50_s"`
	ReconcileP99 num `json:"reconcile_p99_s"`
	RescaleP50   num `json:"rescale_p50_s"`
	RescaleP99   num `json:"rescale_p99_s"`
	// ProbeP50 and ProbeP99 are the reconcile probes' times (one
	// Deployment scaled by one at a time, on the converged cluster) from
	// the change to its status showing it done, in seconds.
	ProbeP50 num `json:"probe_p50_s"`
	ProbeP99 num `json:"probe_p99_s"`
	// Probes are every probe's time, in order, in seconds.
	Probes []float64 `json:"probes_s"`
	// NamespaceMax is the slowest namespace deletion, in seconds.
	NamespaceMax num `json:"namespace_deletion_max_s"`
	// RestartAPIServerCPU and RestartListproxyCPU are the CPU seconds
	// the components' restart on the converged cluster cost apiserver+etcd
	// and listproxy within controlPlaneRestartWindow, beyond their idle
	// rate: the price of the control plane's reads.
	RestartAPIServerCPU num `json:"restart_apiserver_etcd_cpu_s"`
	RestartListproxyCPU num `json:"restart_listproxy_cpu_s"`
	// RestartReadCPU is the same difference of the apiserver's CPU
	// profile samples in its LIST and WATCH handlers (readProfileFocus):
	// the apiserver's CPU spent on the restart's reads.
	RestartReadCPU num `json:"restart_apiserver_read_cpu_s"`
	// CPU seconds from the components' start to the end: apiserver+etcd,
	// listproxy, and kube-controller-manager+kube-scheduler.
	APIServerCPU  num `json:"apiserver_etcd_cpu_s"`
	ListproxyCPU  num `json:"listproxy_cpu_s"`
	ComponentsCPU num `json:"components_cpu_s"`
	// ListproxyPeakRSS is listproxy's peak resident set, in bytes.
	ListproxyPeakRSS int64 `json:"listproxy_peak_rss_bytes"`
	// Lists and Watches count the components' LISTs and WATCHes that
	// reached the apiserver (its audit log).
	Lists   int `json:"component_lists"`
	Watches int `json:"component_watches"`
	// FingerprintLines is the size of the end state's fingerprint; Equal
	// says whether it equals the direct run's of the same repetition.
	FingerprintLines int  `json:"fingerprint_lines"`
	Equal            bool `json:"fingerprint_equal"`
}

// runControlPlaneBench is the "control plane" scenario: it runs
// kube-controller-manager and kube-scheduler (framework.StartComponents)
// on workload.Config's fixed workload, scaled up, on a fresh control plane
// per run, alternately reading from the apiserver and through one
// listproxy (cfg.consistentProof), cfg.reps times, and reports each run's
// convergence, reconcile latencies and CPU, and the components' reads that
// reached the apiserver. It runs alone: it needs no seeded cluster.
func runControlPlaneBench(ctx context.Context, cfg config) error {
	logf("scenario: control plane (%d Deployments of %d pods over %d nodes, %d of %d namespaces deleted), proof %s, %d reps",
		controlPlaneWorkload.Namespaces*controlPlaneWorkload.Deployments, controlPlaneWorkload.Replicas, controlPlaneWorkload.Nodes,
		controlPlaneWorkload.DeletedNamespaces, controlPlaneWorkload.Namespaces, cfg.consistentProof, cfg.reps)
	var sides []*controlPlaneSide
	for rep := range cfg.reps {
		var direct []string
		for _, side := range []string{"apiserver", "listproxy"} {
			s, fingerprint, err := controlPlaneRun(ctx, cfg, side, rep)
			if err != nil {
				return fmt.Errorf("control plane, %s, rep %d: %w", side, rep, err)
			}
			if side == "apiserver" {
				direct = fingerprint
			}
			onlyDirect, onlyProxied := workload.Diff(direct, fingerprint)
			s.Equal = len(onlyDirect)+len(onlyProxied) == 0
			if !s.Equal {
				logf("end state differs: only direct %v; only through listproxy %v", onlyDirect, onlyProxied)
			}
			sides = append(sides, s)
		}
	}
	table, missed := controlPlaneMarkdown(cfg, sides)
	fmt.Println()
	fmt.Println(table)
	out, err := json.MarshalIndent(sides, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "controlplane.json"), out, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "controlplane.md"), []byte(table), 0o644); err != nil {
		return err
	}
	if len(missed) > 0 {
		fmt.Printf("\nMISSED: %d target(s)\n", len(missed))
		for _, m := range missed {
			fmt.Println("  " + m)
		}
		return fmt.Errorf("%d target(s) missed", len(missed))
	}
	return nil
}

// controlPlaneRun runs the workload once on a fresh control plane.
func controlPlaneRun(ctx context.Context, cfg config, side string, rep int) (*controlPlaneSide, []string, error) {
	dir := filepath.Join(cfg.out, "controlplane", fmt.Sprintf("%s-%d", side, rep))
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneConfig{Dir: filepath.Join(dir, "cluster"), Log: logWriter{}})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			logf("stop control plane: %v", err)
		}
	}()
	components := framework.ComponentsConfig{Dir: filepath.Join(dir, "components")}
	var rs *framework.ReplicaSet
	if side == "listproxy" {
		args := append(cfg.proofArgs(cp.EtcdEndpoint), "--resources=*")
		args = append(args, cfg.listproxyArgs...)
		if rs, err = framework.StartReplicaSet(ctx, cp, filepath.Join(dir, "listproxy"), 1, args...); err != nil {
			return nil, nil, err
		}
		defer func() {
			if err := rs.Stop(); err != nil {
				logf("stop listproxy: %v", err)
			}
		}()
		components.ServerURL = rs.URL()
	}
	apiPIDs := controlPlanePIDs(cp, "kube-apiserver", "etcd")
	var lpPIDs []int
	if rs != nil {
		lpPIDs = []int{rs.Replicas[0].Process().Pid()}
	}
	apiBefore, lpBefore := cpuTime(apiPIDs), cpuTime(lpPIDs)
	c, err := cp.StartComponents(ctx, components)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("stop components: %v", err)
		}
	}()
	compPIDs := []int{c.ControllerManager.Pid(), c.Scheduler.Pid()}
	wl := controlPlaneWorkload
	wl.Logf = func(format string, args ...any) { logf(side+": "+format, args...) }
	res, err := workload.Run(ctx, cp.UserConfig(framework.UserAdmin), wl)
	if err != nil {
		return nil, nil, err
	}
	s := &controlPlaneSide{
		Side: side, Rep: rep,
		FirstPhase: num(res.Created.Seconds()), SecondPhase: num(res.Changed.Seconds()),
		ReconcileP50: num(percentile(seconds(res.Reconcile), 50)), ReconcileP99: num(percentile(seconds(res.Reconcile), 99)),
		RescaleP50: num(percentile(seconds(res.Rescale), 50)), RescaleP99: num(percentile(seconds(res.Rescale), 99)),
		ProbeP50: num(percentile(seconds(res.Probe), 50)), ProbeP99: num(percentile(seconds(res.Probe), 99)),
		Probes:        seconds(res.Probe),
		NamespaceMax:  num(slices.Max(append(seconds(res.NamespaceDeletion), 0))),
		APIServerCPU:  num((cpuTime(apiPIDs) - apiBefore).Seconds()),
		ListproxyCPU:  num((cpuTime(lpPIDs) - lpBefore).Seconds()),
		ComponentsCPU: num(cpuTime(compPIDs).Seconds()),
	}
	// The components' restart, as after a rollout of the control plane:
	// every informer lists (or watch-lists) the converged cluster again.
	// Its cost is that of a window from just before the restart less that
	// of an equal window before it, the components running on the
	// converged cluster (their leases, resyncs and the kubelets' updates
	// are in both): the processes' CPU, and the apiserver's CPU profile
	// samples in its LIST and WATCH handlers.
	admin := cp.UserConfig(framework.UserAdmin)
	base, err := measureWindow(ctx, admin, filepath.Join(dir, "base.pprof"), apiPIDs, lpPIDs, func() error { return nil })
	if err != nil {
		return nil, nil, err
	}
	restart, err := measureWindow(ctx, admin, filepath.Join(dir, "restart.pprof"), apiPIDs, lpPIDs, func() error {
		if err := c.Stop(); err != nil {
			return fmt.Errorf("stop components for their restart: %w", err)
		}
		components.Dir = filepath.Join(dir, "components-restarted")
		if c, err = cp.StartComponents(ctx, components); err != nil {
			return fmt.Errorf("restart components: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	s.RestartAPIServerCPU = num(max(0, restart.api-base.api))
	s.RestartListproxyCPU = num(max(0, restart.listproxy-base.listproxy))
	s.RestartReadCPU = num(max(0, restart.reads-base.reads))
	logf("%s rep %d: restart window: apiserver+etcd %.2f s of CPU (%.2f s before it), of which the apiserver's reads %.3f s (%.3f s before it); listproxy %.2f s (%.2f s before it)",
		side, rep, restart.api, base.api, restart.reads, base.reads, restart.listproxy, base.listproxy)
	if rs != nil {
		s.ListproxyPeakRSS = rs.Replicas[0].PeakRSS()
	}
	reads, _, err := workload.ComponentReads(cp)
	if err != nil {
		return nil, nil, err
	}
	for key, n := range reads {
		if strings.HasPrefix(key, "watch ") {
			s.Watches += n
		} else {
			s.Lists += n
		}
	}
	fingerprint, err := workload.Fingerprint(ctx, kubernetes.NewForConfigOrDie(admin), dynamic.NewForConfigOrDie(admin))
	if err != nil {
		return nil, nil, err
	}
	s.FingerprintLines = len(fingerprint)
	logf("%s rep %d: phases %.1f s / %.1f s, reconcile p99 %.3f s, apiserver+etcd CPU %.1f s, listproxy CPU %.1f s, %d lists and %d watches of the components reached the apiserver",
		side, rep, s.FirstPhase, s.SecondPhase, s.ReconcileP99, s.APIServerCPU, s.ListproxyCPU, s.Lists, s.Watches)
	return s, fingerprint, nil
}

// window is what measureWindow measured: CPU seconds of apiserver+etcd and
// of listproxy, and of the apiserver's samples in readProfileFocus.
type window struct{ api, listproxy, reads float64 }

// readProfileFocus selects the apiserver's CPU profile samples spent
// serving LISTs and WATCHes: handlers.ListResource serves both (a watch's
// encoding and writing included), the cache watchers' goroutines prepare a
// watch's events.
const readProfileFocus = `handlers\.ListResource|cacheWatcher\)\.process`

// measureWindow runs action at the start of a window of
// controlPlaneRestartWindow and measures the window: the processes' CPU
// and the apiserver's CPU profile of it (kept in file), read with go tool
// pprof.
func measureWindow(ctx context.Context, admin *rest.Config, file string, api, lp []int, action func() error) (window, error) {
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return window{}, err
	}
	type result struct {
		raw []byte
		err error
	}
	profiled := make(chan result, 1)
	go func() {
		raw, err := client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(controlPlaneRestartWindow.Seconds()))).DoRaw(ctx)
		profiled <- result{raw, err}
	}()
	start := time.Now()
	a0, b0 := cpuTime(api), cpuTime(lp)
	if err := action(); err != nil {
		return window{}, err
	}
	if err := pause(ctx, controlPlaneRestartWindow-time.Since(start)); err != nil {
		return window{}, err
	}
	w := window{api: (cpuTime(api) - a0).Seconds(), listproxy: (cpuTime(lp) - b0).Seconds()}
	r := <-profiled
	if r.err != nil {
		return window{}, fmt.Errorf("apiserver CPU profile: %w", r.err)
	}
	if err := os.WriteFile(file, r.raw, 0o644); err != nil {
		return window{}, err
	}
	w.reads, err = profileSeconds(ctx, file, readProfileFocus)
	return w, err
}

// profileSeconds returns the CPU seconds of the samples of profile file
// whose stacks hold a function matching focus, as go tool pprof counts them.
func profileSeconds(ctx context.Context, file, focus string) (float64, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-unit=ms", "-top", "-nodefraction=0", "-focus="+focus, file).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("go tool pprof %s: %w: %s", file, err, out)
	}
	m := regexp.MustCompile(`Showing nodes accounting for ([0-9.]+)(ms)?,`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("go tool pprof %s: no total in %q", file, out)
	}
	ms, err := strconv.ParseFloat(string(m[1]), 64)
	return ms / 1000, err
}

func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// controlPlaneMarkdown renders the runs and checks each listproxy run
// against the direct run of its repetition.
func controlPlaneMarkdown(cfg config, sides []*controlPlaneSide) (string, []string) {
	var b strings.Builder
	var missed []string
	fmt.Fprintf(&b, "control plane through listproxy (proof %s): %d Deployments of %d pods, %d nodes, %d of %d namespaces deleted\n\n",
		cfg.consistentProof, controlPlaneWorkload.Namespaces*controlPlaneWorkload.Deployments, controlPlaneWorkload.Replicas,
		controlPlaneWorkload.Nodes, controlPlaneWorkload.DeletedNamespaces, controlPlaneWorkload.Namespaces)
	b.WriteString("| rep | side | phase 1 s | phase 2 s | bulk reconcile p50 / p99 s | bulk rescale p50 / p99 s | probe p50 / p99 s | ns deletion max s | apiserver+etcd CPU s | listproxy CPU s | components CPU s | restart: apiserver+etcd / its reads / listproxy CPU s | listproxy peak RSS | component LISTs / WATCHes at the apiserver | end state equal |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	var direct *controlPlaneSide
	for _, s := range sides {
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.1f | %.1f | %.1f | %.1f | %.2f / %.3f / %.2f | %.0f MiB | %d / %d | %v |\n",
			s.Rep, s.Side, s.FirstPhase, s.SecondPhase, s.ReconcileP50, s.ReconcileP99, s.RescaleP50, s.RescaleP99, s.ProbeP50, s.ProbeP99, s.NamespaceMax,
			s.APIServerCPU, s.ListproxyCPU, s.ComponentsCPU, s.RestartAPIServerCPU, s.RestartReadCPU, s.RestartListproxyCPU,
			float64(s.ListproxyPeakRSS)/(1<<20), s.Lists, s.Watches, s.Equal)
		if s.Side == "apiserver" {
			direct = s
			continue
		}
		if direct == nil {
			continue
		}
		if !s.Equal {
			missed = append(missed, fmt.Sprintf("rep %d: the end state through listproxy differs from direct", s.Rep))
		}
		// The bulk phases' latencies are the controllers' queues (a
		// thousand Deployments at once) and vary by tens of seconds
		// between runs of one side: reported, not targets. The probes
		// time one reconcile at a time.
		if float64(s.ProbeP99) > float64(direct.ProbeP99)+controlPlaneReconcileSlack.Seconds() {
			missed = append(missed, fmt.Sprintf("rep %d: reconcile probe p99 %.3f s through listproxy, want ≤ direct %.3f s + %s",
				s.Rep, s.ProbeP99, direct.ProbeP99, controlPlaneReconcileSlack))
		}
		if float64(s.RestartReadCPU)*controlPlaneReadRatio > float64(direct.RestartReadCPU) {
			missed = append(missed, fmt.Sprintf("rep %d: the components' restart cost the apiserver %.3f s of CPU in reads through listproxy, want ≤ 1/%d of direct's %.3f s",
				s.Rep, s.RestartReadCPU, controlPlaneReadRatio, direct.RestartReadCPU))
		}
		if float64(s.NamespaceMax) > float64(direct.NamespaceMax)+controlPlaneDeletionSlack.Seconds() {
			missed = append(missed, fmt.Sprintf("rep %d: namespace deletion %.1f s through listproxy, want ≤ direct %.1f s + %s",
				s.Rep, s.NamespaceMax, direct.NamespaceMax, controlPlaneDeletionSlack))
		}
		fmt.Fprintf(&b, "| %d | ratio direct/listproxy | | | | | | | %.1f× (apiserver+etcd) | | | %s (apiserver+etcd), %s (its reads) | | | |\n",
			s.Rep, float64(direct.APIServerCPU)/max(float64(s.APIServerCPU), 1e-9),
			restartRatio(direct.RestartAPIServerCPU, s.RestartAPIServerCPU), restartRatio(direct.RestartReadCPU, s.RestartReadCPU))
	}
	return b.String(), missed
}

// restartRatio renders direct's restart cost over listproxy's. A cost
// through listproxy within the idle rate's noise (the window less the one
// before it, clamped at 0) has no meaningful ratio.
func restartRatio(direct, proxied num) string {
	if proxied < 0.001 {
		return "no cost above the idle rate"
	}
	return fmt.Sprintf("%.1f×", float64(direct)/float64(proxied))
}
