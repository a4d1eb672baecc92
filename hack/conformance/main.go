// Command conformance is `make conformance`: it runs upstream's own e2e specs
// (the e2e.test binary of KUBE_VERSION, built by hack/build-e2e.sh) against a
// local control plane started by test/framework, once directly and once
// through listproxy in each mode, reads each run's JUnit report, prints the
// outcomes side by side and exits non-zero when listproxy's pass set lacks a
// spec the direct run passed.
//
// The specs: the [sig-api-machinery] [Conformance] specs that need no
// kubelet, webhook or serial run, the watch specs ("Watchers"), the
// watch-list specs ("API Streaming") and "API chunking" (with its [Slow]
// spec, which continues a list after etcd compacted its resourceVersion).
//
// The runs, at the same time, each against a control plane of its own:
//
//	direct   the apiserver, as user admin
//	sidecar  listproxy on plain HTTP on loopback with its own admin
//	         credentials, --serve-watches and --etcd-servers
//	service  listproxy with TLS and delegated authentication and
//	         authorization (--authentication=delegated), the caller's admin
//	         token passed on
//
// Environment:
//
//	CONFORMANCE_MODES=direct,sidecar,service  the runs (direct is required)
//	CONFORMANCE_FOCUS, CONFORMANCE_SKIP        replace the spec regexps
//	CONFORMANCE_DIR=DIR                        logs and reports (default: a new temporary directory, kept)
//	CONFORMANCE_E2E_BIN=PATH                   default _output/e2e-vKUBE_VERSION/e2e.test
//	CONFORMANCE_LISTPROXY_BIN=PATH             default _output/bin/listproxy
//	CONFORMANCE_TIMEOUT=DURATION               bound on each run (default 45m)
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// DefaultFocus selects the specs; DefaultSkip leaves out those that cannot
// pass on the local control plane, which has no kubelets and runs only the
// namespace, service account and garbage collector controllers: pods and
// what makes them (deployments, replica sets; the aggregator spec's sample
// apiserver, admission webhooks), the resource quota controller's usage
// accounting and status, and serial or disruptive runs.
const (
	DefaultFocus = `\[sig-api-machinery\].*\[Conformance\]|\[sig-api-machinery\] Watchers|\[sig-api-machinery\] API Streaming|API chunking`
	DefaultSkip  = `\[Serial\]|\[Disruptive\]|[Ww]ebhook|[Pp]od|[Dd]eployment|ReplicaSet|kubelet|Aggregator|ResourceQuota.*(capture the life|promptly calculated|scope|status)`
)

// The modes a run can take.
const (
	ModeDirect  = "direct"
	ModeSidecar = "sidecar"
	ModeService = "service"
)

// compactionInterval is the apiserver's --etcd-compaction-interval: the
// [Slow] chunking spec waits for a compaction (default every 5 minutes).
const compactionInterval = "1m"

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// config is what the environment selects.
type config struct {
	root         string
	kubeVersion  string
	modes        []string
	focus, skip  string
	dir          string
	e2eBin       string
	listproxyBin string
	kubectl      string
	timeout      time.Duration
}

