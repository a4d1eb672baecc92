// Command bench is `make bench`: it measures listproxy side by side with the
// kube-apiserver it fronts, on the same data in the same run.
//
// It starts etcd and kube-apiserver (test/framework, under BENCH_OUT/cluster)
// and the listproxy binary as a separate process (with --etcd-servers, or
// none: BENCH_CONSISTENT_PROOF), seeds
// BENCH_PODS pods of about 4 KB through the apiserver, warms listproxy, and
// then runs every scenario against the apiserver directly and through
// listproxy, alternating. For each it reports wall time, the CPU time of the
// answering processes per request (their process CPU clocks:
// kube-apiserver plus etcd when direct, listproxy when proxied), response
// bytes and the ratio direct/proxied. Every scenario must be answered by
// listproxy from snapshots only, and sampled answers (a whole walk, page by
// page) must equal the apiserver's at the same resourceVersion; otherwise
// the scenario fails whatever its figures. The table is printed and written
// with the raw numbers to BENCH_OUT as Markdown and JSON; a missed target
// ends the run with a MISSED summary and exit status 1. docs/performance.md
// records measured tables and the targets they are held to.
//
// The "kubectl get" scenario (table) walks and pages pods' Tables as
// kubectl asks for them, after measuring what listproxy's Table store of
// pods costs the apiserver per pod change.
//
// The control-plane scenario (BENCH_SCENARIOS=controlplane, alone) runs
// kube-controller-manager and kube-scheduler on a fixed workload of 1,000
// Deployments (10,000 pods) over 50 fake nodes, on a fresh control plane
// per run, reading directly and through one listproxy, BENCH_REPS times:
// convergence, reconcile latency, namespace deletion, CPU per process, and
// the components' reads that reached the apiserver (test/framework/workload).
//
// The sharded-informers scenario (sharded) compares one pod informer
// through listproxy with 8 informers of one shard each (KEP-5866 shard
// selectors on the uid, which listproxy serves from its snapshots whatever
// the apiserver's feature gate): listproxy's CPU for their syncs and for a
// churn of pod writes, and the apiserver's LISTs and WATCHes of pods
// meanwhile, read from its audit log.
//
// The informer storm runs under BENCH_STORM_WRITES pod writes per second
// (their own CPU, measured alone first, subtracted), and ends with its
// memory line: BENCH_SLOW_WATCHLISTS clients read watch-lists of every pod
// slowly from a listproxy of their own with
// --max-inflight-list-bytes=BENCH_SLOW_INFLIGHT_BYTES; its peak RSS must
// stay within its RSS before plus that bound.
//
// Every parameter is a flag whose default comes from the environment:
//
//	BENCH_PODS=30000            pods to seed (50 namespaces, 500 nodes)
//	BENCH_REPS=5                repetitions of each scenario
//	BENCH_CHURN=2m              churn period (writes at BENCH_WRITE_RATE) before the last memory sample
//	BENCH_WRITE_RATE=100        writes per second during consistent reads and churn
//	BENCH_OUT=_output/bench/kube-vVERSION  output directory (the cluster lives in OUT/cluster)
//	KUBE_VERSION                the control-plane release (default: hack/kube-versions)
//	BENCH_WALK_LIMITS=500       page sizes of the paginated walks (1000 is added from 100k pods)
//	BENCH_SCENARIOS=all         comma-separated subset: full,walk,firstpage,nodename,table,consistent,consistent-quiet,parity,storm,steady,nodeagents,sharded,cold,rollout,memory (all but cold and rollout), or controlplane alone
//	BENCH_INFORMERS=50          pod informers started at once in the informer storm
//	BENCH_STORM_WRITES=50       pod writes per second while the storm's informers start and sync (0: none)
//	BENCH_SLOW_WATCHLISTS=200   slow watch-lists of all pods after the storm, for listproxy's peak RSS (0: none)
//	BENCH_SLOW_INFLIGHT_BYTES=67108864  --max-inflight-list-bytes of the listproxy the slow watch-lists go to
//	BENCH_WATCHERS=1000         pod watchers kept open in the steady-state scenario
//	BENCH_NODE_WATCHERS=5000    node agents' watchers (spec.nodeName=NODE watch-lists) in the node agents scenario
//	BENCH_CONSISTENT_PROOF=etcd how listproxy proves consistent reads: etcd (--etcd-servers) or apiserver (no etcd address)
//	BENCH_LISTPROXY_BIN         listproxy binary (default _output/bin/listproxy)
//	BENCH_LISTPROXY_ARGS        extra listproxy flags, space-separated (e.g. --snapshot-history=15s)
//	BENCH_LISTPROXY_ENV         environment for listproxy only, space-separated (e.g. GOGC=25)
//	BENCH_HOLD=1                keep everything running after the report until Ctrl-C (for profiling)
//
// Ctrl-C stops every process it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/listproxy/listproxy/test/framework"
)

