package app

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds waits that succeed at once unless the code is broken.
const testTimeout = 10 * time.Second

func TestAddFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{
		"--kubeconfig=/etc/kubeconfig",
		"--listen-address=[::1]:9001",
		"--shutdown-grace-period=5s",
		"--shutdown-delay=2s",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := NewOptions()
	want.Kubeconfig, want.ListenAddress = "/etc/kubeconfig", "[::1]:9001"
	want.ShutdownGracePeriod, want.ShutdownDelay = 5*time.Second, 2*time.Second
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Usage == "" {
			t.Errorf("flag --%s has no usage text", f.Name)
		}
	})
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*Options)
		wantErrs []string // substrings; nil: valid
	}{
		{name: "defaults", mutate: func(*Options) {}},
		{name: "ipv6_loopback", mutate: func(o *Options) { o.ListenAddress = "[::1]:8001" }},
		{name: "localhost", mutate: func(o *Options) { o.ListenAddress = "localhost:8001" }},
		{name: "other_loopback", mutate: func(o *Options) { o.ListenAddress = "127.0.0.2:8001" }},
		{name: "all_interfaces", mutate: func(o *Options) { o.ListenAddress = ":8001" }, wantErrs: []string{"--listen-address", "not a loopback"}},
		{name: "unspecified_ip", mutate: func(o *Options) { o.ListenAddress = "0.0.0.0:8001" }, wantErrs: []string{"--listen-address", "not a loopback"}},
		{name: "public_ip", mutate: func(o *Options) { o.ListenAddress = "10.0.0.1:8001" }, wantErrs: []string{"--listen-address", "not a loopback"}},
		{name: "hostname", mutate: func(o *Options) { o.ListenAddress = "example.com:8001" }, wantErrs: []string{"--listen-address", "not a loopback"}},
		{name: "no_port", mutate: func(o *Options) { o.ListenAddress = "127.0.0.1" }, wantErrs: []string{"--listen-address", "host:port"}},
		{name: "bad_port", mutate: func(o *Options) { o.ListenAddress = "127.0.0.1:http" }, wantErrs: []string{"--listen-address", "invalid port"}},
		{name: "port_zero", mutate: func(o *Options) { o.ListenAddress = "127.0.0.1:0" }, wantErrs: []string{"--listen-address", "port must not be 0"}},
		{name: "negative_durations", mutate: func(o *Options) { o.ShutdownGracePeriod, o.ShutdownDelay = -1, -1 },
			wantErrs: []string{"--shutdown-grace-period", "--shutdown-delay"}},
		{name: "negative_consistency_check_interval", mutate: func(o *Options) { o.Cache.ConsistencyCheckInterval = -time.Second },
			wantErrs: []string{"--consistency-check-interval: must not be negative"}},
		{name: "consistent_pass_through_off", mutate: func(o *Options) { o.Cache.ConsistentPassThroughMaxObjects = 0 }},
		{name: "negative_consistent_pass_through_max_objects", mutate: func(o *Options) { o.Cache.ConsistentPassThroughMaxObjects = -1 },
			wantErrs: []string{"--consistent-pass-through-max-objects: must not be negative"}},
		{name: "state_proof_off", mutate: func(o *Options) { o.Cache.ConsistentStateProofMaxObjects = 0 }},
		{name: "state_proof_max_objects_too_large", mutate: func(o *Options) { o.Cache.ConsistentStateProofMaxObjects = 5001 },
			wantErrs: []string{"--consistent-state-proof-max-objects: must be within 0-5000"}},
		{name: "negative_inflight_bounds", mutate: func(o *Options) {
			o.Cache.MaxInflightLists, o.Cache.MaxInflightListBytes, o.Cache.ListQueueWait, o.Cache.ListWriteTimeout = -1, -1, -1, -1
		}, wantErrs: []string{"--max-inflight-lists", "--max-inflight-list-bytes", "--list-queue-wait", "--list-write-timeout"}},
		{name: "zero_watch_timeouts", mutate: func(o *Options) { o.Cache.WatchStallTimeout, o.Cache.WatchLagTimeout = 0, 0 },
			wantErrs: []string{"--watch-stall-timeout and --watch-lag-timeout: must be positive"}},
		{name: "bad_accept_hosts", mutate: func(o *Options) { o.Auth.AcceptHosts = `^ok$,(` }, wantErrs: []string{"--accept-hosts"}},
		{name: "negative_store_budget", mutate: func(o *Options) { o.Cache.MaxStoreBytes = -1 }, wantErrs: []string{"--max-store-bytes: must not be negative"}},
		{name: "unbounded_inflight", mutate: func(o *Options) {
			o.Cache.MaxInflightLists, o.Cache.MaxInflightListBytes, o.Cache.ListQueueWait, o.Cache.ListWriteTimeout = 0, 0, 0, 0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			if tc.wantErrs == nil {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors mentioning %q", tc.wantErrs)
			}
			for _, s := range tc.wantErrs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q, want it to mention %q", err, s)
				}
			}
		})
	}
}

