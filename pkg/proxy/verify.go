package proxy

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// ConsistencyCheckConfig configures the comparison of snapshots with the
// apiserver (issue #8): each synced store's latest snapshot at resourceVersion
// R is compared, by its objects' keys and resourceVersions, with the
// apiserver's LIST at resourceVersion=R&resourceVersionMatch=Exact
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list).
// A mismatch drops the resource's stores, so that its next LIST passes
// through and starts a fresh store.
type ConsistencyCheckConfig struct {
	// Interval is the mean time between periodic checks of every synced
	// store; each wait is jittered by up to +20%. 0 disables periodic
	// checks; Lists.CheckConsistency still works on demand.
	Interval time.Duration
	// PageSize is the limit of each page of the apiserver LIST; 0 selects 500.
	PageSize int64
	// Timeout bounds one resource's apiserver LIST; 0 selects one minute.
	Timeout time.Duration
	// Metrics counts results; nil records nothing.
	Metrics *ConsistencyMetrics
	// Clock drives the periodic checks and times reports; nil selects the
	// real clock.
	Clock clock.Clock
}

// Results of comparing one store with the apiserver (the "result" label of
// listproxy_consistency_checks_total).
const (
	ConsistencyMatch    = "match"
	ConsistencyMismatch = "mismatch"
	// ConsistencyError: the apiserver could not be listed at the snapshot's
	// resourceVersion (410 Gone after compaction, a timeout, ...); nothing
	// is concluded and nothing is done.
	ConsistencyError = "error"
)

// diffExamples is how many keys of each kind of difference a result keeps.
const diffExamples = 5

// ConsistencyResult is the outcome of comparing one store (one resource in
// one format) with the apiserver.
type ConsistencyResult struct {
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
	// Result is ConsistencyMatch, ConsistencyMismatch or ConsistencyError.
	Result string `json:"result"`
	// Error says why the result is ConsistencyError.
	Error string `json:"error,omitempty"`
	// Diff is set for a mismatch.
	Diff *KeyDiff `json:"diff,omitempty"`
	// Dropped reports that a mismatch of this resource, in this or another
	// format, dropped all its stores.
	Dropped bool `json:"dropped,omitempty"`
}

// ConsistencyReport is one check of every synced store.
type ConsistencyReport struct {
	Started  time.Time           `json:"started"`
	Duration string              `json:"duration"`
	Results  []ConsistencyResult `json:"results"`
}

// verifyState is Lists' consistency-check state; its zero value is ready.
type verifyState struct {
	// run is held by a running check: checks run one at a time, and one
	// check compares one store at a time, to bound the apiserver's load.
	run sync.Mutex
	// mu guards last.
	mu   sync.Mutex
	last *ConsistencyReport
}

func (l *Lists) verifyClock() clock.Clock {
	if c := l.cfg.ConsistencyCheck.Clock; c != nil {
		return c
	}
	return clock.RealClock{}
}

// verifyLoop checks every synced store about every Interval until ctx is done.
func (l *Lists) verifyLoop(ctx context.Context) {
	clk := l.verifyClock()
	for {
		t := clk.NewTimer(wait.Jitter(l.cfg.ConsistencyCheck.Interval, 0.2))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		report := l.CheckConsistency(ctx)
		klog.V(2).InfoS("Consistency check done", "stores", len(report.Results), "duration", report.Duration)
	}
}

// LastConsistencyReport returns the report of the last CheckConsistency, if
// one ran.
func (l *Lists) LastConsistencyReport() (ConsistencyReport, bool) {
	l.verify.mu.Lock()
	defer l.verify.mu.Unlock()
	if l.verify.last == nil {
		return ConsistencyReport{}, false
	}
	return *l.verify.last, true
}

// CheckConsistency compares every synced store with the apiserver now, one
// store at a time (waiting for a check already running), and returns the
// results in resource and format order. A resource whose snapshot differs in
// any format has all its stores dropped. If ctx ends, the stores not yet
// checked are left out of the report.
func (l *Lists) CheckConsistency(ctx context.Context) ConsistencyReport {
	l.verify.run.Lock()
	defer l.verify.run.Unlock()
	clk := l.verifyClock()
	report := ConsistencyReport{Started: clk.Now(), Results: []ConsistencyResult{}}
	for _, gvr := range l.cachedResources() {
		if ctx.Err() != nil {
			break
		}
		report.Results = append(report.Results, l.checkResource(ctx, gvr)...)
	}
	report.Duration = clk.Since(report.Started).String()
	l.verify.mu.Lock()
	l.verify.last = &report
	l.verify.mu.Unlock()
	return report
}

