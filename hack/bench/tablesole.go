package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// A sole watch's cost per change. listproxy's Table feed is, in a cluster,
// usually the only Table watch of its resource, so the apiserver converts
// and encodes every change for it alone, as it does for a JSON watch that
// is alone. tableSoleWatchCost measures both per change: kube-apiserver
// CPU with one watch open against none, while the changes are written
// straight into etcd. The apiserver's watch cache sees them as it sees
// its own writes, and what it spends on a change besides the watch (the
// etcd event decoded, the watch cache updated) is small. The watch's own
// cost, its dispatch, conversion, encoding, flush and write and the
// garbage they leave, then stands out of the noise that writes through
// the API, several milliseconds of CPU each, make (tableFeedSlopes).
//
// What is left of the noise is the apiserver's garbage collection: a
// collection of its heap (the 30,000 pods among it) costs more than a
// phase's watch, and would fall in one phase or another. Each phase
// starts after a forced collection, so that its CPU is its own work and,
// where its garbage reaches the next collection within it, that
// collection.

const (
	// tableSoleWriteRate is the etcd writes a second of a sole-watch
	// phase, tableSoleSeconds how long each phase writes per cycle.
	tableSoleWriteRate = 400
	tableSoleSeconds   = 12
)

// etcdConfigMapFeed returns the configmaps of tableFeedNamespace as a
// feed resource whose writes change the first tableFeedWritten of them in
// etcd, and a function that closes its etcd client.
func (b *bench) etcdConfigMapFeed(ctx context.Context, configMaps feedResource) (feedResource, func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{b.env.cp.EtcdEndpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return feedResource{}, nil, fmt.Errorf("etcd client: %w", err)
	}
	keys := make([]string, tableFeedWritten)
	objects := make([]runtime.Object, tableFeedWritten)
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for i := range keys {
		keys[i] = fmt.Sprintf("/registry/configmaps/%s/feed-%04d", tableFeedNamespace, i)
		resp, err := cli.Get(ctx, keys[i])
		if err == nil && len(resp.Kvs) != 1 {
			err = fmt.Errorf("%d values", len(resp.Kvs))
		}
		if err != nil {
			_ = cli.Close()
			return feedResource{}, nil, fmt.Errorf("etcd get %s: %w", keys[i], err)
		}
		if objects[i], _, err = codec.Decode(resp.Kvs[0].Value, nil, nil); err != nil {
			_ = cli.Close()
			return feedResource{}, nil, fmt.Errorf("decode %s: %w", keys[i], err)
		}
	}
	write := func(ctx context.Context, d time.Duration) int {
		begin := time.Now()
		return paceWrites(ctx, tableSoleWriteRate, d, func(i int) bool {
			// A decoded object keeps its kind, which Encode writes.
			obj := objects[i%len(objects)].DeepCopyObject()
			acc, err := meta.Accessor(obj)
			if err != nil {
				return false
			}
			// Unique per run and write, so that every write is a change.
			acc.SetAnnotations(map[string]string{"bench.listproxy.io/etcd": fmt.Sprintf("%d-%d", begin.UnixNano(), i)})
			var buf bytes.Buffer
			if err := codec.Encode(obj, &buf); err != nil {
				return false
			}
			_, err = cli.Put(ctx, keys[i%len(keys)], buf.String())
			return err == nil
		})
	}
	r := feedResource{path: configMaps.path, includeObject: configMaps.includeObject, write: write}
	return r, func() { _ = cli.Close() }, nil
}

// tableSoleWatchCost measures, for r (written through etcd), kube-apiserver
// CPU per change with no watch, with one Table watch (includeObject as r's
// feed asks) and with one JSON watch, alternating in tableFeedCycles
// cycles of tableSoleSeconds each after one unmeasured cycle. It returns
// the measured phases and the cost of each sole watch per change.
func (b *bench) tableSoleWatchCost(ctx context.Context, feed, resource string, r feedResource) ([]*tableFeedPhase, feedSlope, error) {
	base := &tableFeedPhase{Name: fmt.Sprintf("%s, written in etcd: no watch of the harness's", resource)}
	table := &tableFeedPhase{Name: fmt.Sprintf("%s, written in etcd: + a sole Table watch (includeObject=%s)", resource, r.includeObject)}
	json := &tableFeedPhase{Name: fmt.Sprintf("%s, written in etcd: + a sole JSON watch (instead)", resource)}
	// tableFeedPhase writes for writes/BENCH_WRITE_RATE seconds.
	writes := tableSoleSeconds * b.cfg.writeRate
	// A first cycle is not measured: the first phase after writes through
	// the API cost more than the next ones (0.8–1.1 ms per change against
	// 0.25–0.33 ms, 2026-11-27).
	warm := []*tableFeedPhase{{Name: base.Name + " (warm-up)"}, {Name: table.Name + " (warm-up)"}, {Name: json.Name + " (warm-up)"}}
	for cycle := range 1 + tableFeedCycles {
		phases := []*tableFeedPhase{base, table, json}
		if cycle == 0 {
			phases = warm
		}
		for _, p := range []struct {
			phase  *tableFeedPhase
			accept string
			n      int
		}{{phases[0], "", 0}, {phases[1], acceptTable, 1}, {phases[2], acceptJSON, 1}} {
			if err := b.apiserverGC(ctx); err != nil {
				return nil, feedSlope{}, err
			}
			if err := b.tableFeedPhase(ctx, p.phase, r, p.accept, p.n, writes); err != nil {
				return nil, feedSlope{}, err
			}
		}
	}
	s := soleSlopeOf(feed, resource, base, table, json)
	logf("  %s feed (%s): per change to a sole watch at the apiserver: Table %s, JSON %s (%.2f×)", feed, resource, us(s.TablePerChange), us(s.JSONPerChange), float64(s.Ratio))
	return []*tableFeedPhase{base, table, json}, s, nil
}

// apiserverGC has kube-apiserver collect its garbage, through its heap
// profile (served with --profiling, its default).
func (b *bench) apiserverGC(ctx context.Context) error {
	res, err := b.env.direct.do(ctx, request{path: "/debug/pprof/heap?gc=1", accept: "*/*"})
	if err != nil {
		return fmt.Errorf("kube-apiserver heap profile: %w", err)
	}
	if res.status != http.StatusOK {
		return fmt.Errorf("kube-apiserver heap profile: status %d", res.status)
	}
	return nil
}

// soleSlopeOf is the cost per change of a sole Table and a sole JSON watch:
// the median of their phases' kube-apiserver CPU per write over the
// cycles, less the base's median. The median keeps one phase that a
// garbage collection or the machine's other work fell in from moving the
// result (it moved one run of 2026-11-27 from about 1.1× to 1.59×).
func soleSlopeOf(feed, resource string, base, table, json *tableFeedPhase) feedSlope {
	s := feedSlope{Feed: feed, Resource: resource, TableWatches: 1, JSONWatches: 1,
		TablePerChange: num(median(table.APIServerCPUPerWriteByCycle) - median(base.APIServerCPUPerWriteByCycle)),
		JSONPerChange:  num(median(json.APIServerCPUPerWriteByCycle) - median(base.APIServerCPUPerWriteByCycle)),
	}
	s.setRatio()
	return s
}