func TestComplete(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	const content = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: secret
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Kubeconfig = kubeconfig
	cfg, err := o.Complete()
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if cfg.Upstream.Host != "https://127.0.0.1:6443" || cfg.Upstream.BearerToken != "secret" {
		t.Errorf("Upstream = %s with token %q, want the kubeconfig's server and token", cfg.Upstream.Host, cfg.Upstream.BearerToken)
	}
	if cfg.Upstream.QPS >= 0 {
		t.Errorf("Upstream.QPS = %v, want < 0 (no client-side rate limiting)", cfg.Upstream.QPS)
	}
	if cfg.ListenAddress != defaultListenAddress || cfg.ShutdownGracePeriod != defaultShutdownGracePeriod {
		t.Errorf("Config = %+v, want the options' listen address and grace period", cfg)
	}

	o.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("Complete with a missing kubeconfig = %v, want an error naming --kubeconfig", err)
	}
}

// notifyListener reports when Run closes it, that is, when shutdown has begun.
type notifyListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func (l *notifyListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// runResult is Run's result once done is closed.
type runResult struct {
	done chan struct{}
	err  error
}

// startRun runs Run against upstream and returns the listproxy URL, its
// listener, a cancel function that starts shutdown, and Run's result.
func startRun(t *testing.T, upstream string, grace time.Duration) (url string, ln *notifyListener, cancel context.CancelFunc, res *runResult) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = &notifyListener{Listener: l, closed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	res = &runResult{done: make(chan struct{})}
	cfg := &Config{
		Upstream:            &rest.Config{Host: upstream},
		Listener:            ln,
		Registry:            prometheus.NewRegistry(),
		ShutdownGracePeriod: grace,
	}
	go func() {
		res.err = Run(ctx, cfg)
		close(res.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-res.done:
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
	})
	return "http://" + l.Addr().String(), ln, cancel, res
}

func waitRun(t *testing.T, res *runResult) error {
	t.Helper()
	select {
	case <-res.done:
		return res.err
	case <-time.After(testTimeout):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestRunDrainsInFlightRequest(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		_, _ = io.WriteString(w, `{"kind":"PodList"}`)
	}))
	defer up.Close()
	url, ln, cancel, done := startRun(t, up.URL, testTimeout)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	type result struct {
		code int
		body string
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Get(url + "/api/v1/pods")
		if err != nil {
			resc <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		resc <- result{code: resp.StatusCode, body: string(b), err: err}
	}()
	<-arrived
	cancel() // SIGTERM
	<-ln.closed
	close(release)

	res := <-resc
	if res.err != nil || res.code != http.StatusOK || res.body != `{"kind":"PodList"}` {
		t.Errorf("in-flight request = %d %q %v, want 200 and the upstream body", res.code, res.body, res.err)
	}
	if err := waitRun(t, done); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestRunEndsWatches(t *testing.T) {
	const event = `{"type":"ADDED","object":{}}` + "\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, event)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer up.Close()
	url, _, cancel, done := startRun(t, up.URL, testTimeout)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, len(event))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != event {
		t.Fatalf("first event = %q, %v", buf, err)
	}
	cancel()
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Errorf("watch after shutdown: %q, %v; want a clean end", rest, err)
	}
	if err := waitRun(t, done); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestRunGracePeriodExpires(t *testing.T) {
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // never answers on its own
	}))
	defer up.Close()
	url, _, cancel, done := startRun(t, up.URL, 50*time.Millisecond)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	errc := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Get(url + "/api/v1/pods")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	if err := waitRun(t, done); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if err := <-errc; err == nil {
		t.Error("request cut off by the grace period succeeded, want a connection error")
	}
}

