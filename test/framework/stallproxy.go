package framework

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// StallProxy is a plain-HTTP reverse proxy on 127.0.0.1 in front of the
// apiserver, sending every request with the admin's credentials. It can
// stall watch streams the way a stuck apiserver or a wedged intermediary
// does: Freeze makes every open watch response (a request with watch=true)
// stop delivering bytes while its connection stays open; requests made
// after Freeze, watches included, flow normally. Thaw releases the frozen
// streams.
//
// It stalls streams, not connections: a client speaking HTTP/2 to the
// apiserver multiplexes every request over one TCP connection, so freezing
// that connection would freeze the re-established watch as well.
type StallProxy struct {
	URL string

	mu sync.Mutex
	// open holds every watch response body being proxied, mapped to the
	// gate it waits on while frozen (nil when flowing).
	open map[*stallBody]chan struct{}
}

// StartStallProxy starts a StallProxy in front of cp's apiserver and stops
// it when the test ends.
func StartStallProxy(t testing.TB, cp *ControlPlane) *StallProxy {
	t.Helper()
	p := &StallProxy{open: map[*stallBody]chan struct{}{}}
	p.URL = startAdminProxy(t, cp, "stall proxy", func(resp *http.Response) error {
		if q := resp.Request.URL.Query().Get("watch"); q == "true" || q == "1" {
			resp.Body = p.track(resp.Request.Context(), resp.Body)
		}
		return nil
	})
	t.Cleanup(p.Thaw)
	return p
}

// startAdminProxy serves a reverse proxy to cp's apiserver on a loopback
// port, sending every request with the admin's credentials and flushing
// every write; modify sees each response. It returns the proxy's http URL
// and stops it, ending every stream it carries, when the test ends.
func startAdminProxy(t testing.TB, cp *ControlPlane, what string, modify func(*http.Response) error) string {
	t.Helper()
	target, err := url.Parse(cp.APIServerURL)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	rt, err := rest.TransportFor(cp.AdminConfig)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:      rt,
		FlushInterval:  -1,
		ModifyResponse: modify,
		ErrorLog:       log.New(io.Discard, "", 0), // streams cut short are the point
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: startTimeout}
	go func() { _ = srv.Serve(ln) }()
	// Closing a connection cancels its request's context, which a held
	// read waits on.
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// StartListproxyVia is StartListproxy with listproxy reaching the apiserver
// at serverURL (plain HTTP, no credentials of its own), e.g. a StallProxy.
func StartListproxyVia(t testing.TB, cp *ControlPlane, serverURL string, args ...string) *Listproxy {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "via.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, serverURL, "", true); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	// The last --kubeconfig wins over the one StartListproxy sets.
	return StartListproxy(t, cp, append(args, "--kubeconfig="+kubeconfig)...)
}

// StartListproxyAt is StartListproxy with listproxy reaching the apiserver
// at serverURL over https with the admin's credentials, trusting cp's CA:
// e.g. a TCP balancer in front of several apiservers (AddAPIServer).
func StartListproxyAt(t testing.TB, cp *ControlPlane, serverURL string, args ...string) *Listproxy {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "at.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, serverURL, UserAdmin, false); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	return StartListproxy(t, cp, append(args, "--kubeconfig="+kubeconfig)...)
}

// Freeze stalls every open watch stream and returns how many it stalled.
func (p *StallProxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for b, gate := range p.open {
		if gate == nil {
			p.open[b] = make(chan struct{})
			n++
		}
	}
	return n
}

// Thaw lets every frozen stream flow again.
func (p *StallProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for b, gate := range p.open {
		if gate != nil {
			close(gate)
			p.open[b] = nil
		}
	}
}

// OpenWatches returns how many watch streams the proxy carries.
func (p *StallProxy) OpenWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}

func (p *StallProxy) track(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	b := &stallBody{ReadCloser: body, ctx: ctx, p: p}
	p.mu.Lock()
	p.open[b] = nil
	p.mu.Unlock()
	return b
}

// gate returns the channel b waits on, nil when it may flow.
func (p *StallProxy) gate(b *stallBody) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open[b]
}

// stallBody is a watch response body that holds its bytes while frozen.
type stallBody struct {
	io.ReadCloser
	ctx context.Context // the proxied request's: done when the client leaves
	p   *StallProxy
}

func (b *stallBody) Read(buf []byte) (int, error) {
	if err := b.wait(); err != nil {
		return 0, err
	}
	n, err := b.ReadCloser.Read(buf)
	// Bytes that arrive while frozen are held until Thaw.
	if werr := b.wait(); werr != nil {
		return 0, werr
	}
	return n, err
}

func (b *stallBody) wait() error {
	gate := b.p.gate(b)
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-b.ctx.Done():
		return b.ctx.Err()
	}
}

func (b *stallBody) Close() error {
	b.p.mu.Lock()
	delete(b.p.open, b)
	b.p.mu.Unlock()
	return b.ReadCloser.Close()
}