// cachedResources returns the resources with stores, in a stable order.
func (l *Lists) cachedResources() []schema.GroupVersionResource {
	l.mu.RLock()
	var gvrs []schema.GroupVersionResource
	for k := range l.stores {
		if !slices.Contains(gvrs, k.gvr) {
			gvrs = append(gvrs, k.gvr)
		}
	}
	l.mu.RUnlock()
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int { return cmp.Compare(a.String(), b.String()) })
	return gvrs
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
func (l *Lists) checkResource(ctx context.Context, gvr schema.GroupVersionResource) []ConsistencyResult {
	var checks []storeCheck
	l.mu.RLock()
	for k, e := range l.stores {
		if k.gvr != gvr {
			continue
		}
		snap, progress, err := e.store.Latest()
		if err != nil {
			continue // not synced: nothing is served from it
		}
		checks = append(checks, storeCheck{format: k.format, snap: snap, lo: snap.RV(), hi: progress})
	}
	l.mu.RUnlock()

	resource := gvr.GroupResource().String()
	var results []ConsistencyResult
	mismatch := false
	for _, g := range groupByRV(checks) {
		start := l.verifyClock().Now()
		objects, err := l.listKeys(ctx, gvr, g.rv)
		if ctx.Err() != nil {
			break // abandoned, not inconclusive
		}
		l.cfg.ConsistencyCheck.Metrics.observeList(l.verifyClock().Since(start))
		apiHash := ""
		if err == nil {
			apiHash = hashKeys(slices.Values(objects))
		}
		for _, c := range g.checks {
			res := ConsistencyResult{
				Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Format: c.format.String(),
				ResourceVersion: strconv.FormatUint(g.rv, 10),
				Objects:         c.snap.Len(),
				SnapshotHash:    hashKeys(snapshotKeys(c.snap)),
			}
			switch {
			case err != nil:
				res.Result, res.Error = ConsistencyError, err.Error()
				klog.V(1).InfoS("Consistency check inconclusive", "resource", gvr.String(), "format", res.Format, "resourceVersion", g.rv, "err", err)
			case res.SnapshotHash == apiHash:
				res.Result, res.APIServerObjects, res.APIServerHash = ConsistencyMatch, len(objects), apiHash
			default:
				res.Result, res.APIServerObjects, res.APIServerHash = ConsistencyMismatch, len(objects), apiHash
				diff := diffKeys(slices.Collect(snapshotKeys(c.snap)), objects, diffExamples)
				res.Diff = &diff
				mismatch = true
				klog.ErrorS(nil, "Snapshot differs from the apiserver; dropping the resource's stores to resync",
					"resource", gvr.String(), "format", res.Format, "resourceVersion", g.rv,
					"objects", res.Objects, "apiserverObjects", res.APIServerObjects, "diff", diff.String())
			}
			l.cfg.ConsistencyCheck.Metrics.observe(resource, res.Format, res.Result)
			results = append(results, res)
		}
	}
	if mismatch {
		l.dropResource(gvr, "consistency check: snapshot differs from the apiserver")
		for i := range results {
			results[i].Dropped = true
		}
	}
	slices.SortFunc(results, func(a, b ConsistencyResult) int { return cmp.Compare(a.Format, b.Format) })
	return results
}

// dropResource drops every store of gvr; the next LIST of gvr passes through
// and starts a fresh store, which serves once it has synced.
func (l *Lists) dropResource(gvr schema.GroupVersionResource, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.stores {
		if k.gvr == gvr {
			l.dropLocked(k, e, why)
		}
	}
}

// listKeys lists gvr's objects' keys and resourceVersions from the apiserver
// at exactly rv, as PartialObjectMetadata in protobuf (the cheapest form
// the apiserver serves for every resource, custom ones included), sorted by
// key.
func (l *Lists) listKeys(ctx context.Context, gvr schema.GroupVersionResource, rv uint64) ([]keyRV, error) {
	cfg := l.cfg.ConsistencyCheck
	pageSize := cfg.PageSize
	if pageSize <= 0 {
		pageSize = 500
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	src := &apiSource{client: l.client, host: strings.TrimSuffix(l.cfg.Upstream.Host, "/"), path: collectionPath(gvr), format: wire.MetaProtobuf}
	want := strconv.FormatUint(rv, 10)
	limit := strconv.FormatInt(pageSize, 10)
	q := url.Values{"resourceVersion": {want}, "resourceVersionMatch": {"Exact"}, "limit": {limit}}
	var objects []keyRV
	for {
		// The apiserver refuses resourceVersion with continue: the token
		// carries it.
		env, err := listKeysPage(ctx, src, q, func(o keyRV) { objects = append(objects, o) })
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

func listKeysPage(ctx context.Context, src *apiSource, q url.Values, add func(keyRV)) (wire.ListEnvelope, error) {
	resp, err := src.do(ctx, q, src.format.ListAccept())
	if err != nil {
		return wire.ListEnvelope{}, err
	}
	defer resp.Body.Close()
	return wire.DecodeList(src.format, resp.Body, func(raw []byte) error {
		m, err := wire.ExtractMeta(src.format, raw)
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
