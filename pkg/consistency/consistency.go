// Package consistency compares the snapshot cache with the apiserver, the
// way the apiserver's own cacher/consistency checker compares its watch
// cache with etcd: each synced store's latest snapshot is compared, by its
// objects' keys and resourceVersions, with a metadata-only LIST of the
// apiserver at the same resourceVersion, and a mismatch drops the resource's
// stores so that they resync. It sees the cache only through the small Cache
// and Lister interfaces; it must not import pkg/lists, pkg/proxy or any
// other server package.
package consistency

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Config configures the comparison of snapshots with the apiserver: each
// synced store's latest snapshot at resourceVersion
// R is compared, by its objects' keys and resourceVersions, with the
// apiserver's LIST at resourceVersion=R&resourceVersionMatch=Exact
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list).
// A mismatch drops the resource's stores, so that its next LIST passes
// through and starts a fresh store.
//
// Start from DefaultConfig: New takes every field as given.
type Config struct {
	// Interval is the mean time between periodic checks of every synced
	// store; each wait is jittered by up to +20%. 0 disables periodic
	// checks; Checker.Check still works on demand.
	Interval time.Duration
	// PageSize is the limit of each page of the apiserver LIST; 0 lists
	// everything at once.
	PageSize int64
	// Timeout bounds one resource's apiserver LIST; 0 is no bound.
	Timeout time.Duration
	// Metrics counts results; nil records nothing.
	Metrics *Metrics
	// Clock drives the periodic checks and times reports; nil selects the
	// real clock.
	Clock clock.Clock
}

// DefaultConfig returns the defaults. Not measured: one metadata LIST of
// each cached resource every 10 minutes, in pages of 500 (client-go's
// pager), is a small fraction of what listproxy saves.
func DefaultConfig() Config {
	return Config{Interval: 10 * time.Minute, PageSize: 500, Timeout: time.Minute}
}

// Results of comparing one store with the apiserver (the "result" label of
// listproxy_consistency_checks_total).
const (
	Match    = "match"
	Mismatch = "mismatch"
	// Error: the apiserver could not be listed at the snapshot's
	// resourceVersion (410 Gone after compaction, a timeout, ...); nothing
	// is concluded and nothing is done.
	Error = "error"
)

// diffExamples is how many keys of each kind of difference a result keeps.
const diffExamples = 5

// Result is the outcome of comparing one store (one resource in
// one format) with the apiserver.
type Result struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Format   string `json:"format"`
	// ResourceVersion is the one both sides were read at.
	ResourceVersion string `json:"resourceVersion"`
	// Objects and APIServerObjects count the objects on each side.
	Objects          int `json:"objects"`
	APIServerObjects int `json:"apiserverObjects"`
	// SnapshotHash and APIServerHash are sha256 over "key\x00rv\n" for each
	// object in key order.
	SnapshotHash  string `json:"snapshotHash"`
	APIServerHash string `json:"apiserverHash,omitempty"`
	// Result is Match, Mismatch or Error.
	Result string `json:"result"`
	// Error says why the result is Error.
	Error string `json:"error,omitempty"`
	// Diff is set for a mismatch.
	Diff *KeyDiff `json:"diff,omitempty"`
	// Dropped reports that a mismatch of this resource, in this or another
	// format, dropped all its stores.
	Dropped bool `json:"dropped,omitempty"`
}

// Report is one check of every synced store.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Results  []Result  `json:"results"`
}

// Store is one synced store of a resource, as the checker sees it.
type Store struct {
	Format wire.Format
	// Snapshot is the store's latest snapshot.
	Snapshot *snapshot.Snapshot
	// Progress is the resourceVersion up to which the store has every
	// change: Snapshot holds the state at every resourceVersion in
	// [Snapshot.RV(), Progress].
	Progress uint64
}

// Cache is the snapshot cache under check.
type Cache interface {
	// Resources returns the resources that have stores.
	Resources() []schema.GroupVersionResource
	// Stores returns the synced stores of gvr.
	Stores(gvr schema.GroupVersionResource) []Store
	// Drop drops every store of gvr; its next LIST passes through and
	// starts a fresh store.
	Drop(gvr schema.GroupVersionResource, why string)
}

