package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"
)

// Readiness probing of the apiserver. Not measured: the timeout keeps a
// kubelet probe (default timeout 1s) from piling up behind a hung apiserver
// for long, and the TTL bounds the probes a busy /readyz sends upstream to
// about one per second.
const (
	readyProbeTimeout = 2 * time.Second
	readyCacheTTL     = time.Second
)

// readiness answers whether the apiserver is reachable and ready, probing its
// /readyz at most once per readyCacheTTL. Concurrent callers share a probe.
type readiness struct {
	client *http.Client
	url    string
	clock  clock.PassiveClock
	group  singleflight.Group

	mu        sync.Mutex // guards checkedAt and err
	checkedAt time.Time  // when err was observed; zero before the first probe
	err       error      // result of the last probe
}

func newReadiness(rt http.RoundTripper, apiserver *url.URL, clk clock.PassiveClock) *readiness {
	return &readiness{
		client: &http.Client{Transport: rt},
		url:    apiserver.JoinPath("/readyz").String(),
		clock:  clk,
	}
}

// check returns nil when the apiserver answered its /readyz with 200 within
// the last readyCacheTTL.
func (c *readiness) check() error {
	c.mu.Lock()
	if !c.checkedAt.IsZero() && c.clock.Since(c.checkedAt) < readyCacheTTL {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()

	v, _, _ := c.group.Do("", func() (any, error) {
		err := c.probe()
		c.mu.Lock()
		c.checkedAt, c.err = c.clock.Now(), err
		c.mu.Unlock()
		return err, nil
	})
	err, _ := v.(error)
	return err
}

func (c *readiness) probe() error {
	// Not the caller's context: the probe is shared with other callers.
	ctx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("probe apiserver: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("apiserver /readyz answered %d", resp.StatusCode)
	}
	return nil
}

// serveHealthz answers 200 "ok" while the process is up.
func (h *Handler) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	writePlain(w, http.StatusOK, "ok")
}

// serveReadyz answers 200 "ok" while the apiserver is ready, listproxy's own
// check (Config.Ready: discovery read, preloaded stores synced) passes and listproxy is not
// shutting down, else 503 with the reason.
func (h *Handler) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	if h.draining.Load() {
		writePlain(w, http.StatusServiceUnavailable, "[-]shutdown failed: listproxy is shutting down\nreadyz check failed")
		return
	}
	if h.ownReady != nil {
		if err := h.ownReady(); err != nil {
			writePlain(w, http.StatusServiceUnavailable, fmt.Sprintf("[-]snapshots failed: %v\nreadyz check failed", err))
			return
		}
	}
	if err := h.ready.check(); err != nil {
		writePlain(w, http.StatusServiceUnavailable, fmt.Sprintf("[-]apiserver failed: %v\nreadyz check failed", err))
		return
	}
	writePlain(w, http.StatusOK, "ok")
}

// writePlain writes a health answer with the headers the apiserver's healthz
// handlers use.
func writePlain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}
