package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// env is the running control plane and listproxy, and the clients that
// measure them.
type env struct {
	cfg       config
	cp        *framework.ControlPlane
	listproxy *framework.Process

	// direct asks the apiserver; proxied asks listproxy.
	direct, proxied *target
	// etcd is the control plane's etcd alone, for its share of the CPU.
	etcd *target
	// client writes through the apiserver (protobuf, no rate limit).
	client kubernetes.Interface
	// pods are the seeded pods' namespace/name, for writes.
	pods []podRef
	// objectBytes is the JSON size of one seeded pod as listed.
	objectBytes int
}

// startEnv starts etcd, kube-apiserver and listproxy. On error the returned
// env (if not nil) must still be stopped.
func startEnv(ctx context.Context, cfg config) (*env, error) {
	clusterDir := filepath.Join(cfg.out, "cluster")
	if err := os.RemoveAll(clusterDir); err != nil {
		return nil, fmt.Errorf("wipe %s: %w", clusterDir, err)
	}
	if err := os.MkdirAll(clusterDir, 0o755); err != nil {
		return nil, err
	}
	logf("starting etcd and kube-apiserver in %s", clusterDir)
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneConfig{
		Dir: clusterDir,
		Log: logWriter{},
	})
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, cp: cp}

	restCfg := rest.CopyConfig(cp.AdminConfig)
	restCfg.QPS = -1 // no client-side rate limit
	restCfg.Burst = 0
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	restCfg.UserAgent = userAgent
	if e.client, err = kubernetes.NewForConfig(restCfg); err != nil {
		return e, fmt.Errorf("clientset: %w", err)
	}

	kubeconfig := filepath.Join(clusterDir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, "", framework.UserAdmin, false); err != nil {
		return e, err
	}
	keysFile := filepath.Join(clusterDir, "continue-token-keys")
	if err := framework.WriteContinueTokenKeyFile(keysFile); err != nil {
		return e, err
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		return e, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--listen-address=" + addr,
		"--continue-token-keys-file=" + keysFile,
		// The Table scenario forces GCs through the heap profile.
		"--profiling",
	}
	args = append(args, cfg.proofArgs(cp.EtcdEndpoint)...)
	args = append(args, cfg.listproxyArgs...)
	logf("starting %s %s", cfg.listproxyBin, strings.Join(cfg.listproxyArgs, " "))
	// The child inherits the environment at start: set listproxy's own
	// settings just for that moment.
	restore, err := setEnv(cfg.listproxyEnv)
	if err != nil {
		return e, err
	}
	e.listproxy, err = framework.StartProcess("listproxy", cfg.listproxyBin, args, filepath.Join(clusterDir, "listproxy.log"))
	restore()
	if err != nil {
		return e, err
	}

	if e.direct, err = newDirectTarget(cp); err != nil {
		return e, err
	}
	e.etcd = &target{name: "etcd", pids: controlPlanePIDs(cp, "etcd")}
	e.proxied = newProxiedTarget("http://"+addr, e.listproxy.Pid())
	if err := e.waitListproxyReady(ctx); err != nil {
		return e, err
	}
	return e, nil
}

// stop ends listproxy, kube-apiserver and etcd.
func (e *env) stop() {
	logf("stopping listproxy, kube-apiserver and etcd")
	if e.listproxy != nil {
		if err := e.listproxy.Stop(); err != nil {
			logf("stop listproxy: %v", err)
		}
	}
	if err := e.cp.Stop(); err != nil {
		logf("stop control plane: %v", err)
	}
}

// controlPlanePIDs returns the process ids of the control plane's
// processes named in names, or of all of them when names is empty.
func controlPlanePIDs(cp *framework.ControlPlane, names ...string) []int {
	var pids []int
	for _, p := range cp.Processes() {
		if len(names) == 0 || slices.Contains(names, p.Name) {
			pids = append(pids, p.Pid())
		}
	}
	return pids
}

func newDirectTarget(cp *framework.ControlPlane) (*target, error) {
	caPEM, err := os.ReadFile(cp.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read apiserver CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("apiserver CA: no certificates")
	}
	// HTTP/1.1 like the client of listproxy, no transparent compression:
	// Accept-Encoding is set per request, so gzip is negotiated only when
	// a scenario asks for it.
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return &target{
		name:   "apiserver",
		base:   cp.APIServerURL,
		client: &http.Client{Transport: tr},
		token:  cp.UserToken(framework.UserAdmin),
		pids:   controlPlanePIDs(cp),
	}, nil
}

func newProxiedTarget(base string, pid int) *target {
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	return &target{
		name:    "listproxy",
		base:    base,
		client:  &http.Client{Transport: tr},
		pids:    []int{pid},
		proxied: true,
	}
}

