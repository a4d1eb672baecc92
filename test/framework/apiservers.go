package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/listproxy/listproxy/test/framework/freeport"
)

// APIServer is one more kube-apiserver on the control plane's etcd, what an
// HA control plane runs behind its load balancer: the first one's flags,
// certificates (valid for 127.0.0.1), tokens and service-account key, with
// its own port, cert dir, audit log and log file.
type APIServer struct {
	// URL is https://127.0.0.1:PORT.
	URL          string
	AuditLogFile string

	cp   *ControlPlane
	name string
	args []string

	mu sync.Mutex
	p  *Process // guarded by mu; nil when stopped
}

// AddAPIServer starts another kube-apiserver named name (its log is
// name.log in cp.Dir) and waits until it is ready. Stop it before the
// control plane; StartAPIServers does both for a test.
func (cp *ControlPlane) AddAPIServer(ctx context.Context, name string) (*APIServer, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, err
	}
	a := &APIServer{
		URL:          fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		AuditLogFile: filepath.Join(cp.Dir, name+"-audit.log"),
		cp:           cp,
		name:         name,
	}
	own := map[string]string{
		"--secure-port":    strconv.Itoa(ports[0]),
		"--cert-dir":       filepath.Join(cp.Dir, name+"-certs"),
		"--audit-log-path": a.AuditLogFile,
	}
	for _, arg := range cp.apiserverArgs {
		flag, _, _ := strings.Cut(arg, "=")
		if v, ok := own[flag]; ok {
			arg = flag + "=" + v
		}
		a.args = append(a.args, arg)
	}
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// StartAPIServers starts n more kube-apiservers on cp's etcd for a test and
// stops them when it ends (before the control plane, which Start registered
// earlier).
func StartAPIServers(t testing.TB, cp *ControlPlane, n int) []*APIServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var as []*APIServer
	for i := range n {
		a, err := cp.AddAPIServer(ctx, fmt.Sprintf("kube-apiserver-%d", i+2))
		if err != nil {
			t.Fatalf("start another kube-apiserver: %v", err)
		}
		t.Cleanup(func() {
			if err := a.Stop(); err != nil {
				t.Errorf("stop %s: %v", a.name, err)
			}
		})
		as = append(as, a)
	}
	return as
}

// Start starts the apiserver on its port and waits until it is ready.
func (a *APIServer) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.p != nil {
		a.mu.Unlock()
		return fmt.Errorf("%s is already running (pid %d)", a.name, a.p.Pid())
	}
	a.cp.logf("starting %s", a.name)
	p, err := StartProcess(a.name, filepath.Join(a.cp.binDir, "kube-apiserver"), a.args, filepath.Join(a.cp.Dir, a.name+".log"))
	if err != nil {
		a.mu.Unlock()
		return err
	}
	a.p = p
	a.mu.Unlock()
	begin := time.Now()
	if err := a.cp.waitAPIServer(ctx, p, a.URL); err != nil {
		return err
	}
	a.cp.logf("%s ready at %s in %s", a.name, a.URL, time.Since(begin).Round(time.Millisecond))
	return nil
}

// Stop stops the apiserver (resuming it first if paused); its port and
// flags are kept for Start.
func (a *APIServer) Stop() error {
	p := a.take()
	if p == nil {
		return nil
	}
	_ = p.Resume() // a stopped process acts on SIGTERM only once continued
	return p.Stop()
}

// Kill ends the apiserver with SIGKILL, as a crash (its open connections
// are reset, no goaway, no retry-after), and waits for the exit; Start
// starts it again.
func (a *APIServer) Kill() error {
	p := a.take()
	if p == nil {
		return nil
	}
	return p.Kill()
}

// take clears the running process and returns it, nil when stopped.
func (a *APIServer) take() *Process {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.p
	a.p = nil
	return p
}

// Process returns the running process, nil when stopped.
func (a *APIServer) Process() *Process {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.p
}

// APIServerProcess returns the first kube-apiserver's process, nil when
// stopped.
func (cp *ControlPlane) APIServerProcess() *Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.apiserver
}

// Pause stops the process group with SIGSTOP: it keeps its connections
// and answers nothing until Resume, as a hung or descheduled server.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process group with SIGCONT.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) error {
	if exited, _ := p.Exited(); exited {
		return fmt.Errorf("%s has exited", p.Name)
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	return nil
}

// APIServerReadyProbe returns a Balancer probe for kube-apiservers of cp:
// GET /readyz over TLS, trusting cp's CA, with a 1 s timeout.
func APIServerReadyProbe(cp *ControlPlane) (func(ctx context.Context, addr string) bool, error) {
	pem, err := os.ReadFile(cp.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", cp.CAFile)
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return readyzProbe(client, "https"), nil
}
