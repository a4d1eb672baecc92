package stores

import (
	"bufio"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// TestUpstreamTransportHasHealthChecks: the snapshot feeds' client never
// gets the shared http.DefaultTransport, whose HTTP/2 connections are not
// pinged, even for an apiserver trusted through the system roots.
func TestUpstreamTransportHasHealthChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *rest.Config
	}{
		{name: "system_roots_and_token", cfg: &rest.Config{Host: "https://apiserver.example:443", BearerToken: "t"}},
		{name: "plain_http", cfg: &rest.Config{Host: "http://127.0.0.1:8080"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := rest.HTTPClientFor(withHealthCheckedTransport(tc.cfg))
			if err != nil {
				t.Fatal(err)
			}
			rt := client.Transport
			for {
				w, ok := rt.(utilnet.RoundTripperWrapper)
				if !ok {
					break
				}
				rt = w.WrappedRoundTripper()
			}
			tr, ok := rt.(*http.Transport)
			if !ok {
				t.Fatalf("transport %T, want *http.Transport", rt)
			}
			if tr == http.DefaultTransport {
				t.Fatal("http.DefaultTransport, whose HTTP/2 connections have no health check")
			}
			// utilnet.SetTransportDefaults configures HTTP/2 through
			// golang.org/x/net/http2 with ReadIdleTimeout and PingTimeout,
			// which registers "h2" at once.
			if tr.TLSNextProto["h2"] == nil {
				t.Error("HTTP/2 not configured by utilnet.SetTransportDefaults")
			}
		})
	}
	if cfg := (&rest.Config{Host: "https://a", Proxy: http.ProxyFromEnvironment}); withHealthCheckedTransport(cfg) != cfg {
		t.Error("a config with its own proxy was copied")
	}
}

// TestUpstreamDeadConnectionDetected: when the TCP connection under an
// HTTP/2 stream goes silent (no bytes either way), the HTTP/2 health check
// fails the stream's read instead of leaving it blocked forever.
func TestUpstreamDeadConnectionDetected(t *testing.T) {
	t.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "1")
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "1")
	release := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first event\n")
		w.(http.Flusher).Flush()
		select { // a watch with nothing more to say
		case <-r.Context().Done():
		case <-release:
		}
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	defer up.Close()
	defer close(release)
	fwd := newFreezableForwarder(t, up.Listener.Addr().String())
	defer fwd.close()

	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	cfg := &rest.Config{Host: "https://" + fwd.addr(), TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, ServerName: "example.com"}}
	client, err := rest.HTTPClientFor(withHealthCheckedTransport(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/pods?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fwd.freeze()
	start := time.Now()
	_, err = br.ReadString('\n')
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read after the connection went silent: %v, want a connection error before the test's deadline", err)
	}
	t.Logf("dead connection detected after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// freezableForwarder forwards TCP connections to a target until frozen;
// frozen connections stay open but carry no bytes.
type freezableForwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	frozen chan struct{} // closed by freeze
	conns  []net.Conn
}

func newFreezableForwarder(t *testing.T, target string) *freezableForwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezableForwarder{ln: ln, target: target, frozen: make(chan struct{})}
	f.wg.Add(1)
	go f.accept()
	return f
}

func (f *freezableForwarder) addr() string { return f.ln.Addr().String() }

func (f *freezableForwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, u)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(c, u)
		go f.pipe(u, c)
	}
}

// pipe copies from src to dst, holding every chunk read after freeze.
func (f *freezableForwarder) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			return // the bytes are dropped; the connections stay open until close
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezableForwarder) freeze() { close(f.frozen) }

func (f *freezableForwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