func (e *env) waitListproxyReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.proxied.base+"/readyz", nil)
		resp, err := e.proxied.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-e.listproxy.Done():
			_, exitErr := e.listproxy.Exited()
			return fmt.Errorf("listproxy exited: %w\n%s", exitErr, framework.LogTail(e.listproxy.LogFile, 30))
		case <-ctx.Done():
			return fmt.Errorf("listproxy not ready: %w\n%s", ctx.Err(), framework.LogTail(e.listproxy.LogFile, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// warm lists pods through listproxy in each format the scenarios use until
// the answer comes from a snapshot: the first LIST of a representation
// starts its store, and the first consistent read its etcd progress tracker.
func (e *env) warm(ctx context.Context) error {
	begin := time.Now()
	for _, accept := range []string{acceptJSON, acceptProtobuf} {
		if err := warmStore(ctx, e.proxied, accept, e.listproxy.LogFile); err != nil {
			return err
		}
	}
	// A full list in each format, so that the first measured request is not
	// the first one to touch every object; and one gzipped, as client-go
	// asks by default, which is when listproxy compresses each object once.
	for _, req := range []request{
		{path: "/api/v1/pods", accept: acceptJSON},
		{path: "/api/v1/pods", accept: acceptProtobuf},
		{path: "/api/v1/pods", accept: acceptJSON, gzip: true},
	} {
		for _, t := range []*target{e.direct, e.proxied} {
			if _, err := t.do(ctx, req); err != nil {
				return err
			}
		}
	}
	logf("listproxy warm (JSON and protobuf served from snapshots) in %s", time.Since(begin).Round(time.Millisecond))
	return nil
}

// warmStore lists pods through the listproxy t in the format accept until
// the answer comes from a snapshot: the first LIST of a representation
// starts its store. logFile is t's log, quoted on failure.
func warmStore(ctx context.Context, t *target, accept, logFile string) error {
	return warmPath(ctx, t, "/api/v1/pods?limit=1", accept, logFile)
}

// warmPath requests path through t until a snapshot answers it.
func warmPath(ctx context.Context, t *target, path, accept, logFile string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := t.do(ctx, request{path: path, accept: accept})
		if err != nil {
			return err
		}
		if res.fromSnapshot {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s not served from a snapshot after 3m (last: %d, %s)\n%s", path, accept, res.status, res.servedFrom, framework.LogTail(logFile, 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// writer patches random seeded pods at rate per second until stopped.
type writer struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    atomic.Int64
	failed  atomic.Int64
	dropped atomic.Int64
	begin   time.Time
	end     time.Time
}

// startWriter starts patching pods at rate per second: an annotation
// changes (a metadata update, like a controller's; each write a change),
// on a pool of workers so that a slow write does not lower the rate; ticks
// that find every worker busy are dropped and counted.
func (e *env) startWriter(ctx context.Context, rate int) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, begin: time.Now()}
	jobs := make(chan int, 64)
	const workers = 16
	for range workers {
		w.wg.Go(func() {
			for i := range jobs {
				p := e.pods[(i*7919)%len(e.pods)]
				// Unique per writer and write, so that no patch is a no-op.
				if err := patchPod(ctx, e.client, p, fmt.Sprintf("%d-%d", w.begin.UnixNano(), i)); err != nil {
					if ctx.Err() == nil {
						w.failed.Add(1)
					}
					continue
				}
				w.done.Add(1)
			}
		})
	}
	w.wg.Go(func() {
		defer close(jobs)
		interval := time.Second / time.Duration(rate)
		t := time.NewTicker(interval)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case jobs <- i:
			default:
				w.dropped.Add(1)
			}
		}
	})
	return w
}

// stop ends the writes and returns the achieved rate per second.
func (w *writer) stop() float64 {
	w.cancel()
	w.wg.Wait()
	w.end = time.Now()
	return float64(w.done.Load()) / w.end.Sub(w.begin).Seconds()
}

// setEnv sets NAME=VALUE pairs and returns a function restoring the
// previous values.
func setEnv(pairs []string) (func(), error) {
	type old struct {
		name, value string
		set         bool
	}
	var olds []old
	restore := func() {
		for _, o := range olds {
			if o.set {
				_ = os.Setenv(o.name, o.value)
			} else {
				_ = os.Unsetenv(o.name)
			}
		}
	}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			restore()
			return nil, fmt.Errorf("listproxy environment %q is not NAME=VALUE", p)
		}
		v, set := os.LookupEnv(name)
		olds = append(olds, old{name, v, set})
		if err := os.Setenv(name, value); err != nil {
			restore()
			return nil, err
		}
	}
	return restore, nil
}

// logWriter prints the framework's progress lines with timestamps.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	logf("%s", trimNewline(string(p)))
	return len(p), nil
}

func trimNewline(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// createQuietConfigMaps creates quietNamespace and its quietConfigMaps
// configmaps (once per run).
func (e *env) createQuietConfigMaps(ctx context.Context) error {
	if err := e.cp.CreateNamespace(ctx, quietNamespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := range quietConfigMaps {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quiet-%02d", i)},
			Data:       map[string]string{"n": fmt.Sprint(i)},
		}
		if _, err := e.client.CoreV1().ConfigMaps(quietNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create configmap: %w", err)
		}
	}
	return nil
}
