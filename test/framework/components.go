package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/listproxy/listproxy/test/framework/freeport"
)

// ComponentsConfig configures StartComponents.
type ComponentsConfig struct {
	// Dir holds the components' kubeconfig, certificates and logs
	// (kube-controller-manager.log, kube-scheduler.log).
	Dir string
	// ServerURL is where the components send every request: "" is the
	// apiserver; otherwise listproxy or a balancer in front of replicas,
	// over plain http (sidecar mode) or https with a certificate from the
	// control plane's CA (service-mode replicas, StartReplicaSet).
	ServerURL string
	// APIQPS and APIBurst are each component's client rate limits (0: 100
	// and 200, raised from the defaults as large clusters raise them, so
	// that a test's workload is bound by the components, not by their
	// throttles).
	APIQPS, APIBurst int
}

// Components is a running kube-controller-manager and kube-scheduler, as a
// cluster runs them: every default controller but those that need kubelets
// or a cloud, each controller with its own service account's token.
type Components struct {
	ControllerManager *Process
	Scheduler         *Process
}

// componentsControllers are kube-controller-manager's --controllers: every
// default controller except the node lifecycle controller, which taints
// and evicts from nodes whose kubelets do not report (a test's nodes have
// no kubelets).
const componentsControllers = "*,-node-lifecycle-controller"

// StartComponents starts kube-controller-manager and kube-scheduler with
// their kubeconfig's server at cfg.ServerURL (as user admin: with
// --use-service-account-credentials the controllers then act as their own
// service accounts), and waits until both answer /healthz. Stop ends them.
func (cp *ControlPlane) StartComponents(ctx context.Context, cfg ComponentsConfig) (*Components, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(cfg.Dir, "components.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, cfg.ServerURL, UserAdmin, strings.HasPrefix(cfg.ServerURL, "http://")); err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(2)
	if err != nil {
		return nil, err
	}
	qps, burst := cfg.APIQPS, cfg.APIBurst
	if qps == 0 {
		qps, burst = 100, 200
	}
	rate := []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(burst)}
	kcmArgs := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + componentsControllers,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(cp.Dir, "service-account.key"),
		"--root-ca-file=" + cp.CAFile,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(cfg.Dir, "kcm-certs"),
	}, rate...)
	schedArgs := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[1]),
		"--cert-dir=" + filepath.Join(cfg.Dir, "scheduler-certs"),
	}, rate...)

	c := &Components{}
	if c.ControllerManager, err = StartProcess("kube-controller-manager", filepath.Join(cp.binDir, "kube-controller-manager"), kcmArgs, filepath.Join(cfg.Dir, "kube-controller-manager.log")); err != nil {
		return nil, err
	}
	if c.Scheduler, err = StartProcess("kube-scheduler", filepath.Join(cp.binDir, "kube-scheduler"), schedArgs, filepath.Join(cfg.Dir, "kube-scheduler.log")); err != nil {
		_ = c.Stop()
		return nil, err
	}
	for i, p := range []*Process{c.ControllerManager, c.Scheduler} {
		if err := waitHealthz(ctx, p, ports[i]); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	server := cfg.ServerURL
	if server == "" {
		server = cp.APIServerURL
	}
	cp.logf("kube-controller-manager and kube-scheduler ready, reading from %s", server)
	return c, nil
}

// Stop ends both components and waits for them to exit.
func (c *Components) Stop() error {
	var errs []error
	for _, p := range []*Process{c.ControllerManager, c.Scheduler} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}

// LogFiles returns the components' log files.
func (c *Components) LogFiles() []string {
	var files []string
	for _, p := range []*Process{c.ControllerManager, c.Scheduler} {
		if p != nil {
			files = append(files, p.LogFile)
		}
	}
	return files
}

// waitHealthz polls a component's https://127.0.0.1:port/healthz (its
// self-signed certificate is not verified: the test only asks whether it
// is up).
func waitHealthz(ctx context.Context, p *Process, port int) error {
	client := insecureLoopbackClient(2 * time.Second)
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return waitFor(ctx, p, p.Name, func(ctx context.Context) error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// insecureLoopbackClient is an HTTP client for health checks of loopback
// components with self-signed certificates.
func insecureLoopbackClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a loopback health check, not a trust decision
		DisableKeepAlives: true,
	}}
}

// IssueServingCert writes a serving certificate for 127.0.0.1 and
// localhost, signed by the control plane's CA (CAFile verifies it), into
// dir, and returns the certificate and key files: what replicas behind one
// Service share.
func (cp *ControlPlane) IssueServingCert(dir, name string) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := cp.ca.issue(name, nil, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}