// Lister reads the apiserver.
type Lister interface {
	// List sends the apiserver a LIST of gvr (cluster-wide) with query q,
	// asking for format, and returns the body of a 200 answer; any other
	// answer is an error.
	List(ctx context.Context, gvr schema.GroupVersionResource, format wire.Format, q url.Values) (io.ReadCloser, error)
}

// Checker compares a Cache with the apiserver. Create it with New.
type Checker struct {
	cfg    Config
	cache  Cache
	lister Lister

	// run is held by a running check: checks run one at a time, and one
	// check compares one store at a time, to bound the apiserver's load.
	run sync.Mutex
	// mu guards last.
	mu   sync.Mutex
	last *Report
}

// New returns a Checker of cache that reads the apiserver with lister.
func New(cfg Config, cache Cache, lister Lister) *Checker {
	return &Checker{cfg: cfg, cache: cache, lister: lister}
}

func (c *Checker) clock() clock.Clock {
	if c.cfg.Clock != nil {
		return c.cfg.Clock
	}
	return clock.RealClock{}
}

// Run checks every synced store about every Interval until ctx is done. It
// returns at once when Interval is 0.
func (c *Checker) Run(ctx context.Context) {
	if c.cfg.Interval <= 0 {
		return
	}
	clk := c.clock()
	for {
		t := clk.NewTimer(wait.Jitter(c.cfg.Interval, 0.2))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		report := c.Check(ctx)
		klog.V(2).InfoS("Consistency check done", "stores", len(report.Results), "duration", report.Duration)
	}
}

// Last returns the report of the last Check, if one ran.
func (c *Checker) Last() (Report, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return Report{}, false
	}
	return *c.last, true
}

// Check compares every synced store with the apiserver now, one store at a
// time (waiting for a check already running), and returns the results in
// resource and format order. A resource whose snapshot differs in any format
// has all its stores dropped. If ctx ends, the stores not yet checked are
// left out of the report.
func (c *Checker) Check(ctx context.Context) Report {
	c.run.Lock()
	defer c.run.Unlock()
	clk := c.clock()
	report := Report{Started: clk.Now(), Results: []Result{}}
	gvrs := c.cache.Resources()
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int { return cmp.Compare(a.String(), b.String()) })
	for _, gvr := range gvrs {
		if ctx.Err() != nil {
			break
		}
		report.Results = append(report.Results, c.checkResource(ctx, gvr)...)
	}
	report.Duration = clk.Since(report.Started).String()
	c.mu.Lock()
	c.last = &report
	c.mu.Unlock()
	return report
}

// storeCheck is one store to compare: its latest snapshot holds the state
// at every resourceVersion in [lo, hi] (the snapshot's own RV up to the
// store's progress).
type storeCheck struct {
	format wire.Format
	snap   *snapshot.Snapshot
	lo, hi uint64
}

// rvGroup is stores that one apiserver LIST at rv can check.
type rvGroup struct {
	rv     uint64
	checks []storeCheck
}

// groupByRV groups stores so that each group's snapshots hold their state
// at one common resourceVersion, the newest possible; one apiserver LIST
// then checks the whole group. Formats of a quiet resource share one LIST.
func groupByRV(checks []storeCheck) []rvGroup {
	// Sorting by hi and stabbing each group at its smallest hi is the
	// classic minimal cover of intervals by points.
	checks = slices.Clone(checks)
	slices.SortStableFunc(checks, func(a, b storeCheck) int { return cmp.Compare(a.hi, b.hi) })
	var groups []rvGroup
	for _, c := range checks {
		if n := len(groups); n > 0 && c.lo <= groups[n-1].rv {
			groups[n-1].checks = append(groups[n-1].checks, c)
			continue
		}
		groups = append(groups, rvGroup{rv: c.hi, checks: []storeCheck{c}})
	}
	return groups
}

