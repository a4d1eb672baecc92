package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
)

// Listproxy is a listproxy running in the test process in front of a
// control plane, serving plain HTTP on a loopback port.
type Listproxy struct {
	URL    string
	cp     *ControlPlane
	cancel context.CancelFunc
	done   chan error
}

// StartListproxy runs listproxy in-process with args (flags as on the command
// line) in front of cp, using cp's admin credentials upstream. It waits for
// /readyz and stops listproxy when the test ends.
func StartListproxy(t testing.TB, cp *ControlPlane, args ...string) *Listproxy {
	t.Helper()
	lp, err := startListproxy(cp, t.TempDir(), args)
	if err != nil {
		t.Fatalf("start listproxy: %v", err)
	}
	t.Cleanup(func() {
		if err := lp.Stop(); err != nil {
			t.Errorf("stop listproxy: %v", err)
		}
	})
	return lp
}

func startListproxy(cp *ControlPlane, dir string, args []string) (*Listproxy, error) {
	kubeconfig := filepath.Join(dir, "upstream.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, "", UserAdmin, false); err != nil {
		return nil, err
	}
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("listproxy", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(append([]string{"--kubeconfig=" + kubeconfig}, args...)); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cfg, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.Listener = ln
	ctx, cancel := context.WithCancel(context.Background())
	lp := &Listproxy{URL: "http://" + ln.Addr().String(), cp: cp, cancel: cancel, done: make(chan error, 1)}
	go func() { lp.done <- app.Run(ctx, cfg) }()
	if err := lp.waitReady(30 * time.Second); err != nil {
		lp.Stop()
		return nil, err
	}
	return lp, nil
}

func (lp *Listproxy) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(lp.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-lp.done:
			return fmt.Errorf("listproxy exited before it was ready: %w", err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return errors.New("listproxy not ready in time")
		}
	}
}

// Stop ends listproxy and waits for it to drain.
func (lp *Listproxy) Stop() error {
	if lp.cancel == nil {
		return nil
	}
	lp.cancel()
	lp.cancel = nil
	select {
	case err := <-lp.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("listproxy did not stop within 30s")
	}
}

// Config returns a client config that reaches the apiserver through
// listproxy. In sidecar mode listproxy uses its own credentials, so none are
// set.
func (lp *Listproxy) Config() *rest.Config {
	return &rest.Config{Host: lp.URL, QPS: 500, Burst: 1000}
}
