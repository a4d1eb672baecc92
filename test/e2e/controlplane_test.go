package e2e

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/workload"
)

// controlPlaneWorkload is the e2e size of the control-plane workload:
// 200 Deployments of 10 pods (2,000 pods, plus StatefulSets, Jobs and a
// DaemonSet) over 25 namespaces, 20 of which are deleted at the end.
var controlPlaneWorkload = workload.Config{
	Nodes: 25, PodsPerNode: 110,
	Namespaces: 25, DeletedNamespaces: 20,
	Deployments: 8, Replicas: 10,
}

// controlPlanePassReasons are the reasons for which listproxy may pass a
// component's LIST or WATCH through (docs/design.md "A control plane
// behind listproxy"): a small consistent read the apiserver answers sooner
// than its proof (the namespace controller lists every resource of a
// namespace it deletes), the same namespace's LIST while its store makes
// its first list (those LISTs are the first PartialObjectMetadata reads of
// most resources), a re-watch from before what the replica that took over
// a killed one's clients holds, and a resource newer than listproxy's
// discovery (a CRD created a moment ago).
var controlPlanePassReasons = map[string]bool{"direct_cheaper": true, "store_syncing": true, "not_retained": true, "resource": true}

// controlPlaneFallbacks are reasons for which a read falls back to the
// apiserver under load (its proof or its store late: the e2e listproxy
// runs with the race detector on a small machine beside the control
// plane, which other work may load too); some are fine, and each is
// counted in listproxy's metrics. A proof that fails every time is not.
var controlPlaneFallbacks = map[string]bool{"snapshot_timeout": true, "progress_timeout": true, "probe_failed": true}

// controlPlaneMaxFallbackShare bounds the fallbacks of one run, as a share
// of the components' LISTs and watches listproxy answered or let fall back.
const controlPlaneMaxFallbackShare = 0.25

// servedKey counts, in controlPlaneRun.passed, the LISTs and watches
// listproxy served.
const servedKey = "served"

// controlPlaneRun is one run of the workload: its end state and what the
// components asked of the apiserver themselves.
type controlPlaneRun struct {
	fingerprint []string
	result      workload.Result
	// reads counts the LISTs and WATCHes (watch-lists included) that
	// kube-controller-manager and kube-scheduler sent which reached the
	// apiserver, by verb and resource (from its audit log).
	reads map[string]int
	// readURIs is one request URI of each key of reads, for the log.
	readURIs map[string]string
	// errors are the components' logged errors, normalized (see
	// componentErrors), and one line of each.
	errors       map[string]int
	errorExample map[string]string
	// passed counts what listproxy passed through, by "list REASON" and
	// "watch REASON", and under servedKey what it served.
	passed map[string]float64
}

