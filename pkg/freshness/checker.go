package freshness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults for Config.
const (
	// DefaultProgressInterval is the watch cache's progressRequestPeriod
	// (k8s.io/apiserver/pkg/storage/cacher/progress). Not measured here.
	DefaultProgressInterval = 100 * time.Millisecond
	// DefaultCompactionPollInterval: kube-apiserver compacts every 5 minutes
	// by default; 10s keeps the known compacted revision well within that.
	DefaultCompactionPollInterval = 10 * time.Second
	// DefaultProbeKey is the key read by CurrentRevision and
	// RefreshCompaction: kube-apiserver's own compaction key, which its etcd
	// credentials can read.
	DefaultProbeKey = "compact_rev_key"
)

// resetProbeTimeout bounds a tracker's read of the current revision when it
// must move its baseline. Not yet measured.
const resetProbeTimeout = 10 * time.Second

// Errors returned by this package; test with errors.Is.
var (
	// ErrCompacted: the requested revision has been compacted in etcd.
	ErrCompacted = errors.New("required revision has been compacted")
	// ErrStopped: the Tracker was stopped while a caller waited on it.
	ErrStopped = errors.New("tracker stopped")
)

// streamMetadataKey tags the outgoing gRPC metadata of the trackers' watches
// and progress requests. clientv3 multiplexes watches whose contexts carry
// the same metadata onto one gRPC stream, and RequestProgress only reaches
// the stream selected by its context's metadata. Our own key keeps trackers
// on a stream of their own: etcd answers a progress request only when every
// watcher on the stream is synced, so a foreign lagging watcher on a shared
// stream would starve every tracker.
const streamMetadataKey = "listproxy-stream"

// Config configures a Checker. Zero values take the documented defaults.
type Config struct {
	// Client is the etcd client; required. The Checker never closes it.
	Client *clientv3.Client
	// ProgressInterval bounds RequestProgress calls to at most one per
	// interval, sent only while some LastChangeAtOrBefore waits. Default
	// DefaultProgressInterval.
	ProgressInterval time.Duration
	// CompactionPollInterval is how often Run re-reads the compacted
	// revision. Default DefaultCompactionPollInterval.
	CompactionPollInterval time.Duration
	// ProbeKey is the single key read to learn the current revision (its
	// value is never fetched). Default DefaultProbeKey.
	ProbeKey string
	// Clock drives the progress and compaction loops. Default the real clock.
	Clock clock.WithTicker
	// Registerer receives the package's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Checker answers the etcd side of consistent reads: the current revision,
// the compacted revision, key counts, and (through Trackers) the last change
// under a prefix. It is safe for concurrent use. Run must be running for
// waits in Tracker.LastChangeAtOrBefore to request progress from etcd.
type Checker struct {
	client                 *clientv3.Client
	clock                  clock.WithTicker
	progressInterval       time.Duration
	compactionPollInterval time.Duration
	probeKey               string
	metrics                *metrics

	// probe reads the current revision; requestProgress asks etcd for a
	// progress notification on the trackers' watch stream. Tests replace them.
	probe           func(ctx context.Context) (int64, error)
	requestProgress func(ctx context.Context) error

	// probes shares reads of the current revision (readRevision).
	probes sharedProbe[int64]

	// progressMu guards progressWaiters.
	progressMu sync.Mutex
	// progressWaiters counts LastChangeAtOrBefore calls waiting for progress.
	progressWaiters int
	// progressWake (capacity 1) nudges the progress requester when a wait
	// begins.
	progressWake chan struct{}

	// compacted is the largest compacted revision seen.
	compacted atomic.Int64

	// trackersMu guards trackers: the running shared Trackers by prefix
	// (TrackShared).
	trackersMu sync.Mutex
	trackers   map[string]*sharedTracker
}

// New returns a Checker for cfg. It starts nothing; call Run.
func New(cfg Config) (*Checker, error) {
	if cfg.Client == nil {
		return nil, errors.New("freshness: Config.Client is required")
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c := newChecker(cfg)
	c.metrics = m
	c.probe = c.probeEtcd
	c.requestProgress = c.requestProgressEtcd
	return c, nil
}

// newChecker applies cfg's defaults, with unregistered metrics; probe and
// requestProgress are left for the caller to set.
func newChecker(cfg Config) *Checker {
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.CompactionPollInterval <= 0 {
		cfg.CompactionPollInterval = DefaultCompactionPollInterval
	}
	if cfg.ProbeKey == "" {
		cfg.ProbeKey = DefaultProbeKey
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c := &Checker{
		client:                 cfg.Client,
		clock:                  cfg.Clock,
		progressInterval:       cfg.ProgressInterval,
		compactionPollInterval: cfg.CompactionPollInterval,
		probeKey:               cfg.ProbeKey,
		metrics:                unregisteredMetrics(),
		progressWake:           make(chan struct{}, 1),
		trackers:               map[string]*sharedTracker{},
	}
	c.probes.read = c.readRevision
	return c
}

// Run runs the background loops: the progress requester and compaction
// polling (which reads the compacted revision at once, then every
// CompactionPollInterval). It returns when ctx is done and its loops have
// ended. Call it once.
func (c *Checker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.runProgressRequester(ctx) })
	wg.Go(func() { c.runCompactionPoller(ctx) })
	wg.Wait()
}

// streamContext returns ctx carrying the outgoing metadata shared by every
// tracker watch and progress request, so that they use one gRPC watch
// stream. It also requires a leader, as kube-apiserver does, so a watch on a
// partitioned member is cancelled instead of silently going stale.
func streamContext(ctx context.Context) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, streamMetadataKey, "freshness")
	return clientv3.WithRequireLeader(ctx)
}

