package framework

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// balancerProbeInterval is how often a Balancer probes its backends'
// /readyz (a kubelet readiness probe's period is 1s or more; shorter keeps
// tests short).
const balancerProbeInterval = 250 * time.Millisecond

// Balancer is a connection-level round-robin TCP balancer on loopback, what
// a ClusterIP Service does: each new connection goes to the next backend
// whose /readyz answered 200 at its last probe (the endpoints a readiness
// probe leaves in the Service), and stays there; requests on a kept-alive
// connection all reach the same backend. When no backend is ready (a
// control-plane outage makes every replica unready), connections go to
// every backend in turn, so that clients see the outage as they would
// without listproxy rather than a Service with no endpoints. A backend that
// refuses the connection is skipped.
type Balancer struct {
	// Addr is the balancer's host:port.
	Addr string

	ln       net.Listener
	backends []string
	isReady  func(ctx context.Context, addr string) bool
	ready    []atomic.Bool
	// gen counts each backend's restarts (Replaced); a probe answered
	// across one is dropped.
	gen    []atomic.Uint64
	picked []atomic.Int64 // connections sent to each backend
	next   atomic.Uint64
	conns  atomic.Int64 // connections accepted
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	open map[net.Conn]struct{} // guarded by mu
}

// StartBalancer listens on a loopback port and balances connections over
// backends (host:port of plain-HTTP listproxy replicas).
func StartBalancer(backends []string) (*Balancer, error) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return StartBalancerProbing(backends, readyzProbe(client, "http"))
}

// readyzProbe is a readiness probe that GETs scheme://ADDR/readyz with
// client and wants a 200.
func readyzProbe(client *http.Client, scheme string) func(ctx context.Context, addr string) bool {
	return func(ctx context.Context, addr string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/readyz", nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// StartBalancerProbing is StartBalancer with isReady as the readiness
// probe of a backend (e.g. APIServerReadyProbe for https apiservers).
func StartBalancerProbing(backends []string, isReady func(ctx context.Context, addr string) bool) (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{
		Addr: ln.Addr().String(), ln: ln, backends: backends, isReady: isReady,
		ready: make([]atomic.Bool, len(backends)), gen: make([]atomic.Uint64, len(backends)),
		picked: make([]atomic.Int64, len(backends)), ctx: ctx, cancel: cancel,
		open: map[net.Conn]struct{}{},
	}
	b.probe()
	b.wg.Add(2)
	go b.probeLoop()
	go b.acceptLoop()
	return b, nil
}

// URL is the balancer's address as an http URL.
func (b *Balancer) URL() string { return "http://" + b.Addr }

// Connections returns how many connections the balancer accepted.
func (b *Balancer) Connections() int64 { return b.conns.Load() }

// BackendConnections returns how many connections went to backend i.
func (b *Balancer) BackendConnections(i int) int64 { return b.picked[i].Load() }

// Ready reports whether backend i answered its last readiness probe.
func (b *Balancer) Ready(i int) bool { return b.ready[i].Load() }

// Replaced takes backend i out of rotation until its next probe that starts
// after this call answers 200: what a Service's endpoints do for a pod that
// is deleted and replaced by a new one, which joins once its readiness
// probe passes.
func (b *Balancer) Replaced(i int) {
	b.gen[i].Add(1)
	b.ready[i].Store(false)
}

// DropConnections closes every open connection, both the client's side and
// the backend's, as a load balancer that restarts or loses its connection
// table; new connections are balanced as before. It returns how many
// connections it closed.
func (b *Balancer) DropConnections() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.open {
		_ = c.Close()
	}
	return len(b.open)
}

// Close stops accepting, closes every open connection and waits for the
// balancer's goroutines.
func (b *Balancer) Close() error {
	b.cancel()
	err := b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return err
}

func (b *Balancer) probeLoop() {
	defer b.wg.Done()
	t := time.NewTicker(balancerProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		b.probe()
	}
}

// probe asks every backend's readiness once, in parallel.
func (b *Balancer) probe() {
	var wg sync.WaitGroup
	for i, addr := range b.backends {
		wg.Go(func() {
			gen := b.gen[i].Load()
			ready := b.isReady(b.ctx, addr)
			if b.gen[i].Load() == gen {
				b.ready[i].Store(ready)
			}
		})
	}
	wg.Wait()
}

func (b *Balancer) acceptLoop() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.conns.Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(c)
		}()
	}
}

// pick dials the next ready backend in turn (every backend when none is
// ready), skipping those that refuse.
func (b *Balancer) pick() (net.Conn, error) {
	n := len(b.backends)
	anyReady := false
	for i := range b.ready {
		anyReady = anyReady || b.ready[i].Load()
	}
	start := int(b.next.Add(1))
	var errs []error
	for k := range n {
		i := (start + k) % n
		if anyReady && !b.ready[i].Load() {
			continue
		}
		c, err := net.DialTimeout("tcp", b.backends[i], time.Second)
		if err == nil {
			b.picked[i].Add(1)
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(append(errs, errors.New("no backend accepted the connection"))...)
}

func (b *Balancer) track(c net.Conn, add bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if add {
		if b.ctx.Err() != nil {
			return false
		}
		b.open[c] = struct{}{}
	} else {
		delete(b.open, c)
	}
	return true
}

func (b *Balancer) serve(client net.Conn) {
	if !b.track(client, true) {
		_ = client.Close()
		return
	}
	defer b.track(client, false)
	defer func() { _ = client.Close() }() // the client sees its connection end
	backend, err := b.pick()
	if err != nil {
		return // the client sees its connection closed, as with no endpoint
	}
	if !b.track(backend, true) {
		_ = backend.Close()
		return
	}
	defer b.track(backend, false)
	defer func() { _ = backend.Close() }() // the backend sees its connection end
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}
