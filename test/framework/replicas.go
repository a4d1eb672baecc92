package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/listproxy/listproxy/test/framework/freeport"
)

// BuildListproxy builds the listproxy command of this repository into dir
// and returns the binary's path.
func BuildListproxy(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not found on PATH to build listproxy: %w", err)
	}
	bin := filepath.Join(dir, "listproxy")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/listproxy")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/listproxy: %w\n%s", err, out)
	}
	return bin, nil
}

// Replica is one listproxy process of a ReplicaSet, on a fixed loopback
// port that outlives its restarts.
type Replica struct {
	Index   int
	Addr    string // 127.0.0.1:PORT
	LogFile string
	// Scheme is "http", or "https" in service mode (--authentication=delegated).
	Scheme string

	mu      sync.Mutex
	proc    *Process // guarded by mu
	peakRSS int64    // guarded by mu: the largest VmHWM of its processes
	starts  int      // guarded by mu
}

// URL is the replica's own address as a URL of its scheme.
func (r *Replica) URL() string { return r.Scheme + "://" + r.Addr }

// Process returns the running process (nil while stopped).
func (r *Replica) Process() *Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Starts returns how many times the replica was started.
func (r *Replica) Starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts
}

// PeakRSS returns the largest resident set (VmHWM) any of the replica's
// processes reached, in bytes, sampling the running one now.
func (r *Replica) PeakRSS() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sampleLocked()
	return r.peakRSS
}

func (r *Replica) sampleLocked() {
	if r.proc == nil {
		return
	}
	if hwm, err := vmHWM(r.proc.Pid()); err == nil {
		r.peakRSS = max(r.peakRSS, hwm)
	}
}

// RSS returns the running process's resident set size (VmRSS) now, in
// bytes.
func (r *Replica) RSS() (int64, error) {
	p := r.Process()
	if p == nil {
		return 0, fmt.Errorf("replica %d is not running", r.Index)
	}
	return procStatusBytes(p.Pid(), "VmRSS:")
}

// ResetPeakRSS starts the running process's peak resident set (VmHWM) over
// from its current size (Linux: 5 written to /proc/PID/clear_refs), so that
// PeakRSS measures from now; the peaks of earlier processes are forgotten.
func (r *Replica) ResetPeakRSS() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return fmt.Errorf("replica %d is not running", r.Index)
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.proc.Pid()), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS: %w", err)
	}
	r.peakRSS = 0
	return nil
}

// vmHWM reads a process's peak resident set size from /proc.
func vmHWM(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM:") }

// procStatusBytes reads the size field (in kB) of /proc/PID/status.
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// ReplicaSet is N listproxy processes (the binary of this repository) in
// front of one control plane, sharing one continue-token key file, behind a
// Balancer: what the Helm chart's Deployment and Service run.
type ReplicaSet struct {
	Replicas []*Replica
	Balancer *Balancer
	// KeyFile is the shared --continue-token-keys-file.
	KeyFile string
	// CAFile verifies the replicas' shared serving certificate in service
	// mode (the control plane's CA); "" over plain http.
	CAFile string

	bin  string
	args []string
}

// StartReplicaSet builds listproxy, starts a Balancer, then n replicas
// behind it with args (plus --kubeconfig, --listen-address,
// --continue-token-keys-file and --warm-from the Balancer, as the Helm
// chart's replicas warm from their Service) in dir, waiting until each is
// ready. Stop ends them.
//
// With --authentication=delegated among args (service mode) the replicas
// serve https with one certificate signed by cp's CA (CAFile), as replicas
// behind a Service share theirs, and warm from the balancer over https.
func StartReplicaSet(ctx context.Context, cp *ControlPlane, dir string, n int, args ...string) (*ReplicaSet, error) {
	return StartReplicaSetAt(ctx, cp, "", dir, n, args...)
}

// StartReplicaSetAt is StartReplicaSet with the replicas' upstream at
// serverURL (an HA control plane's balancer, whose serving certificate is
// cp's); "" is cp's own kube-apiserver.
func StartReplicaSetAt(ctx context.Context, cp *ControlPlane, serverURL, dir string, n int, args ...string) (*ReplicaSet, error) {
	bin, err := BuildListproxy(dir)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "upstream.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, serverURL, UserAdmin, false); err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "continue-token-keys")
	if err := WriteContinueTokenKeyFile(keyFile); err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, err
	}
	rs := &ReplicaSet{KeyFile: keyFile, bin: bin}
	scheme := "http"
	var tlsArgs []string
	if slices.Contains(args, "--authentication=delegated") {
		certFile, keyFile, err := cp.IssueServingCert(dir, "listproxy-serving")
		if err != nil {
			return nil, err
		}
		scheme, rs.CAFile = "https", cp.CAFile
		tlsArgs = []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--warm-from-ca-file=" + cp.CAFile}
	}
	var backends []string
	for i, port := range ports {
		r := &Replica{Index: i, Addr: "127.0.0.1:" + strconv.Itoa(port), Scheme: scheme, LogFile: filepath.Join(dir, fmt.Sprintf("listproxy-%d.log", i))}
		rs.Replicas = append(rs.Replicas, r)
		backends = append(backends, r.Addr)
	}
	if rs.Balancer, err = StartBalancerProbing(backends, readyzProbe(insecureLoopbackClient(time.Second), scheme)); err != nil {
		return nil, err
	}
	rs.args = append(append([]string{"--kubeconfig=" + kubeconfig, "--continue-token-keys-file=" + keyFile, "--warm-from=" + rs.URL()}, tlsArgs...), args...)
	for i := range rs.Replicas {
		if err := rs.Start(ctx, i); err != nil {
			_ = rs.Stop()
			return nil, err
		}
	}
	return rs, nil
}