// startWaiting registers a caller waiting for watch progress and wakes the
// progress requester.
func (c *Checker) startWaiting() {
	c.progressMu.Lock()
	c.progressWaiters++
	c.progressMu.Unlock()
	select {
	case c.progressWake <- struct{}{}:
	default:
	}
}

// doneWaiting unregisters a caller registered by startWaiting.
func (c *Checker) doneWaiting() {
	c.progressMu.Lock()
	c.progressWaiters--
	c.progressMu.Unlock()
}

func (c *Checker) waitingForProgress() bool {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	return c.progressWaiters > 0
}

// runProgressRequester sends RequestProgress while anyone waits for
// progress, at most once per progressInterval, until ctx is done. One
// request serves every waiter of every tracker: etcd broadcasts its answer
// to all watches on the stream.
func (c *Checker) runProgressRequester(ctx context.Context) {
	var last time.Time // zero: never requested
	for {
		if !c.waitingForProgress() {
			select {
			case <-c.progressWake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if !last.IsZero() {
			if wait := c.progressInterval - c.clock.Since(last); wait > 0 {
				timer := c.clock.NewTimer(wait)
				select {
				case <-timer.C():
				case <-ctx.Done():
					timer.Stop()
					return
				}
				continue // re-check for waiters
			}
		}
		last = c.clock.Now()
		c.metrics.progressRequests.Inc()
		if err := c.requestProgress(ctx); err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("etcd watch progress request failed", "err", err)
		}
	}
}

func (c *Checker) requestProgressEtcd(ctx context.Context) error {
	return c.client.RequestProgress(streamContext(ctx))
}

// Count returns the number of keys under prefix at revision rev (rev <= 0:
// the current revision). It fails with an error wrapping ErrCompacted if rev
// is compacted.
func (c *Checker) Count(ctx context.Context, prefix string, rev int64) (int64, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := c.client.Get(ctx, prefix, opts...)
	if err != nil {
		return 0, fmt.Errorf("count %q at revision %d: %w", prefix, rev, etcdError(err))
	}
	return resp.Count, nil
}

// CompactedRevision returns the largest etcd compacted revision this Checker
// has seen (0 if none): revisions below it can no longer be read or watched.
// It is as fresh as the last RefreshCompaction, poll (see Run) or tracker
// watch that hit a compaction.
func (c *Checker) CompactedRevision() int64 {
	return c.compacted.Load()
}

// RefreshCompaction reads etcd's compacted revision now, records it and
// returns the largest compacted revision seen.
//
// etcd has no API that returns the compacted revision. A read at revision 1
// fails with ErrCompacted exactly when anything has been compacted; only
// then does RefreshCompaction open a watch from revision 1, which etcd
// cancels at once with the compacted revision in the response
// (WatchResponse.CompactRevision). The read first spares etcd replaying its
// whole history to a watch from revision 1 when nothing is compacted.
func (c *Checker) RefreshCompaction(ctx context.Context) (int64, error) {
	_, err := c.client.Get(ctx, c.probeKey, clientv3.WithRev(1), clientv3.WithCountOnly())
	if err == nil {
		return c.CompactedRevision(), nil
	}
	if !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("read revision 1: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.client.Watch(wctx, c.probeKey, clientv3.WithRev(1)) {
		if resp.CompactRevision != 0 {
			return c.noteCompacted(resp.CompactRevision), nil
		}
		if err := resp.Err(); err != nil {
			return 0, fmt.Errorf("watch from revision 1: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("watch from revision 1: %w", err)
	}
	return 0, errors.New("watch from revision 1: closed without a compaction response")
}

// noteCompacted records that rev is compacted and returns the largest
// compacted revision seen.
func (c *Checker) noteCompacted(rev int64) int64 {
	for {
		cur := c.compacted.Load()
		if rev <= cur {
			return cur
		}
		if c.compacted.CompareAndSwap(cur, rev) {
			c.metrics.compactedRevision.Set(float64(rev))
			return rev
		}
	}
}

func (c *Checker) runCompactionPoller(ctx context.Context) {
	ticker := c.clock.NewTicker(c.compactionPollInterval)
	defer ticker.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, c.compactionPollInterval)
		if _, err := c.RefreshCompaction(rctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Reading etcd compacted revision failed")
		}
		cancel()
		select {
		case <-ticker.C():
		case <-ctx.Done():
			return
		}
	}
}

// etcdError adds ErrCompacted to err's chain when etcd reported a
// compacted revision.
func etcdError(err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("%w: %w", ErrCompacted, err)
	}
	return err
}