func TestRunListenError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := &Config{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, ListenAddress: l.Addr().String()}
	err = Run(context.Background(), cfg)
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), "--listen-address") {
		t.Errorf("Run on a busy address = %v, want a listen error naming --listen-address", err)
	}
}

// TestOriginPolicy: without authentication only loopback Host names are
// served and cross-origin browser requests refused; with delegated
// authentication every Host is served unless --accept-hosts narrows it.
func TestOriginPolicy(t *testing.T) {
	tests := []struct {
		name, mode, acceptHosts string
		wantPatterns            []string // nil: every Host
		wantRejectCrossOrigin   bool
	}{
		{name: "sidecar_default", mode: AuthenticationNone, wantPatterns: []string{`^localhost$`, `^127\.0\.0\.1$`, `^\[::1\]$`}, wantRejectCrossOrigin: true},
		{name: "sidecar_explicit", mode: AuthenticationNone, acceptHosts: `^localhost$, ^lp\.internal$`, wantPatterns: []string{`^localhost$`, `^lp\.internal$`}, wantRejectCrossOrigin: true},
		{name: "delegated_default", mode: AuthenticationDelegated},
		{name: "delegated_explicit", mode: AuthenticationDelegated, acceptHosts: `^listproxy\.example$`, wantPatterns: []string{`^listproxy\.example$`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newAuthOptions()
			o.Mode, o.AcceptHosts = tc.mode, tc.acceptHosts
			p, err := o.originPolicy()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, re := range p.AcceptHosts {
				got = append(got, re.String())
			}
			if diff := cmp.Diff(tc.wantPatterns, got); diff != "" {
				t.Errorf("accepted Host patterns (-want +got):\n%s", diff)
			}
			if p.RejectCrossOrigin != tc.wantRejectCrossOrigin {
				t.Errorf("RejectCrossOrigin = %v, want %v", p.RejectCrossOrigin, tc.wantRejectCrossOrigin)
			}
		})
	}
}

// Defaults that decide what clients see follow the apiserver: a
// resourceVersion=0 list ignores limit (a paginated answer turns client-go's
// reflector to exact relists).
func TestDefaultsFollowAPIServer(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.Cache.LimitForRV0 {
		t.Error("--limit-for-resource-version-0 defaults to true, want false (the apiserver ignores limit at resourceVersion=0)")
	}
}

// --consistent-pass-through-max-objects defaults to the LIST server's 500
// and sets it; 0 turns the rule off.
func TestConsistentPassThroughMaxObjectsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{args: nil, want: 500},
		{args: []string{"--consistent-pass-through-max-objects=0"}, want: 0},
		{args: []string{"--consistent-pass-through-max-objects=2000"}, want: 2000},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := o.Cache.ConsistentPassThroughMaxObjects; got != tc.want {
			t.Errorf("%v: ConsistentPassThroughMaxObjects = %d, want %d", tc.args, got, tc.want)
		}
	}
}
