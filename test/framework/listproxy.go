package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
	"github.com/listproxy/listproxy/pkg/stores"
)

// Listproxy is a listproxy running in the test process in front of a
// control plane, serving plain HTTP on a loopback port, or HTTPS with
// --authentication=delegated.
type Listproxy struct {
	URL string
	// CAFile verifies listproxy's serving certificate (HTTPS only).
	CAFile string
	cp     *ControlPlane
	cancel context.CancelFunc
	done   chan error
	client *http.Client
	stores atomic.Pointer[stores.Registry] // set by app.Config.OnStores
}

// StartListproxy runs listproxy in-process with args (flags as on the command
// line) in front of cp, using cp's admin credentials upstream. It waits for
// /readyz and stops listproxy when the test ends. Unlike the command, it
// proves small consistent reads too (--consistent-pass-through-max-objects
// defaults to 0 here).
//
// With --authentication=delegated and neither --tls-cert-file nor
// --cert-dir, listproxy generates its self-signed certificate in a temporary
// directory, and CAFile names its CA.
func StartListproxy(t testing.TB, cp *ControlPlane, args ...string) *Listproxy {
	t.Helper()
	return StartListproxyAdjusted(t, cp, nil, args...)
}

// StartListproxyAdjusted is StartListproxy with adjust, when not nil,
// applied to the completed configuration before listproxy runs (for the
// configuration's test-only fields, such as app.Config.TableRules).
func StartListproxyAdjusted(t testing.TB, cp *ControlPlane, adjust func(*app.Config), args ...string) *Listproxy {
	t.Helper()
	lp, err := startListproxy(cp, t.TempDir(), adjust, args)
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

func startListproxy(cp *ControlPlane, dir string, adjust func(*app.Config), args []string) (*Listproxy, error) {
	kubeconfig := filepath.Join(dir, "upstream.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, "", UserAdmin, false); err != nil {
		return nil, err
	}
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("listproxy", pflag.ContinueOnError)
	opts.AddFlags(fs)
	// Consistent reads of small scopes are proven, not passed through as
	// cheaper (--consistent-pass-through-max-objects=0), so that tests of
	// reads served from snapshots and of the proof through the apiserver
	// see them proven; a test of the rule gives the flag itself (the last
	// one wins).
	if err := fs.Parse(append([]string{"--kubeconfig=" + kubeconfig, "--consistent-pass-through-max-objects=0"}, args...)); err != nil {
		return nil, err
	}
	if opts.Auth.Mode == app.AuthenticationDelegated && opts.Auth.TLSCertFile == "" && opts.Auth.CertDir == "" {
		opts.Auth.CertDir = filepath.Join(dir, "serving")
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
	lp := &Listproxy{URL: "http://" + ln.Addr().String(), cp: cp, cancel: cancel, done: make(chan error, 1), client: http.DefaultClient}
	if cfg.Serving != nil {
		lp.URL = "https://" + ln.Addr().String()
		lp.CAFile = cfg.Serving.CAFile
		if lp.CAFile == "" {
			lp.CAFile = cp.CAFile // a --tls-cert-file from the control plane's CA
		}
		if lp.client, err = rest.HTTPClientFor(lp.Config()); err != nil {
			cancel()
			_ = ln.Close()
			return nil, err
		}
	}
	cfg.OnStores = lp.stores.Store
	if adjust != nil {
		adjust(cfg)
	}
	go func() { lp.done <- app.Run(ctx, cfg) }()
	if err := lp.waitReady(30 * time.Second); err != nil {
		_ = lp.Stop()
		return nil, err
	}
	return lp, nil
}

func (lp *Listproxy) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := lp.client.Get(lp.URL + "/readyz")
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

// Stores returns listproxy's store registry, to reach its stores (e.g.
// Registry.Store with pkg/snapshot/snapshottest); nil when it serves no
// LISTs from snapshots.
func (lp *Listproxy) Stores() *stores.Registry {
	return lp.stores.Load()
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
// listproxy, without credentials: in sidecar mode listproxy uses its own.
// Over HTTPS it trusts listproxy's serving certificate.
func (lp *Listproxy) Config() *rest.Config {
	return &rest.Config{Host: lp.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: lp.CAFile}, QPS: clientQPS, Burst: clientBurst}
}

// UserConfig returns Config with the bearer token of a static-token user
// of the control plane (delegated mode).
func (lp *Listproxy) UserConfig(user string) *rest.Config {
	cfg := lp.Config()
	cfg.BearerToken = lp.cp.UserToken(user)
	return cfg
}

// ClientCertConfig returns Config with a client certificate for user and
// groups signed by the control plane's client CA (delegated mode, with
// --client-ca-file=cp.CAFile).
func (lp *Listproxy) ClientCertConfig(user string, groups ...string) (*rest.Config, error) {
	certCfg, err := lp.cp.ClientCertConfig(user, groups...)
	if err != nil {
		return nil, err
	}
	cfg := lp.Config()
	cfg.CertData, cfg.KeyData = certCfg.CertData, certCfg.KeyData
	return cfg, nil
}
