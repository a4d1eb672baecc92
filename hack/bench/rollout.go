package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listproxy/listproxy/test/framework"
)

// The rolling-restart scenario's clients and replicas, and its target: the
// apiserver+etcd CPU during a rolling restart of the replicas is at most
// this share of what the same clients cost them directly over the same
// time.
const (
	rolloutReplicas  = 3
	rolloutInformers = 50
	rolloutWalkers   = 20
	rolloutTarget    = 0.10
)

// rolloutResult is the rolling-restart scenario's report.
type rolloutResult struct {
	Replicas  int `json:"replicas"`
	Informers int `json:"informers"`
	Walkers   int `json:"walkers"`
	// Seconds is the wall time of the rolling restart, over which both
	// sides' apiserver+etcd CPU is measured.
	Seconds num `json:"rollout_s"`
	// Per side ("apiserver": the clients direct; "listproxy": through the
	// replicas during the rollout).
	Sides  map[string]*rolloutSide `json:"sides"`
	Checks []check                 `json:"checks"`
}

type rolloutSide struct {
	// APIServerCPU is apiserver+etcd CPU seconds over the window, net of
	// their idle rate.
	APIServerCPU num `json:"apiserver_cpu_s"`
	Walks        int `json:"walks"`
	// WalkErrors counts walks cut short by an error answer or a broken
	// connection (the walker starts a new walk).
	WalkErrors int `json:"walk_errors"`
	// NotSnapshot counts pages not answered from a snapshot.
	NotSnapshot int `json:"not_from_snapshot,omitempty"`
}

// rollout is the "rolling restart" scenario (BENCH_SCENARIOS=rollout; it
// runs only when named): three listproxy replicas with --preload=pods behind
// a connection-level balancer (what a ClusterIP Service does), 50 pod
// informers with client defaults (watch-list) and 20 walkers walking pods
// in pages of 500 through it. Once the informers synced, every replica is
// restarted in turn (SIGTERM, drain, start, ready), and the apiserver+etcd
// CPU over that rollout is compared with what the same clients, synced and
// walking, cost the apiserver directly over the same wall time.
func (b *bench) rollout(ctx context.Context) error {
	logf("scenario: rolling restart of %d replicas under %d informers and %d walkers", rolloutReplicas, rolloutInformers, rolloutWalkers)
	res := &rolloutResult{Replicas: rolloutReplicas, Informers: rolloutInformers, Walkers: rolloutWalkers, Sides: map[string]*rolloutSide{}}
	b.report.Rollout = res

	dir := filepath.Join(b.cfg.out, "rollout")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := append(b.cfg.proofArgs(b.env.cp.EtcdEndpoint), "--resources=pods", "--preload=pods,pods/json",
		"--shutdown-delay=1s", "--shutdown-grace-period=10s")
	args = append(args, b.cfg.listproxyArgs...)
	rs, err := framework.StartReplicaSet(ctx, b.env.cp, dir, rolloutReplicas, args...)
	if err != nil {
		return err
	}
	defer func() {
		if err := rs.Stop(); err != nil {
			logf("stop replicas: %v", err)
		}
	}()
	through := newProxiedTarget(rs.Balancer.URL(), 0)

	var window time.Duration
	proxied, err := b.rolloutSide(ctx, through, func(api *sampler) error {
		api.startInterval()
		begin := time.Now()
		for i := range rs.Replicas {
			if err := rs.Terminate(ctx, i); err != nil {
				return err
			}
			if err := rs.Start(ctx, i); err != nil {
				return err
			}
			logf("  replica %d restarted", i)
		}
		window = time.Since(begin)
		api.endInterval()
		return nil
	})
	if err != nil {
		return err
	}
	res.Seconds = num(window.Seconds())
	res.Sides["listproxy"] = proxied
	logf("  through listproxy: rollout took %s; apiserver+etcd CPU %.1f s; %d walks, %d cut short", ms(window.Seconds()),
		float64(proxied.APIServerCPU), proxied.Walks, proxied.WalkErrors)

	direct, err := b.rolloutSide(ctx, b.env.direct, func(api *sampler) error {
		api.startInterval()
		defer api.endInterval()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
			return nil
		}
	})
	if err != nil {
		return err
	}
	res.Sides["apiserver"] = direct
	logf("  direct: apiserver+etcd CPU %.1f s over %s; %d walks, %d cut short", float64(direct.APIServerCPU), ms(window.Seconds()), direct.Walks, direct.WalkErrors)

	share := 0.0
	if direct.APIServerCPU > 0 {
		share = float64(proxied.APIServerCPU / direct.APIServerCPU)
	}
	res.Checks = []check{
		{Name: "apiserver+etcd CPU during the rollout", Want: fmt.Sprintf("≤ %.0f%% of the same clients direct", rolloutTarget*100), Got: num(share),
			Text: fmt.Sprintf("%.1f%% (%.1f s vs %.1f s)", share*100, float64(proxied.APIServerCPU), float64(direct.APIServerCPU)),
			Met:  direct.APIServerCPU > 0 && share <= rolloutTarget},
		{Name: "walk pages from snapshots", Want: "all", Got: num(proxied.NotSnapshot),
			Text: fmt.Sprintf("%d passed through", proxied.NotSnapshot), Met: proxied.NotSnapshot == 0},
	}
	return nil
}

// rolloutSide starts the informers and walkers against t, waits until the
// informers synced and every walker finished a walk, runs measure with a
// sampler of the apiserver's and etcd's CPU, and stops the clients.
func (b *bench) rolloutSide(ctx context.Context, t *target, measure func(api *sampler) error) (*rolloutSide, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	storm, err := b.env.storm(ctx, t, rolloutInformers, func(int) bool { return false })
	if err != nil {
		return nil, err
	}
	defer storm.close()

	var walks, walkErrors, notSnapshot atomic.Int64
	warm := make(chan struct{}, rolloutWalkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range rolloutWalkers {
		// One client per walker, as separate agents: its connection lands
		// on one replica, and on another after that one restarts.
		w := *t
		if t.proxied {
			w = *newProxiedTarget(t.base, 0)
		}
		wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				err := walkPods(ctx, &w, &notSnapshot)
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					walkErrors.Add(1)
				default:
					walks.Add(1)
				}
				if first {
					first = false
					warm <- struct{}{}
				}
			}
		})
	}
	for range rolloutWalkers {
		select {
		case <-warm:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	api := sampler{t: b.env.direct, idleRate: b.idleDirect}
	walksBefore, errorsBefore, notSnapshotBefore := walks.Load(), walkErrors.Load(), notSnapshot.Load()
	if err := measure(&api); err != nil {
		return nil, err
	}
	return &rolloutSide{
		APIServerCPU: num(api.seconds()),
		Walks:        int(walks.Load() - walksBefore),
		WalkErrors:   int(walkErrors.Load() - errorsBefore),
		NotSnapshot:  int(notSnapshot.Load() - notSnapshotBefore),
	}, nil
}

// walkPods walks every pod in pages of 500 (resourceVersion unset, as
// kubectl), counting pages a proxied target did not answer from a
// snapshot.
func walkPods(ctx context.Context, t *target, notSnapshot *atomic.Int64) error {
	const first = "/api/v1/pods?limit=500"
	cont := ""
	for {
		path := first
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		res, err := t.do(ctx, request{path: path, accept: acceptJSON, keep: true})
		if err != nil {
			return err
		}
		if t.proxied && !res.fromSnapshot {
			notSnapshot.Add(1)
		}
		if cont, err = listContinue(res.body); err != nil {
			return err
		}
		if cont == "" {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