// Start starts replica i (stopped) and waits until its /readyz answers 200.
func (rs *ReplicaSet) Start(ctx context.Context, i int) error {
	r := rs.Replicas[i]
	r.mu.Lock()
	if r.proc != nil {
		r.mu.Unlock()
		return fmt.Errorf("replica %d is running", i)
	}
	// A new pod: out of the Service until its readiness probe passes.
	rs.Balancer.Replaced(i)
	p, err := StartProcess(fmt.Sprintf("listproxy-%d", i), rs.bin, append([]string{"--listen-address=" + r.Addr}, rs.args...), r.LogFile)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	p.StopGrace = time.Minute
	r.proc = p
	r.starts++
	r.mu.Unlock()
	return waitReplicaReady(ctx, r, p)
}

// URL is the balancer's address (the Service) as a URL of the replicas'
// scheme.
func (rs *ReplicaSet) URL() string {
	if rs.CAFile != "" {
		return "https://" + rs.Balancer.Addr
	}
	return rs.Balancer.URL()
}

func waitReplicaReady(ctx context.Context, r *Replica, p *Process) error {
	client := insecureLoopbackClient(time.Second)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("replica %d: %w", r.Index, p.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("replica %d not ready: %w\n%s", r.Index, ctx.Err(), LogTail(r.LogFile, 30))
		case <-t.C:
		}
		resp, err := client.Get(r.URL() + "/readyz")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
}

// Terminate sends SIGTERM to replica i and waits for it to exit; an exit
// status other than 0 is an error.
func (rs *ReplicaSet) Terminate(ctx context.Context, i int) error {
	return rs.signal(ctx, i, syscall.SIGTERM)
}

// Kill sends SIGKILL to replica i and waits for it to exit.
func (rs *ReplicaSet) Kill(ctx context.Context, i int) error {
	return rs.signal(ctx, i, syscall.SIGKILL)
}

func (rs *ReplicaSet) signal(ctx context.Context, i int, sig syscall.Signal) error {
	r := rs.Replicas[i]
	r.mu.Lock()
	p := r.proc
	r.sampleLocked()
	r.mu.Unlock()
	if p == nil {
		return fmt.Errorf("replica %d is not running", i)
	}
	if err := syscall.Kill(p.Pid(), sig); err != nil {
		return fmt.Errorf("replica %d: %v: %w", i, sig, err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		return fmt.Errorf("replica %d did not exit after %v: %w", i, sig, ctx.Err())
	}
	r.mu.Lock()
	r.proc = nil
	r.mu.Unlock()
	if _, err := p.Exited(); err != nil && sig == syscall.SIGTERM {
		return fmt.Errorf("replica %d exit after SIGTERM: %w\n%s", i, err, LogTail(r.LogFile, 30))
	}
	return nil
}

// Stop closes the balancer and stops every running replica.
func (rs *ReplicaSet) Stop() error {
	var errs []error
	if rs.Balancer != nil {
		errs = append(errs, rs.Balancer.Close())
	}
	for _, r := range rs.Replicas {
		r.mu.Lock()
		p := r.proc
		r.sampleLocked()
		r.proc = nil
		r.mu.Unlock()
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}