func loadConfig() (config, error) {
	var c config
	var err error
	if c.root, err = framework.RepoRoot(); err != nil {
		return c, err
	}
	if c.kubeVersion, err = framework.KubeVersion(); err != nil {
		return c, err
	}
	c.modes = strings.Split(envOr("CONFORMANCE_MODES", ModeDirect+","+ModeSidecar+","+ModeService), ",")
	if c.modes[0] != ModeDirect {
		return c, fmt.Errorf("CONFORMANCE_MODES=%q: the first run must be %s, the one the others are compared with", strings.Join(c.modes, ","), ModeDirect)
	}
	for _, m := range c.modes[1:] {
		if m != ModeSidecar && m != ModeService {
			return c, fmt.Errorf("CONFORMANCE_MODES: unknown mode %q (want %s, %s)", m, ModeSidecar, ModeService)
		}
	}
	c.focus = envOr("CONFORMANCE_FOCUS", DefaultFocus)
	c.skip = envOr("CONFORMANCE_SKIP", DefaultSkip)
	c.e2eBin = envOr("CONFORMANCE_E2E_BIN", filepath.Join(c.root, "_output", "e2e-v"+c.kubeVersion, "e2e.test"))
	c.listproxyBin = envOr("CONFORMANCE_LISTPROXY_BIN", filepath.Join(c.root, "_output", "bin", "listproxy"))
	if c.timeout, err = time.ParseDuration(envOr("CONFORMANCE_TIMEOUT", "45m")); err != nil {
		return c, fmt.Errorf("CONFORMANCE_TIMEOUT: %w", err)
	}
	for _, bin := range []string{c.e2eBin, c.listproxyBin} {
		if _, err := os.Stat(bin); err != nil {
			return c, fmt.Errorf("binary missing (`make conformance` builds it): %w", err)
		}
	}
	if c.kubectl, err = framework.Kubectl(); err != nil {
		return c, err
	}
	c.dir = os.Getenv("CONFORMANCE_DIR")
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "listproxy-conformance-"); err != nil {
			return c, err
		}
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// outcome is one finished run.
type outcome struct {
	mode    string
	results map[string]Result
	metrics framework.Metrics // listproxy's, after the run; nil for direct
	log     string            // e2e.test's output
	err     error
}

func run() (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := loadConfig()
	if err != nil {
		return 0, err
	}
	logf("kube %s, e2e binary %s, runs %s; logs and reports in %s", c.kubeVersion, c.e2eBin, strings.Join(c.modes, ","), c.dir)

	outcomes := make([]outcome, len(c.modes))
	var wg sync.WaitGroup
	for i, mode := range c.modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = runMode(ctx, c, mode)
		}()
	}
	wg.Wait()

	var errs []error
	for _, o := range outcomes {
		if o.err != nil {
			errs = append(errs, fmt.Errorf("%s run: %w", o.mode, o.err))
		}
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	return report(os.Stdout, outcomes), nil
}

// runMode starts a control plane of its own for mode (some specs create
// cluster-scoped objects with fixed names, so runs must not share one), runs
// the specs once and reads the report; a listproxy it started is scraped
// after the run and stopped.
func runMode(ctx context.Context, c config, mode string) outcome {
	o := outcome{mode: mode}
	dir := filepath.Join(c.dir, mode)
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneConfig{
		Dir:                filepath.Join(dir, "control-plane"),
		Controllers:        true,
		ExtraAPIServerArgs: []string{"--etcd-compaction-interval=" + compactionInterval},
		Log:                prefixed(mode),
	})
	if err != nil {
		o.err = err
		return o
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			logf("%s: stop control plane: %v", mode, err)
		}
	}()
	keysFile := filepath.Join(dir, "continue-token-keys")
	if o.err = framework.WriteContinueTokenKeyFile(keysFile); o.err != nil {
		return o
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	var lp *listproxy
	switch mode {
	case ModeDirect:
		o.err = cp.WriteKubeconfig(kubeconfig, "", framework.UserAdmin, false)
	default:
		lp, o.err = startListproxy(ctx, c, cp, keysFile, mode, dir)
		if o.err == nil {
			o.err = lp.writeKubeconfig(kubeconfig)
		}
	}
	if o.err != nil {
		return o
	}
	if lp != nil {
		defer func() {
			if err := lp.proc.Stop(); err != nil {
				logf("%s: stop listproxy: %v", mode, err)
			}
		}()
	}

	report := filepath.Join(dir, "junit.xml")
	logFile := filepath.Join(dir, "e2e.log")
	o.log = logFile
	logf("%s: running the specs (log %s)", mode, logFile)
	begin := time.Now()
	runErr := runE2E(ctx, c, kubeconfig, report, logFile)
	logf("%s: done in %s (%v)", mode, time.Since(begin).Round(time.Second), runErr)
	f, err := os.Open(report)
	if err != nil {
		o.err = fmt.Errorf("no JUnit report (e2e.test ended with %w): %w\n%s", cmp.Or(runErr, errExitedZero), err, framework.LogTail(logFile, 30))
		return o
	}
	defer func() { _ = f.Close() }()
	if o.results, o.err = ParseJUnit(f); o.err != nil {
		return o
	}
	if lp != nil {
		o.metrics, o.err = framework.ScrapeMetrics(ctx, lp.client, lp.url+"/metrics")
	}
	return o
}