// TestControlPlaneThroughListproxy runs kube-controller-manager (every
// controller that needs no kubelet, each with its own service account)
// and kube-scheduler on the same workload three times — reading from the
// apiserver, through listproxy as a sidecar with etcd proofs, and through
// two service-mode replicas without etcd (the managed-cluster setting) one
// of which is killed halfway — and wants the same end state, read
// directly from the apiserver, every time. Through listproxy, no
// cluster-wide LIST of theirs and at most controlPlaneMaxWatches watches
// reach the apiserver, listproxy passes their requests through only for
// controlPlanePassReasons (and some fallbacks), and they log no error
// kind the direct run does not.
func TestControlPlaneThroughListproxy(t *testing.T) {
	cfg := controlPlaneWorkload
	direct := runControlPlane(t, "direct", cfg)
	sidecar := runControlPlane(t, "sidecar", cfg)
	service := runControlPlane(t, "service", cfg)

	t.Logf("first phase / second phase: direct %s / %s, sidecar %s / %s, service %s / %s",
		direct.result.Created.Round(time.Millisecond), direct.result.Changed.Round(time.Millisecond),
		sidecar.result.Created.Round(time.Millisecond), sidecar.result.Changed.Round(time.Millisecond),
		service.result.Created.Round(time.Millisecond), service.result.Changed.Round(time.Millisecond))
	t.Logf("direct: %d lines of fingerprint; the components' reads of the apiserver: %v", len(direct.fingerprint), direct.reads)
	for name, run := range map[string]controlPlaneRun{"sidecar": sidecar, "service": service} {
		onlyDirect, onlyThrough := workload.Diff(direct.fingerprint, run.fingerprint)
		if len(onlyDirect)+len(onlyThrough) > 0 {
			t.Errorf("%s: the end state differs from the direct run's:\n only direct:\n  %s\n only through listproxy:\n  %s",
				name, strings.Join(onlyDirect, "\n  "), strings.Join(onlyThrough, "\n  "))
		}
		t.Logf("%s: the components' reads that reached the apiserver: %v", name, run.reads)
		watches := 0
		for key, n := range run.reads {
			t.Logf("%s: %d %s requests of the components reached the apiserver (e.g. %s)", name, n, key, run.readURIs[key])
			switch {
			case strings.HasPrefix(key, "watch "):
				watches += n
			case !strings.HasSuffix(key, workload.NamespaceScoped):
				// Only the small LISTs of a namespace's contents may pass
				// through (direct_cheaper, store_syncing).
				t.Errorf("%s: %d cluster-wide %s requests of the components reached the apiserver, want 0", name, n, key)
			}
		}
		if watches > controlPlaneMaxWatches {
			t.Errorf("%s: %d watches of the components reached the apiserver, want at most %d", name, watches, controlPlaneMaxWatches)
		}
		fallbacks := 0.0
		for key, n := range run.passed {
			if key == servedKey {
				continue
			}
			_, reason, _ := strings.Cut(key, " ")
			switch {
			case controlPlaneFallbacks[reason]:
				fallbacks += n
			case !controlPlanePassReasons[reason]:
				t.Errorf("%s: listproxy passed %v components' requests through as %s", name, n, key)
			}
		}
		if served := run.passed[servedKey]; fallbacks > controlPlaneMaxFallbackShare*(served+fallbacks) {
			t.Errorf("%s: %v of the components' reads fell back to the apiserver, %v were served; want at most %.0f%% to fall back",
				name, fallbacks, served, 100*controlPlaneMaxFallbackShare)
		}
		for e, n := range run.errors {
			if strings.HasPrefix(e, "timing: ") {
				t.Logf("%s: the components logged %d× a timing error (direct: %d): %s", name, n, direct.errors[e], e)
				continue
			}
			if direct.errors[e] == 0 {
				t.Errorf("%s: the components logged %d× an error the direct run did not: %s\n%s", name, n, e, run.errorExample[e])
			}
		}
	}
}

// runControlPlane starts a control plane, listproxy as mode says
// ("direct": none), the components reading through it, and runs the
// workload.
func runControlPlane(t *testing.T, mode string, cfg workload.Config) controlPlaneRun {
	t.Helper()
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	components := framework.ComponentsConfig{Dir: filepath.Join(dir, "components")}
	passed := map[string]float64{}
	addPassed := func(m framework.Metrics) {
		for reason, n := range m.ByLabel("listproxy_lists_total", "reason", `source="apiserver"`) {
			passed["list "+reason] += n
		}
		for reason, n := range m.ByLabel("listproxy_watch_passed_through_total", "reason") {
			passed["watch "+reason] += n
		}
		passed[servedKey] += m.Sum("listproxy_lists_total", `source="snapshot"`) + m.Sum("listproxy_watch_served_total")
	}
	var scrape func()
	switch mode {
	case "direct":
	case "sidecar":
		// The command's default for small consistent reads, not the
		// framework's (which proves them all).
		lp := framework.StartListproxy(t, cp, "--resources=*", "--etcd-servers="+cp.EtcdEndpoint, "--consistent-pass-through-max-objects=500")
		components.ServerURL = lp.URL
		scrape = func() { addPassed(framework.Scrape(t, nil, lp.URL+"/metrics")) }
	case "service":
		rs, err := framework.StartReplicaSet(ctx, cp, filepath.Join(dir, "listproxy"), 2,
			"--authentication=delegated", "--resources=*")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Stop() })
		components.ServerURL = rs.URL()
		client, err := rest.HTTPClientFor(&rest.Config{BearerToken: cp.UserToken(framework.UserAdmin), TLSClientConfig: rest.TLSClientConfig{CAFile: rs.CAFile}})
		if err != nil {
			t.Fatal(err)
		}
		scrapeReplica := func(i int) { addPassed(framework.Scrape(t, client, rs.Replicas[i].URL()+"/metrics")) }
		cfg.Halfway = func(ctx context.Context) error {
			scrapeReplica(0)
			t.Logf("service: killing replica 0 of 2")
			return rs.Kill(ctx, 0)
		}
		scrape = func() { scrapeReplica(1) }
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	c, err := cp.StartComponents(ctx, components)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })

	cfg.Logf = func(format string, args ...any) { t.Logf(mode+": "+format, args...) }
	res, err := workload.Run(ctx, cp.UserConfig(framework.UserAdmin), cfg)
	if err != nil {
		for _, f := range c.LogFiles() {
			t.Logf("%s:\n%s", f, framework.LogTail(f, 40))
		}
		t.Fatalf("%s: %v", mode, err)
	}
	run := controlPlaneRun{result: res}
	if run.reads, run.readURIs, err = workload.ComponentReads(cp); err != nil {
		t.Fatal(err)
	}
	if run.fingerprint, err = workload.Fingerprint(ctx, kubernetes.NewForConfigOrDie(cp.UserConfig(framework.UserAdmin)),
		dynamic.NewForConfigOrDie(cp.UserConfig(framework.UserAdmin))); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Logf("%s: stop components: %v", mode, err)
	}
	run.errors, run.errorExample = componentErrors(t, c.LogFiles())
	if scrape != nil {
		scrape()
		run.passed = passed
		t.Logf("%s: listproxy passed through %v", mode, passed)
	}
	return run
}