// config is the benchmark's parameters.
type config struct {
	pods             int
	reps             int
	churn            time.Duration
	writeRate        int
	out              string
	walkLimits       []int
	scenarios        map[string]bool
	listproxyBin     string
	selectorRequests int
	firstPageN       int
	concurrency      int
	consistentN      int
	listproxyArgs    []string
	listproxyEnv     []string
	hold             bool
	informers        int
	stormWrites      int
	slowWatchLists   int
	slowInflight     int64
	watchers         int
	nodeWatchers     int
	// consistentProof is how listproxy proves consistent reads: "etcd"
	// (given --etcd-servers) or "apiserver" (given no etcd address, as on
	// a managed cluster).
	consistentProof string
}

// proofArgs are listproxy's flags for cfg.consistentProof.
func (cfg config) proofArgs(etcdEndpoint string) []string {
	if cfg.consistentProof == "apiserver" {
		return []string{"--consistent-proof=apiserver"}
	}
	return []string{"--etcd-servers=" + etcdEndpoint}
}

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err != nil && interrupted:
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func parseConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	pods := fs.Int("pods", envInt("BENCH_PODS", 30000), "pods to seed ($BENCH_PODS)")
	reps := fs.Int("reps", envInt("BENCH_REPS", 5), "repetitions of each scenario ($BENCH_REPS)")
	churn := fs.Duration("churn", envDuration("BENCH_CHURN", 2*time.Minute), "churn period before the last memory sample ($BENCH_CHURN)")
	writeRate := fs.Int("write-rate", envInt("BENCH_WRITE_RATE", 100), "writes per second during consistent reads and churn ($BENCH_WRITE_RATE)")
	out := fs.String("out", envString("BENCH_OUT", defaultOut()), "output directory ($BENCH_OUT)")
	walkLimits := fs.String("walk-limits", envString("BENCH_WALK_LIMITS", ""), "comma-separated page sizes of the paginated walks; default 500, plus 1000 from 100k pods ($BENCH_WALK_LIMITS)")
	scenarios := fs.String("scenarios", envString("BENCH_SCENARIOS", "all"), "comma-separated subset of full,walk,firstpage,nodename,table,consistent,consistent-quiet,parity,storm,steady,nodeagents,sharded,cold,rollout,memory ($BENCH_SCENARIOS)")
	bin := fs.String("listproxy", envString("BENCH_LISTPROXY_BIN", ""), "listproxy binary; default <repo>/_output/bin/listproxy ($BENCH_LISTPROXY_BIN)")
	selectorN := fs.Int("nodename-requests", envInt("BENCH_NODENAME_REQUESTS", 1000), "spec.nodeName LISTs per side ($BENCH_NODENAME_REQUESTS)")
	firstPageN := fs.Int("firstpage-requests", envInt("BENCH_FIRSTPAGE_REQUESTS", 200), "sequential first-page LISTs per side ($BENCH_FIRSTPAGE_REQUESTS)")
	concurrency := fs.Int("concurrency", envInt("BENCH_CONCURRENCY", 16), "concurrent clients of the concurrent first-page scenario ($BENCH_CONCURRENCY)")
	informers := fs.Int("informers", envInt("BENCH_INFORMERS", 50), "pod informers started at once in the informer storm ($BENCH_INFORMERS)")
	stormWrites := fs.Int("storm-writes", envInt("BENCH_STORM_WRITES", 50), "pod writes per second during the informer storm; 0 for none ($BENCH_STORM_WRITES)")
	slowWatchLists := fs.Int("slow-watch-lists", envInt("BENCH_SLOW_WATCHLISTS", 200), "slow watch-lists of all pods after the informer storm; 0 for none ($BENCH_SLOW_WATCHLISTS)")
	slowInflight := fs.Int64("slow-inflight-bytes", int64(envInt("BENCH_SLOW_INFLIGHT_BYTES", 64<<20)), "--max-inflight-list-bytes of the listproxy serving the slow watch-lists ($BENCH_SLOW_INFLIGHT_BYTES)")
	watchers := fs.Int("watchers", envInt("BENCH_WATCHERS", 1000), "pod watchers kept open in the steady-state scenario ($BENCH_WATCHERS)")
	nodeWatchers := fs.Int("node-watchers", envInt("BENCH_NODE_WATCHERS", 5000), "node agents' watchers (one node's pods each) in the node agents scenario ($BENCH_NODE_WATCHERS)")
	consistentN := fs.Int("consistent-requests", envInt("BENCH_CONSISTENT_REQUESTS", 200), "consistent LISTs per side under writes ($BENCH_CONSISTENT_REQUESTS)")
	lpArgs := fs.String("listproxy-args", envString("BENCH_LISTPROXY_ARGS", ""), "extra listproxy flags, space-separated ($BENCH_LISTPROXY_ARGS)")
	lpEnv := fs.String("listproxy-env", envString("BENCH_LISTPROXY_ENV", ""), "NAME=VALUE settings for listproxy's environment only, space-separated ($BENCH_LISTPROXY_ENV)")
	proof := fs.String("consistent-proof", envString("BENCH_CONSISTENT_PROOF", "etcd"), "how listproxy proves consistent reads: etcd (given --etcd-servers) or apiserver (no etcd address) ($BENCH_CONSISTENT_PROOF)")
	hold := fs.Bool("hold", os.Getenv("BENCH_HOLD") != "", "keep the processes running after the report until Ctrl-C ($BENCH_HOLD)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	cfg := config{
		pods: *pods, reps: *reps, churn: *churn, writeRate: *writeRate, out: *out,
		listproxyBin: *bin, selectorRequests: *selectorN, firstPageN: *firstPageN,
		concurrency: *concurrency, consistentN: *consistentN, informers: *informers, watchers: *watchers,
		stormWrites: *stormWrites, slowWatchLists: *slowWatchLists, slowInflight: *slowInflight, nodeWatchers: *nodeWatchers,
		listproxyArgs: strings.Fields(*lpArgs), listproxyEnv: strings.Fields(*lpEnv), hold: *hold,
		consistentProof: *proof,
		scenarios:       map[string]bool{},
	}
	switch {
	case cfg.consistentProof != "etcd" && cfg.consistentProof != "apiserver":
		return config{}, fmt.Errorf("-consistent-proof=%q: want etcd or apiserver", cfg.consistentProof)
	case cfg.pods < 500:
		return config{}, fmt.Errorf("-pods=%d: need at least 500 (one per node)", cfg.pods)
	case cfg.reps < 1:
		return config{}, fmt.Errorf("-reps=%d: need at least 1", cfg.reps)
	case cfg.writeRate < 1:
		return config{}, fmt.Errorf("-write-rate=%d: need at least 1", cfg.writeRate)
	case cfg.concurrency < 1:
		return config{}, fmt.Errorf("-concurrency=%d: need at least 1", cfg.concurrency)
	case cfg.informers < 1:
		return config{}, fmt.Errorf("-informers=%d: need at least 1", cfg.informers)
	case cfg.stormWrites < 0:
		return config{}, fmt.Errorf("-storm-writes=%d: must not be negative", cfg.stormWrites)
	case cfg.slowWatchLists < 0:
		return config{}, fmt.Errorf("-slow-watch-lists=%d: must not be negative", cfg.slowWatchLists)
	case cfg.slowInflight < 1:
		return config{}, fmt.Errorf("-slow-inflight-bytes=%d: need at least 1 (the bound is the point)", cfg.slowInflight)
	case cfg.watchers < 1:
		return config{}, fmt.Errorf("-watchers=%d: need at least 1", cfg.watchers)
	case cfg.nodeWatchers < 1:
		return config{}, fmt.Errorf("-node-watchers=%d: need at least 1", cfg.nodeWatchers)
	}
	if *walkLimits == "" {
		cfg.walkLimits = []int{500}
		if cfg.pods >= 100_000 {
			cfg.walkLimits = append(cfg.walkLimits, 1000)
		}
	} else {
		for _, s := range strings.Split(*walkLimits, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return config{}, fmt.Errorf("-walk-limits: %q is not a positive page size", s)
			}
			cfg.walkLimits = append(cfg.walkLimits, n)
		}
	}
	known := map[string]bool{"full": true, "walk": true, "firstpage": true, "nodename": true, "table": true, "consistent": true, "consistent-quiet": true, "parity": true, "storm": true, "steady": true, "nodeagents": true, "sharded": true, "cold": true, "rollout": true, "memory": true, "controlplane": true}
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "all" {
			for k := range known {
				// cold and rollout start listproxy processes and storm
				// the apiserver directly: minutes each; named only.
				cfg.scenarios[k] = k != "cold" && k != "rollout" && k != "controlplane"
			}
			continue
		}
		if !known[s] {
			return config{}, fmt.Errorf("-scenarios: unknown scenario %q", s)
		}
		cfg.scenarios[s] = true
	}
	if cfg.scenarios["controlplane"] && len(cfg.scenarios) > 1 {
		return config{}, fmt.Errorf("-scenarios: controlplane runs alone (it starts control planes of its own)")
	}
	return cfg, nil
}

