package framework

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shortWatchSeconds: a watch asking for a timeoutSeconds of at most this is
// short-lived (listproxy's auxiliary watches ask for 3); longer ones, or
// those without a timeout, are long-lived (the stores' feeds ask for 5 to
// 10 minutes).
const shortWatchSeconds = 10

// DelayProxyConfig says what a DelayProxy does to the JSON watch responses
// it treats.
type DelayProxyConfig struct {
	// MaxDelay holds each event back by a random 0 to MaxDelay after it
	// arrived, and at least until the event before it was delivered: the
	// stream keeps its order.
	MaxDelay time.Duration
	// DropBookmarks removes the BOOKMARK events.
	DropBookmarks bool
	// LongWatchesOnly treats only long-lived watches (see
	// shortWatchSeconds): a store's feed, not an auxiliary watch.
	LongWatchesOnly bool
}

// DelayProxy is a plain-HTTP reverse proxy on 127.0.0.1 in front of the
// apiserver, sending every request with the admin's credentials, that
// delays the events of watch responses or drops their bookmarks, the way a
// slow or bookmark-stripping intermediary does. It treats JSON watches
// (newline-delimited events); everything else passes unchanged.
type DelayProxy struct {
	URL string

	cfg                        DelayProxyConfig
	treated, events, bookmarks atomic.Int64
}

// StartDelayProxy starts a DelayProxy in front of cp's apiserver and stops
// it when the test ends. Point listproxy at it with StartListproxyVia.
func StartDelayProxy(t testing.TB, cp *ControlPlane, cfg DelayProxyConfig) *DelayProxy {
	t.Helper()
	p := &DelayProxy{cfg: cfg}
	p.URL = startAdminProxy(t, cp, "delay proxy", func(resp *http.Response) error {
		if p.treats(resp) {
			p.treated.Add(1)
			resp.Body = p.delay(resp.Request.Context(), resp.Body)
		}
		return nil
	})
	return p
}

// Treated returns how many watch responses the proxy treated.
func (p *DelayProxy) Treated() int64 { return p.treated.Load() }

// Events returns how many events of treated watches it delivered.
func (p *DelayProxy) Events() int64 { return p.events.Load() }

// DroppedBookmarks returns how many bookmarks it dropped.
func (p *DelayProxy) DroppedBookmarks() int64 { return p.bookmarks.Load() }

func (p *DelayProxy) treats(resp *http.Response) bool {
	q := resp.Request.URL.Query()
	if w := q.Get("watch"); resp.StatusCode != http.StatusOK || (w != "true" && w != "1") {
		return false
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if !p.cfg.LongWatchesOnly {
		return true
	}
	s, err := strconv.Atoi(q.Get("timeoutSeconds"))
	return err != nil || s > shortWatchSeconds
}

// delayedEvent is one event line and when it may be delivered.
type delayedEvent struct {
	line []byte
	due  time.Time
}

// delay returns body with its events held back (and bookmarks dropped) as
// p's configuration says. A goroutine reads body ahead, so each event's
// delay counts from its arrival; it ends when body does or ctx ends.
func (p *DelayProxy) delay(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	d := &delayedBody{p: p, body: body, ctx: ctx, cancel: cancel, queue: make(chan delayedEvent, 1<<16)}
	go d.readAhead()
	return d
}

// delayedBody is a watch response body whose events wait until they are due.
type delayedBody struct {
	p      *DelayProxy
	body   io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan delayedEvent // closed when body ended; then err says how

	err     error  // valid once queue is closed
	pending []byte // the rest of the event being read out
	once    sync.Once
}

func (d *delayedBody) readAhead() {
	p := d.p
	defer close(d.queue)
	r := bufio.NewReaderSize(d.body, 64<<10)
	var last time.Time
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var ev struct {
				Type string `json:"type"`
			}
			if p.cfg.DropBookmarks && json.Unmarshal(line, &ev) == nil && ev.Type == "BOOKMARK" {
				p.bookmarks.Add(1)
			} else {
				due := time.Now()
				if p.cfg.MaxDelay > 0 {
					due = due.Add(rand.N(p.cfg.MaxDelay + 1))
				}
				if due.Before(last) {
					due = last
				}
				last = due
				select {
				case d.queue <- delayedEvent{line: line, due: due}:
				case <-d.ctx.Done():
					d.err = d.ctx.Err()
					return
				}
			}
		}
		if err != nil {
			d.err = err
			return
		}
	}
}

func (d *delayedBody) Read(buf []byte) (int, error) {
	if len(d.pending) == 0 {
		var ev delayedEvent
		var ok bool
		select {
		case ev, ok = <-d.queue:
		case <-d.ctx.Done():
			return 0, d.ctx.Err()
		}
		if !ok {
			return 0, d.err
		}
		d.p.events.Add(1)
		if wait := time.Until(ev.due); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-d.ctx.Done():
				timer.Stop()
				return 0, d.ctx.Err()
			}
		}
		d.pending = ev.line
	}
	n := copy(buf, d.pending)
	d.pending = d.pending[n:]
	return n, nil
}

// Close ends the read-ahead and closes the upstream body.
func (d *delayedBody) Close() error {
	var err error
	d.once.Do(func() {
		d.cancel()
		err = d.body.Close()
	})
	return err
}