// controlPlaneMaxWatches bounds the components' watches that may reach the
// apiserver through listproxy: one of a CRD created a moment before
// (reason "resource"), and after the kill of a replica the re-watches of
// resources that changed between the client's resourceVersion and the
// start of the other replica's store (reason "not_retained"; one to three
// in a run). Each of the controller manager's re-watches passing through,
// as before they were proven unchanged, is some 45.
const controlPlaneMaxWatches = 10

// kubeErrorLine is a klog error line: E, date, time, thread id, then
// "file:line] message".
var kubeErrorLine = regexp.MustCompile(`^E\d{4} [\d:.]+\s+\d+ ([^\]]+)\] (.*)$`)

// componentTimingErrors are logged errors that say a controller was ahead
// of its informer (since 1.36 controllers check that their informers saw
// their own writes, StaleControllerConsistency*, and retry when not), or
// behind it (an object deleted under it: a NotFound, e.g. in a namespace
// being deleted, or its events arriving after the namespace was gone), or
// that a listproxy replica was killed under a request. How often they
// occur depends on timing, which listproxy changes (an event reaches an
// informer through two hops instead of one, and the e2e listproxy runs
// under the race detector), not on what the informers receive. They are
// counted and logged, not compared.
var componentTimingErrors = regexp.MustCompile(`is not as new as written version|informer cache is out of date|from lister|` +
	`\\"[^\\]+\\" not found|: (unexpected EOF|EOF|connection refused|http2: client connection lost)`)

// componentErrors returns the components' logged errors keyed by where
// they were logged and the message's first quoted part (the structured
// message without its values), with how often each was logged, and the
// first line of each.
func componentErrors(t *testing.T, files []string) (map[string]int, map[string]string) {
	t.Helper()
	out, examples := map[string]int{}, map[string]string{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			m := kubeErrorLine.FindStringSubmatch(s.Text())
			if m == nil {
				continue
			}
			if componentTimingErrors.MatchString(s.Text()) {
				out["timing: "+filepath.Base(name)+" "+m[1]]++
				continue
			}
			msg := m[2]
			if strings.HasPrefix(msg, `"`) {
				if end := strings.Index(msg[1:], `"`); end >= 0 {
					msg = msg[:end+2]
				}
			} else if len(msg) > 80 {
				msg = msg[:80]
			}
			key := filepath.Base(name) + " " + m[1] + "] " + msg
			if out[key]++; out[key] == 1 {
				examples[key] = s.Text()
			}
		}
		_ = f.Close()
	}
	return out, examples
}