// errExitedZero stands for a run of e2e.test that ended without error.
var errExitedZero = errors.New("exit status 0")

// runE2E runs e2e.test with its output in logFile. A non-zero exit is
// expected when a spec fails; the report says which.
func runE2E(ctx context.Context, c config, kubeconfig, report, logFile string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	cmd := exec.CommandContext(ctx, c.e2eBin,
		"--kubeconfig="+kubeconfig,
		"--kubectl-path="+c.kubectl,
		"--provider=skeleton",
		// The local control plane has no kube-root-ca.crt publisher.
		"--e2e-verify-service-account=false",
		// There are no nodes; without this the suite's set-up looks for a
		// ready, schedulable one and fails.
		"--num-nodes=0",
		"--ginkgo.focus="+c.focus,
		"--ginkgo.skip="+c.skip,
		"--ginkgo.junit-report="+report,
		"--ginkgo.timeout="+c.timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd.Run()
}

// listproxy is a listproxy process started for one run.
type listproxy struct {
	proc   *framework.Process
	url    string
	caFile string // service mode: listproxy's self-signed CA
	token  string // service mode: the caller's token (admin)
	client *http.Client
}

func startListproxy(ctx context.Context, c config, cp *framework.ControlPlane, keysFile, mode, dir string) (*listproxy, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	upstream := filepath.Join(dir, "upstream.kubeconfig")
	if err := cp.WriteKubeconfig(upstream, "", framework.UserAdmin, false); err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + upstream,
		"--listen-address=" + addr,
		"--etcd-servers=" + cp.EtcdEndpoint,
		"--serve-watches",
		"--continue-token-keys-file=" + keysFile,
	}
	lp := &listproxy{url: "http://" + addr}
	cfg := &rest.Config{Host: lp.url}
	if mode == ModeService {
		certDir := filepath.Join(dir, "serving")
		args = append(args, "--authentication=delegated", "--cert-dir="+certDir, "--client-ca-file="+cp.CAFile)
		lp.url = "https://" + addr
		lp.caFile = filepath.Join(certDir, "listproxy-ca.crt")
		lp.token = cp.UserToken(framework.UserAdmin)
		cfg = &rest.Config{Host: lp.url, BearerToken: lp.token, TLSClientConfig: rest.TLSClientConfig{CAFile: lp.caFile}}
	}
	logf("%s: starting listproxy on %s", mode, lp.url)
	if lp.proc, err = framework.StartProcess("listproxy-"+mode, c.listproxyBin, args, filepath.Join(dir, "listproxy.log")); err != nil {
		return nil, err
	}
	if err := lp.waitReady(ctx, cfg); err != nil {
		_ = lp.proc.Stop()
		return nil, err
	}
	return lp, nil
}

