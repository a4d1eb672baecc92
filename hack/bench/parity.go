package main

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/wire"
)

// The "parity" scenario asks whether listproxy is ever slower than the
// apiserver: for each kind of resource a client reads and each request
// shape it sends, the latency through listproxy against direct, side by
// side, while pods are written at BENCH_WRITE_RATE (so that the cluster's
// revision moves past every quiet resource's last change, as in a busy
// cluster). It runs in the proof mode of the bench (BENCH_CONSISTENT_PROOF);
// run it in both.
const (
	parityNamespace = "bench-parity"
	parityTemplates = 50 // podtemplates: nothing else creates them
	// parityRequests is the requests per side of one cell.
	parityRequests = 40
	// parityP99Added and parityP50Added are how much slower than direct
	// listproxy may be, at p99 and p50.
	parityP99Added = 10 * time.Millisecond
	parityP50Added = 5 * time.Millisecond
	// parityPassThroughAdded is how much a request passed through may add
	// at p99.
	parityPassThroughAdded = time.Millisecond
	// parityGap separates requests, so that none finds the apiserver's
	// watch cache just advanced by the one before it: a consistent read
	// of a quiet resource waits there for the cache's next progress
	// notification, which the apiserver requests every 100 ms while reads
	// wait, and a read right after another's wait would not wait at all.
	parityGap = 150 * time.Millisecond
)

// parityResource is a row group of the matrix: a collection path and what
// it is.
type parityResource struct {
	name string
	path string
	// get is one object's path, read as a GET passing through; "" for none.
	get string
	// requests per side of each shape; 0 selects parityRequests.
	requests int
}

// parityShape is a request shape: how a client asks for the collection.
type parityShape struct {
	name   string
	query  string
	accept string
	// watchList: time until the watch-list's initial-events-end bookmark.
	watchList bool
}

var parityShapes = []parityShape{
	{name: "consistent LIST (JSON)", accept: acceptJSON},
	{name: "consistent LIST (protobuf)", accept: acceptProtobuf},
	{name: "kubectl get first page (Table)", query: "limit=500", accept: acceptTable},
	{name: "resourceVersion=0 LIST", query: "resourceVersion=0", accept: acceptJSON},
	{name: "watch-list to sync", query: "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30", accept: acceptJSON, watchList: true},
}