// checkResource compares every synced store of gvr with the apiserver.
func (c *Checker) checkResource(ctx context.Context, gvr schema.GroupVersionResource) []Result {
	var checks []storeCheck
	for _, st := range c.cache.Stores(gvr) {
		checks = append(checks, storeCheck{format: st.Format, snap: st.Snapshot, lo: st.Snapshot.RV(), hi: st.Progress})
	}

	resource := gvr.GroupResource().String()
	var results []Result
	mismatch := false
	for _, g := range groupByRV(checks) {
		start := c.clock().Now()
		objects, err := c.listKeys(ctx, gvr, g.rv)
		if ctx.Err() != nil {
			break // abandoned, not inconclusive
		}
		c.cfg.Metrics.observeList(c.clock().Since(start))
		apiHash := ""
		if err == nil {
			apiHash = hashKeys(slices.Values(objects))
		}
		for _, sc := range g.checks {
			res := Result{
				Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Format: sc.format.String(),
				ResourceVersion: strconv.FormatUint(g.rv, 10),
				Objects:         sc.snap.Len(),
				SnapshotHash:    hashKeys(snapshotKeys(sc.snap)),
			}
			switch {
			case err != nil:
				res.Result, res.Error = Error, err.Error()
				klog.V(1).InfoS("Consistency check inconclusive", "resource", gvr.String(), "format", res.Format, "resourceVersion", g.rv, "err", err)
			case res.SnapshotHash == apiHash:
				res.Result, res.APIServerObjects, res.APIServerHash = Match, len(objects), apiHash
			default:
				res.Result, res.APIServerObjects, res.APIServerHash = Mismatch, len(objects), apiHash
				diff := diffKeys(slices.Collect(snapshotKeys(sc.snap)), objects, diffExamples)
				res.Diff = &diff
				mismatch = true
				klog.ErrorS(nil, "Snapshot differs from the apiserver; dropping the resource's stores to resync",
					"resource", gvr.String(), "format", res.Format, "resourceVersion", g.rv,
					"objects", res.Objects, "apiserverObjects", res.APIServerObjects, "diff", diff.String())
			}
			c.cfg.Metrics.observe(resource, res.Format, res.Result)
			results = append(results, res)
		}
	}
	if mismatch {
		c.cache.Drop(gvr, "consistency check: snapshot differs from the apiserver")
		for i := range results {
			results[i].Dropped = true
		}
	}
	slices.SortFunc(results, func(a, b Result) int { return cmp.Compare(a.Format, b.Format) })
	return results
}

// listKeys lists gvr's objects' keys and resourceVersions from the apiserver
// at exactly rv, as PartialObjectMetadata in protobuf (the cheapest form
// the apiserver serves for every resource, custom ones included), sorted by
// key.
func (c *Checker) listKeys(ctx context.Context, gvr schema.GroupVersionResource, rv uint64) ([]keyRV, error) {
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	want := strconv.FormatUint(rv, 10)
	limit := strconv.FormatInt(c.cfg.PageSize, 10)
	q := url.Values{"resourceVersion": {want}, "resourceVersionMatch": {"Exact"}, "limit": {limit}}
	var objects []keyRV
	for {
		// The apiserver refuses resourceVersion with continue: the token
		// carries it.
		env, err := c.listKeysPage(ctx, gvr, q, func(o keyRV) { objects = append(objects, o) })
		if err != nil {
			return nil, fmt.Errorf("list %s at resourceVersion %s: %w", gvr.GroupResource(), want, err)
		}
		if env.ListMeta.ResourceVersion != want {
			return nil, fmt.Errorf("list %s at resourceVersion %s: answered at %q", gvr.GroupResource(), want, env.ListMeta.ResourceVersion)
		}
		if env.ListMeta.Continue == "" {
			break
		}
		q = url.Values{"continue": {env.ListMeta.Continue}, "limit": {limit}}
	}
	sortKeys(objects)
	return objects, nil
}

// listKeysPage reads one page of PartialObjectMetadata in protobuf.
func (c *Checker) listKeysPage(ctx context.Context, gvr schema.GroupVersionResource, q url.Values, add func(keyRV)) (wire.ListEnvelope, error) {
	const format = wire.MetaProtobuf
	body, err := c.lister.List(ctx, gvr, format, q)
	if err != nil {
		return wire.ListEnvelope{}, err
	}
	defer body.Close()
	return wire.DecodeList(format, body, func(raw []byte) error {
		m, err := wire.ExtractMeta(format, raw)
		if err != nil {
			return err
		}
		rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
		if err != nil {
			return fmt.Errorf("object %s/%s: resourceVersion %q: %w", m.Namespace, m.Name, m.ResourceVersion, err)
		}
		add(keyRV{key: snapshot.ObjectKey(m.Namespace, m.Name), rv: rv})
		return nil
	})
}