// waitReady polls /readyz until it answers 200. The client is made only
// once the CA file exists: listproxy writes it as it starts.
func (lp *listproxy) waitReady(ctx context.Context, cfg *rest.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var lastErr error
	for {
		lastErr = lp.ready(ctx, cfg)
		if lastErr == nil {
			return nil
		}
		select {
		case <-lp.proc.Done():
			return lp.proc.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("listproxy not ready: %w (last error: %w)\n%s", ctx.Err(), lastErr, framework.LogTail(lp.proc.LogFile, 50))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (lp *listproxy) ready(ctx context.Context, cfg *rest.Config) error {
	if lp.client == nil {
		if lp.caFile != "" {
			if _, err := os.Stat(lp.caFile); err != nil {
				return err
			}
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		lp.client = client
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lp.url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := lp.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// writeKubeconfig writes the kubeconfig the specs reach listproxy with: no
// credentials in sidecar mode (listproxy uses its own), the admin token
// and listproxy's CA in service mode.
func (lp *listproxy) writeKubeconfig(path string) error {
	cluster := &clientcmdapi.Cluster{Server: lp.url, CertificateAuthority: lp.caFile}
	config := clientcmdapi.NewConfig()
	config.Clusters["listproxy"] = cluster
	config.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: lp.token}
	config.Contexts["listproxy"] = &clientcmdapi.Context{Cluster: "listproxy", AuthInfo: "user"}
	config.CurrentContext = "listproxy"
	return clientcmd.WriteToFile(*config, path)
}

// report prints the outcomes side by side, the specs listproxy lost with
// their failure messages, and listproxy's own counts; it returns the exit
// code: 1 when a listproxy run lacks a spec the direct run passed.
func report(w io.Writer, outcomes []outcome) int {
	runs := make([]map[string]Result, len(outcomes))
	for i, o := range outcomes {
		runs[i] = o.results
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, o := range outcomes {
		fmt.Fprintf(tw, "%s\t", o.mode)
	}
	fmt.Fprintln(tw, "spec")
	for _, name := range Ran(runs...) {
		for _, run := range runs {
			fmt.Fprintf(tw, "%s\t", StatusOf(run, name))
		}
		fmt.Fprintln(tw, name)
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	for _, o := range outcomes {
		fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped\n", o.mode,
			Count(o.results, Passed), Count(o.results, Failed), Count(o.results, Skipped))
	}
	for _, o := range outcomes[1:] {
		fmt.Fprintf(w, "%s listproxy: listproxy_watch_served_total %g (%s), listproxy_lists_total{source=\"snapshot\"} %g\n", o.mode,
			o.metrics.Sum("listproxy_watch_served_total"), byStart(o.metrics), o.metrics.Sum("listproxy_lists_total", `source="snapshot"`))
	}

	code := 0
	direct := outcomes[0].results
	for _, o := range outcomes[1:] {
		for _, name := range Lost(direct, o.results) {
			code = 1
			fmt.Fprintf(w, "\nLOST through listproxy (%s mode, %s; log %s): %s\n", o.mode, lostStatus(o.results, name), o.log, name)
			if msg := o.results[name].Message; msg != "" {
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(strings.TrimSpace(msg), "\n", "\n  "))
			}
		}
	}
	if Count(direct, Passed) == 0 {
		fmt.Fprintf(w, "\nFAIL: the direct run passed no spec (log %s)\n", outcomes[0].log)
		for _, name := range Ran(direct) {
			if msg := direct[name].Message; msg != "" {
				fmt.Fprintf(w, "  %s: %s\n", name, strings.ReplaceAll(strings.TrimSpace(msg), "\n", "\n  "))
			}
		}
		code = 1
	}
	if code == 0 {
		fmt.Fprintln(w, "\nOK: listproxy passed every spec the direct run passed")
	}
	return code
}

// lostStatus names how a spec the direct run passed ended through listproxy.
func lostStatus(run map[string]Result, name string) string {
	if s := StatusOf(run, name); s != Missing {
		return string(s)
	}
	return "not run"
}

// byStart sums listproxy_watch_served_total by its start label (how each
// served watch began: initial_consistent is a watch-list).
func byStart(m framework.Metrics) string {
	sums := map[string]float64{}
	for _, s := range m["listproxy_watch_served_total"] {
		sums[s.Labels["start"]] += s.Value
	}
	starts := make([]string, 0, len(sums))
	for start := range sums {
		starts = append(starts, start)
	}
	sort.Strings(starts)
	parts := make([]string, 0, len(starts))
	for _, start := range starts {
		parts = append(parts, fmt.Sprintf("%s %g", start, sums[start]))
	}
	return strings.Join(parts, ", ")
}

// prefixed writes the control plane's progress lines with the run's mode.
type prefixed string

func (p prefixed) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Printf("%s: %s\n", string(p), line)
	}
	return len(b), nil
}

func logf(format string, args ...any) {
	fmt.Printf("%s conformance: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