func run(ctx context.Context, cfg config) error {
	begin := time.Now()
	out, err := filepath.Abs(cfg.out)
	if err != nil {
		return err
	}
	cfg.out = out
	if cfg.listproxyBin == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return err
		}
		cfg.listproxyBin = filepath.Join(root, "_output", "bin", "listproxy")
	}
	if _, err := os.Stat(cfg.listproxyBin); err != nil {
		return fmt.Errorf("listproxy binary missing (run `make build`): %w", err)
	}
	kubeVersion, err := framework.KubeVersion()
	if err != nil {
		return err
	}
	logf("control plane: Kubernetes v%s (KUBE_VERSION)", kubeVersion)
	if cfg.scenarios["controlplane"] {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
		return runControlPlaneBench(ctx, cfg)
	}

	env, err := startEnv(ctx, cfg)
	if env != nil {
		defer env.stop()
	}
	if err != nil {
		return err
	}
	if err := env.seed(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := env.warm(ctx); err != nil {
		return fmt.Errorf("warm listproxy: %w", err)
	}

	r := &report{
		Started: begin.UTC().Format(time.RFC3339),
		Config: reportConfig{
			KubeVersion: kubeVersion,
			Pods:        cfg.pods, Namespaces: numNamespaces, Nodes: numNodes, Reps: cfg.reps,
			Churn: cfg.churn.String(), WriteRate: cfg.writeRate, WalkLimits: cfg.walkLimits,
			ListproxyArgs: cfg.listproxyArgs, ListproxyEnv: cfg.listproxyEnv, ConsistentProof: cfg.consistentProof,
			CPUs: numCPU(), LoadAvg: loadAvg(),
		},
		ObjectBytes: env.objectBytes,
	}
	b := &bench{cfg: cfg, env: env, report: r}
	if err := b.runAll(ctx); err != nil {
		return err
	}
	r.Duration = time.Since(begin).Round(time.Second).String()
	r.LoadAvgEnd = loadAvg()
	table := r.markdown()
	fmt.Println()
	fmt.Println(table)
	if err := r.write(cfg.out); err != nil {
		return err
	}
	logf("results in %s (took %s)", cfg.out, r.Duration)
	missed := r.missed()
	if len(missed) > 0 {
		fmt.Printf("\nMISSED: %d target(s)\n", len(missed))
		for _, m := range missed {
			fmt.Printf("MISSED: %s\n", m)
		}
	} else {
		fmt.Println("\nAll targets met.")
	}
	if cfg.hold {
		logf("holding (BENCH_HOLD): apiserver %s (token in %s), listproxy %s (pid %d); Ctrl-C stops",
			env.cp.APIServerURL, filepath.Join(cfg.out, "cluster", "admin.kubeconfig"), env.proxied.base, env.listproxy.Pid())
		<-ctx.Done()
	}
	if len(missed) > 0 {
		return fmt.Errorf("%d target(s) missed", len(missed))
	}
	return nil
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s=%q is not an integer; using %d\n", name, v, def)
		return def
	}
	return n
}

func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s=%q is not a duration; using %s\n", name, v, def)
		return def
	}
	return d
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// defaultOut is _output/bench/kube-vVERSION for the selected release, so
// that runs against each release keep their own results.
func defaultOut() string {
	v, err := framework.KubeVersion()
	if err != nil {
		return filepath.Join("_output", "bench")
	}
	return filepath.Join("_output", "bench", "kube-v"+v)
}
