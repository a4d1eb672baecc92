package freshness

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// probeCall is one read of the current revision, shared by the callers that
// joined it before it started.
type probeCall struct {
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed once rev and err are set.
	done chan struct{}
	rev  int64
	err  error

	// waiters counts callers still waiting; guarded by Checker.probeMu.
	waiters int
}

// CurrentRevision returns etcd's current revision, read linearizably: the
// header revision of a quorum read of one key (Config.ProbeKey).
//
// Concurrent callers share a probe, but only one that started after they
// arrived: a probe already in flight may have been answered before the
// caller's arrival and so proves nothing to it. A caller arriving while a
// probe is in flight joins the next one, which starts when the in-flight one
// ends; so at most one probe is in flight per Checker, however many callers
// wait.
//
// If ctx ends first, CurrentRevision returns ctx.Err() at once; a probe that
// all its callers have left is cancelled (or never started).
func (c *Checker) CurrentRevision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.probeMu.Lock()
	call := c.nextProbe
	if call == nil {
		pctx, cancel := context.WithCancel(context.Background())
		call = &probeCall{ctx: pctx, cancel: cancel, done: make(chan struct{})}
		c.nextProbe = call
	}
	call.waiters++
	if !c.probeRunning {
		c.startProbeLocked()
	}
	c.probeMu.Unlock()

	select {
	case <-call.done:
		c.metrics.probeWaiters.Inc()
		return call.rev, call.err
	case <-ctx.Done():
		c.probeMu.Lock()
		call.waiters--
		if call.waiters == 0 {
			if c.nextProbe == call {
				c.nextProbe = nil
			}
			call.cancel()
		}
		c.probeMu.Unlock()
		return 0, ctx.Err()
	}
}

// startProbeLocked starts c.nextProbe. c.probeMu must be held, no probe may
// be running, and c.nextProbe must be non-nil.
func (c *Checker) startProbeLocked() {
	call := c.nextProbe
	c.nextProbe = nil
	c.probeRunning = true
	go c.runProbe(call)
}

func (c *Checker) runProbe(call *probeCall) {
	start := c.clock.Now()
	rev, err := c.probe(call.ctx)
	c.metrics.observeProbe(c.clock.Since(start), err)
	call.rev, call.err = rev, err
	call.cancel()

	c.probeMu.Lock()
	c.probeRunning = false
	if c.nextProbe != nil {
		c.startProbeLocked()
	}
	c.probeMu.Unlock()
	close(call.done)
}

func (c *Checker) probeEtcd(ctx context.Context) (int64, error) {
	// Get is linearizable by default; the count spares fetching a value.
	resp, err := c.client.Get(ctx, c.probeKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read current revision: %w", err)
	}
	return resp.Header.Revision, nil
}