func (b *bench) parity(ctx context.Context) error {
	if err := b.env.createParityTemplates(ctx); err != nil {
		return err
	}
	busy := b.env.pods[0].namespace
	resources := []parityResource{
		{name: fmt.Sprintf("quiet, %d objects (podtemplates)", parityTemplates), path: "/api/v1/namespaces/" + parityNamespace + "/podtemplates",
			get: "/api/v1/namespaces/" + parityNamespace + "/podtemplates/t-00"},
		{name: "empty (limitranges)", path: "/api/v1/limitranges"},
		{name: "busy, one namespace of pods", path: "/api/v1/namespaces/" + busy + "/pods"},
		{name: fmt.Sprintf("busy, all %d pods", len(b.env.pods)), path: "/api/v1/pods", requests: max(b.cfg.reps*2, 6)},
	}
	// What a deployment has warm: every store read here, synced.
	for _, r := range resources {
		for _, accept := range []string{acceptJSON, acceptProtobuf, acceptTable} {
			if err := warmPath(ctx, b.env.proxied, r.path+"?resourceVersion=0", accept, b.env.listproxy.LogFile); err != nil {
				return err
			}
		}
	}
	w := b.env.startWriter(ctx, b.cfg.writeRate)
	defer w.stop()
	for _, r := range resources {
		for _, shape := range parityShapes {
			if err := b.parityCell(ctx, r, shape); err != nil {
				return err
			}
		}
		if r.get != "" {
			if err := b.parityPassThrough(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// parityCell measures one shape of one resource on both sides.
func (b *bench) parityCell(ctx context.Context, r parityResource, shape parityShape) error {
	name := fmt.Sprintf("parity (%s): %s, %s", b.cfg.consistentProof, r.name, shape.name)
	n := cmp.Or(r.requests, parityRequests)
	logf("scenario: %s (%d requests per side)", name, n)
	path := r.path
	if shape.query != "" {
		path += "?" + shape.query
	}
	// A consistent JSON LIST's content is compared with the apiserver's at
	// its resourceVersion; the other shapes' content is the business of
	// the other scenarios and the e2e tests.
	check := shape.query == "" && shape.accept == acceptJSON
	d, p, err := b.alternate(ctx, n, func(ctx context.Context, s *series, i int) error {
		if err := pause(ctx, parityGap); err != nil {
			return err
		}
		req := request{path: path, accept: shape.accept, keep: check && s.t.proxied && sampled(i, n)}
		var res result
		var err error
		if shape.watchList {
			res, err = s.t.watchListSync(ctx, req)
		} else {
			res, err = s.t.do(ctx, req)
		}
		if err != nil {
			return err
		}
		s.add(res, false)
		if check && sampled(i, n) {
			s.checkContent(ctx, b.env.direct, r.path, res)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ds, ps := d.side(n), p.side(n)
	spec := targetSpec{WallP99AddedMax: parityP99Added.Seconds(), WallP50AddedMax: parityP50Added.Seconds(), NoContentCheck: !check}
	b.addRow(name, ds, ps, spec, parityNote(ds, ps))
	return nil
}

// parityPassThrough measures a GET of one object, which listproxy passes
// through.
func (b *bench) parityPassThrough(ctx context.Context, r parityResource) error {
	name := fmt.Sprintf("parity (%s): %s, GET one object (passed through)", b.cfg.consistentProof, r.name)
	logf("scenario: %s (%d requests per side)", name, parityRequests)
	req := request{path: r.get, accept: acceptJSON}
	d, p, err := b.alternate(ctx, parityRequests, func(ctx context.Context, s *series, i int) error {
		if err := pause(ctx, parityGap); err != nil {
			return err
		}
		res, err := s.t.do(ctx, req)
		if err != nil {
			return err
		}
		s.add(res, false)
		return nil
	})
	if err != nil {
		return err
	}
	ds, ps := d.side(parityRequests), p.side(parityRequests)
	b.addRow(name, ds, ps, targetSpec{PassThrough: true, WallP99AddedMax: parityPassThroughAdded.Seconds()}, parityNote(ds, ps))
	return nil
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// parityNote says how much slower or faster listproxy was.
func parityNote(d, p side) string {
	return fmt.Sprintf("p50 %s vs %s direct (%+.1f ms), p99 %s vs %s direct (%+.1f ms)",
		ms(p.WallP50), ms(d.WallP50), (p.WallP50-d.WallP50)*1000, ms(p.WallP99), ms(d.WallP99), (p.WallP99-d.WallP99)*1000)
}

// watchListSync sends req, a JSON watch-list, and reads its events until
// the initial-events-end bookmark; the result's duration is the time to
// it, its bytes those read until then. The watch is then closed.
func (t *target) watchListSync(ctx context.Context, req request) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	resp, err := openStreamAs(ctx, t, req.path, req.accept)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, at: begin, servedFrom: resp.Header.Get("X-Listproxy-Served-From")}
	res.fromSnapshot = res.servedFrom == "snapshot"
	var read atomic.Int64
	d := wire.NewWatchDecoder(wire.JSON, countingBody{ReadCloser: resp.Body, n: &read}, wire.WatchOptions{})
	for {
		ev, err := d.Next()
		if err != nil {
			return res, fmt.Errorf("%s watch-list %s: ended before its initial-events-end bookmark: %w", t.name, req.path, err)
		}
		if ev.InitialEventsEnd {
			res.dur, res.bytes = time.Since(begin), read.Load()
			return res, nil
		}
	}
}

// createParityTemplates creates parityNamespace and its parityTemplates
// podtemplates (once per run).
func (e *env) createParityTemplates(ctx context.Context) error {
	if err := e.cp.CreateNamespace(ctx, parityNamespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := range parityTemplates {
		pt := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t-%02d", i)},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}},
			}},
		}
		if _, err := e.client.CoreV1().PodTemplates(parityNamespace).Create(ctx, pt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create podtemplate: %w", err)
		}
	}
	return nil
}
