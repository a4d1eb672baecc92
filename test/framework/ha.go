package framework

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// HA is a control plane as production runs one: a 3-member etcd and
// several kube-apiservers on it behind a loopback TCP balancer that sends
// each new connection to the next apiserver whose /readyz answers 200.
// kube-apiserver 0 is CP's own, the others AddAPIServer's; HA drives all
// of them alike (haAPIServer).
type HA struct {
	CP *ControlPlane
	// URL is the balancer's https://127.0.0.1:PORT, the address clients
	// and listproxy are given; the serving certificate is valid for it.
	URL      string
	Balancer *Balancer

	apiservers []haAPIServer // kube-apiserver i is the balancer's backend i
}

// haAPIServer is one kube-apiserver as HA drives it.
type haAPIServer interface {
	Start(ctx context.Context) error
	Kill() error
	Process() *Process // nil when stopped
	addr() string      // 127.0.0.1:PORT, the balancer's backend
}

// ownAPIServer is the control plane's own kube-apiserver as an haAPIServer.
type ownAPIServer struct{ cp *ControlPlane }

func (o ownAPIServer) Start(ctx context.Context) error { return o.cp.StartAPIServer(ctx) }
func (o ownAPIServer) Kill() error                     { return o.cp.KillAPIServer() }
func (o ownAPIServer) Process() *Process               { return o.cp.APIServerProcess() }
func (o ownAPIServer) addr() string                    { return strings.TrimPrefix(o.cp.APIServerURL, "https://") }

func (a *APIServer) addr() string { return strings.TrimPrefix(a.URL, "https://") }

// StartHA starts an HA control plane with a 3-member etcd and apiservers
// kube-apiservers (at least 2) for a test, and stops it when the test ends.
func StartHA(t testing.TB, cfg ControlPlaneConfig, apiservers int) *HA {
	t.Helper()
	cfg.EtcdMembers = 3
	cp := Start(t, cfg)
	h := &HA{CP: cp, apiservers: []haAPIServer{ownAPIServer{cp}}}
	for _, a := range StartAPIServers(t, cp, max(apiservers, 2)-1) {
		h.apiservers = append(h.apiservers, a)
	}
	probe, err := APIServerReadyProbe(cp)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, a := range h.apiservers {
		addrs = append(addrs, a.addr())
	}
	if h.Balancer, err = StartBalancerProbing(addrs, probe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Balancer.Close() })
	h.URL = "https://" + h.Balancer.Addr
	return h
}

// APIServers returns how many kube-apiservers the control plane runs.
func (h *HA) APIServers() int { return len(h.apiservers) }

// UserConfig is ControlPlane.UserConfig through the balancer.
func (h *HA) UserConfig(user string) *rest.Config {
	cfg := h.CP.UserConfig(user)
	cfg.Host = h.URL
	return cfg
}

// Clientset is a typed client for user through the balancer.
func (h *HA) Clientset(user string) *kubernetes.Clientset {
	client, err := kubernetes.NewForConfig(h.UserConfig(user))
	if err != nil {
		panic(fmt.Sprintf("framework: clientset for %s: %v", user, err))
	}
	return client
}

// EtcdServers is the --etcd-servers value naming every member.
func (h *HA) EtcdServers() string { return strings.Join(h.CP.EtcdEndpoints, ",") }

// KillEtcdLeader kills the etcd member that leads the cluster and returns
// its index, for StartEtcdMember.
func (h *HA) KillEtcdLeader(ctx context.Context) (int, error) {
	leader, err := h.CP.EtcdLeader(ctx)
	if err != nil {
		return -1, err
	}
	return leader, h.CP.KillEtcdMember(leader)
}

// KillAPIServer ends kube-apiserver i with SIGKILL.
func (h *HA) KillAPIServer(i int) error { return h.apiservers[i].Kill() }

// StartAPIServer starts kube-apiserver i again and waits until it is
// ready and the balancer has seen it ready. ctx bounds the wait.
func (h *HA) StartAPIServer(ctx context.Context, i int) error {
	if err := h.apiservers[i].Start(ctx); err != nil {
		return err
	}
	return h.waitBalanced(ctx, i, true)
}

// PauseAPIServer stops kube-apiserver i with SIGSTOP, as a hung server
// that keeps its connections, and waits until the balancer's probe has
// taken it out of rotation. ctx bounds the wait.
func (h *HA) PauseAPIServer(ctx context.Context, i int) error {
	p, err := h.apiserverProcess(i)
	if err != nil {
		return err
	}
	if err := p.Pause(); err != nil {
		return err
	}
	return h.waitBalanced(ctx, i, false)
}

// ResumeAPIServer continues kube-apiserver i and waits until the balancer
// sends it connections again. ctx bounds the wait.
func (h *HA) ResumeAPIServer(ctx context.Context, i int) error {
	p, err := h.apiserverProcess(i)
	if err != nil {
		return err
	}
	if err := p.Resume(); err != nil {
		return err
	}
	return h.waitBalanced(ctx, i, true)
}

// apiserverProcess returns kube-apiserver i's process, an error when it is
// not running.
func (h *HA) apiserverProcess(i int) (*Process, error) {
	p := h.apiservers[i].Process()
	if p == nil {
		return nil, fmt.Errorf("kube-apiserver %d is not running", i)
	}
	return p, nil
}

// waitBalanced waits until the balancer's probe of apiserver i says ready.
func (h *HA) waitBalanced(ctx context.Context, i int, ready bool) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for h.Balancer.Ready(i) != ready {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the balancer never saw kube-apiserver %d ready=%v: %w", i, ready, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
