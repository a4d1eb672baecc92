package freshness

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// sharedProbe shares reads of a current revision (or of a state at one)
// among concurrent callers,
// but only a read that started after a caller arrived: one already in
// flight may have been answered before the caller's arrival and so proves
// nothing to it. A caller arriving while a read is in flight joins the next
// one, which starts when the in-flight one ends; so at most one read is in
// flight per sharedProbe, however many callers wait.
type sharedProbe[T any] struct {
	// read reads the current revision.
	read func(ctx context.Context) (T, error)

	// mu guards running and next.
	mu sync.Mutex
	// running is true while a read is in flight.
	running bool
	// next collects callers that arrived while a read was in flight; it
	// starts when that read ends. Nil when nobody waits for it.
	next *probeCall[T]
}

// probeCall is one read of the current revision, shared by the callers that
// joined it before it started.
type probeCall[T any] struct {
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed once rev and err are set.
	done chan struct{}
	rev  T
	err  error

	// waiters counts callers still waiting; guarded by sharedProbe.mu.
	waiters int
}

// current returns the revision read by a read that started after the call;
// answered is false when ctx ended first. Then it returns ctx.Err() at
// once; a read that all its callers have left is cancelled (or never
// started).
func (p *sharedProbe[T]) current(ctx context.Context) (rev T, answered bool, err error) {
	if err := ctx.Err(); err != nil {
		return rev, false, err
	}
	p.mu.Lock()
	call := p.next
	if call == nil {
		pctx, cancel := context.WithCancel(context.Background())
		call = &probeCall[T]{ctx: pctx, cancel: cancel, done: make(chan struct{})}
		p.next = call
	}
	call.waiters++
	if !p.running {
		p.startLocked()
	}
	p.mu.Unlock()

	select {
	case <-call.done:
		return call.rev, true, call.err
	case <-ctx.Done():
		p.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			if p.next == call {
				p.next = nil
			}
			call.cancel()
		}
		p.mu.Unlock()
		return rev, false, ctx.Err()
	}
}

// startLocked starts p.next. p.mu must be held, no read may be running,
// and p.next must be non-nil.
func (p *sharedProbe[T]) startLocked() {
	call := p.next
	p.next = nil
	p.running = true
	go p.run(call)
}

func (p *sharedProbe[T]) run(call *probeCall[T]) {
	call.rev, call.err = p.read(call.ctx)
	call.cancel()

	p.mu.Lock()
	p.running = false
	if p.next != nil {
		p.startLocked()
	}
	p.mu.Unlock()
	close(call.done)
}

// CurrentRevision returns etcd's current revision, read linearizably: the
// header revision of a quorum read of one key (Config.ProbeKey). Concurrent
// callers share a read that started after they arrived (sharedProbe).
func (c *Checker) CurrentRevision(ctx context.Context) (int64, error) {
	rev, answered, err := c.probes.current(ctx)
	if answered {
		c.metrics.probeWaiters.Inc()
	}
	return rev, err
}

// readRevision is the Checker's sharedProbe read: c.probe, timed.
func (c *Checker) readRevision(ctx context.Context) (int64, error) {
	start := c.clock.Now()
	rev, err := c.probe(ctx)
	c.metrics.observeProbe(c.clock.Since(start), err)
	return rev, err
}

func (c *Checker) probeEtcd(ctx context.Context) (int64, error) {
	// Get is linearizable by default; the count spares fetching a value.
	resp, err := c.client.Get(ctx, c.probeKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read current revision: %w", err)
	}
	return resp.Header.Revision, nil
}
