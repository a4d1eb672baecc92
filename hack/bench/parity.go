package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// The "parity" scenario asks whether listproxy is ever slower or costlier
// than the apiserver: for each kind of resource a client reads and each
// request shape it sends, the latency through listproxy against direct,
// side by side, while pods are written at BENCH_WRITE_RATE (so that the
// cluster's revision moves past every quiet resource's last change, as in a
// busy cluster), and what each side's requests cost kube-apiserver+etcd. It
// runs in the proof mode of the bench (BENCH_CONSISTENT_PROOF); run it in
// both.
//
// Beyond the LIST shapes (parityShapes) it measures a WATCH from a
// consistent LIST's resourceVersion (timed until the watch's response head
// arrives: the stream is open), a walk in pages of limit=500 (of all pods,
// and of one namespace's where they take more than a page: from 25,000
// pods), a GET and a PATCH of one
// podtemplate (which listproxy passes through) and, per resource that is
// written, the delay from a write to its event on a watch open on each side
// at once (the same writes, read by both: parityDelivery).
//
// CPU per cell. Requests alternate between the sides, one at a time, and
// each side's processes' CPU clocks are read around its own requests only
// (alternate's intervals): kube-apiserver+etcd for the direct requests; for
// those through listproxy, listproxy and, over the same intervals,
// kube-apiserver+etcd again (series.api: listproxy's freshness probes, what
// it passed through). The pause between requests is off the clock, so that
// neither side's interval holds idle time. The background writer runs
// through every interval of both sides alike and would be counted in each:
// before each resource's cells the processes' CPU rates are measured with
// the writer running and no request (parityBaseline; listproxy's following
// the writes is in its rate), and that rate times each interval's length is
// subtracted from it, as the idle rate is in the other scenarios. What is
// left is the requests' own cost in expectation, but the writes' CPU falls
// unevenly into intervals of a few milliseconds: the spread of each side's
// CPU per request (series.apiCalls) gives the noise of the difference
// (cpuNoise, three standard errors; about 2 ms per request for the small
// resources, see docs/bench.md). Work a request leaves behind (a
// collection after a large LIST) runs partly in the following pause, off
// both clocks, and partly in the next interval, whichever side's it is.
// Per cell: apiserver+etcd CPU through listproxy ≤ direct, and ≥ 20× lower
// for all pods, each missed only by more than the noise. The
// event-delivery cells have no per-side CPU: both watches are open at once
// and read the same writes. Listproxy's metrics also say what it sent
// upstream per client request in each cell (requests passed through,
// probes), a count without the writes' noise.
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
	// parityBaseline is how long the processes' CPU rates are measured with
	// the writer alone before each resource's cells.
	parityBaseline = 3 * time.Second
	// parityPageLimit is the page size of the walk shape.
	parityPageLimit = 500
	// parityLargeCPU is how many times less apiserver+etcd CPU a request
	// of a large resource (all pods) must cost through listproxy.
	parityLargeCPU = 20
	// parityDeliveryWait is how long the watches stay open after the last
	// write of a delivery cell, for its events.
	parityDeliveryWait = 2 * time.Second
	// parityLabel is the label the PATCH and delivery cells write.
	parityLabel = "bench.listproxy.io/parity"
)

// parityResource is a row group of the matrix: a collection path and what
// it is.
type parityResource struct {
	name string
	path string
	// get is one object's path, read as a GET passing through; "" for none.
	get string
	// patch is one object's path, patched (a label) through each side, as
	// a write passing through; "" for none.
	patch string
	// requests per side of each shape; 0 selects parityRequests.
	requests int
	// walk: the collection has more than one page of parityPageLimit.
	walk bool
	// large: held to parityLargeCPU.
	large bool
	// write changes one of the collection's objects (the i-th write of a
	// delivery cell) through the apiserver and returns its new
	// resourceVersion; writes names them. nil: no delivery cell.
	write  func(ctx context.Context, i int) (string, error)
	writes string
}

// parityShape is a request shape: how a client asks for the collection.
type parityShape struct {
	name   string
	query  string
	accept string
	// watchList: time until the watch-list's initial-events-end bookmark.
	watchList bool
	// watchFromList: a consistent LIST (JSON, not timed), then a watch
	// (query) from its resourceVersion, timed from sending the watch until
	// its response head arrived (the stream is open); then it is closed.
	watchFromList bool
	// walk: pages of parityPageLimit with continue tokens to the end,
	// timed per walk; only on resources with walk set.
	walk bool
}

var parityShapes = []parityShape{
	{name: "consistent LIST (JSON)", accept: acceptJSON},
	{name: "consistent LIST (protobuf)", accept: acceptProtobuf},
	{name: "kubectl get first page (Table)", query: "limit=500", accept: acceptTable},
	{name: "resourceVersion=0 LIST", query: "resourceVersion=0", accept: acceptJSON},
	{name: "watch-list to sync", query: "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30", accept: acceptJSON, watchList: true},
	// kubectl get -w, and informers without watch-lists.
	{name: "WATCH from the LIST's resourceVersion", query: "watch=true&allowWatchBookmarks=true", accept: acceptJSON, watchFromList: true},
	{name: fmt.Sprintf("paginated walk, limit=%d", parityPageLimit), query: fmt.Sprintf("limit=%d", parityPageLimit), accept: acceptJSON, walk: true},
}

func (b *bench) parity(ctx context.Context) error {
	if err := b.env.createParityTemplates(ctx); err != nil {
		return err
	}
	busy := b.env.pods[0].namespace
	var busyPods []podRef
	for _, p := range b.env.pods {
		if p.namespace == busy {
			busyPods = append(busyPods, p)
		}
	}
	// Each write sets a value never set before: a PATCH that changes
	// nothing is no write, and returns the object's last resourceVersion.
	begin := time.Now()
	writeTemplate := func(ctx context.Context, i int) (string, error) {
		return b.env.labelTemplate(ctx, fmt.Sprintf("t-%02d", i%parityTemplates), fmt.Sprintf("d-%d", time.Now().UnixNano()))
	}
	writePod := func(ctx context.Context, i int) (string, error) {
		return b.env.annotatePod(ctx, busyPods[i%len(busyPods)], fmt.Sprintf("d-%d", time.Now().UnixNano()))
	}
	resources := []parityResource{
		{name: fmt.Sprintf("quiet, %d objects (podtemplates)", parityTemplates), path: "/api/v1/namespaces/" + parityNamespace + "/podtemplates",
			get:   "/api/v1/namespaces/" + parityNamespace + "/podtemplates/t-00",
			patch: "/api/v1/namespaces/" + parityNamespace + "/podtemplates/t-01",
			write: writeTemplate, writes: "podtemplates' labels patched"},
		{name: "empty (limitranges)", path: "/api/v1/limitranges"},
		{name: "busy, one namespace of pods", path: "/api/v1/namespaces/" + busy + "/pods", walk: len(busyPods) > parityPageLimit,
			write: writePod, writes: "its pods' annotations patched"},
		{name: fmt.Sprintf("busy, all %d pods", len(b.env.pods)), path: "/api/v1/pods", requests: max(b.cfg.reps*2, 6), walk: true, large: true,
			write: writePod, writes: "pods of one namespace patched"},
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
	defer func() { b.background = nil }()
	if err := pause(ctx, 2*time.Second); err != nil { // reach the write rate
		return err
	}
	for _, r := range resources {
		// The writes' cost, subtracted from every interval of the
		// resource's cells (see the scenario's comment).
		rates := b.measureRates(ctx, parityBaseline)
		b.background = &rates
		logf("parity: %s: with the writes alone, apiserver+etcd %.3f, listproxy %.3f CPU-s/s (subtracted from its cells)", r.name, rates.direct, rates.proxied)
		for _, shape := range parityShapes {
			if shape.walk && !r.walk {
				continue
			}
			if err := b.parityCell(ctx, r, shape); err != nil {
				return err
			}
		}
		if r.get != "" {
			if err := b.parityPassThrough(ctx, r, "GET one object", func(string, int) request {
				return request{path: r.get, accept: acceptJSON}
			}); err != nil {
				return err
			}
		}
		if r.patch != "" {
			// A label set to a new value each time, so that no PATCH is a
			// no-op.
			if err := b.parityPassThrough(ctx, r, "PATCH one object's label", func(side string, i int) request {
				return request{path: r.patch, accept: acceptJSON, method: http.MethodPatch, contentType: "application/merge-patch+json",
					body: fmt.Sprintf(`{"metadata":{"labels":{%q:"p-%s-%d-%d"}}}`, parityLabel, side, begin.UnixNano(), i)}
			}); err != nil {
				return err
			}
		}
		if r.write != nil {
			if err := b.parityDelivery(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// cellSpec is what a cell of resource r is held to, besides its shape's
// own.
func (r parityResource) cellSpec(spec targetSpec) targetSpec {
	spec.APIServerCPUAtMostDirect = true
	if r.large {
		spec.APIServerCPU = parityLargeCPU
	}
	return spec
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
	before, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	d, p, err := b.alternate(ctx, n, func(ctx context.Context, s *series, i int) error {
		if err := s.pauseOffClock(ctx, parityGap); err != nil {
			return err
		}
		switch {
		case shape.walk:
			return walkPages(ctx, s, nil, r.path, parityPageLimit, false)
		case shape.watchFromList:
			return watchFromList(ctx, s, r.path, shape.query)
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
	after, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	ds, ps := d.side(n), p.side(n)
	spec := r.cellSpec(targetSpec{WallP99AddedMax: parityP99Added.Seconds(), WallP50AddedMax: parityP50Added.Seconds(), NoContentCheck: !check})
	note := parityNote(ds, ps) + "; " + parityCPUNote(ds, ps) + "; " + upstreamNote(before, after, n)
	if shape.watchFromList {
		note += "; the timed WATCH follows an untimed consistent LIST, whose CPU is in the cell's"
	}
	if shape.walk {
		note += fmt.Sprintf("; %.0f pages per walk; first/last page p50: apiserver %s / %s, listproxy %s / %s", float64(ps.Extra["pages_p50"]),
			ms(ds.Extra["first_page_s_p50"]), ms(ds.Extra["last_page_s_p50"]), ms(ps.Extra["first_page_s_p50"]), ms(ps.Extra["last_page_s_p50"]))
	}
	b.addRow(name, ds, ps, spec, note)
	return nil
}

// parityPassThrough measures requests that listproxy passes through: what
// (a GET of one object, a PATCH), the i-th request of side (a target's
// name) being req(side, i).
func (b *bench) parityPassThrough(ctx context.Context, r parityResource, what string, req func(side string, i int) request) error {
	name := fmt.Sprintf("parity (%s): %s, %s (passed through)", b.cfg.consistentProof, r.name, what)
	logf("scenario: %s (%d requests per side)", name, parityRequests)
	before, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	d, p, err := b.alternate(ctx, parityRequests, func(ctx context.Context, s *series, i int) error {
		if err := s.pauseOffClock(ctx, parityGap); err != nil {
			return err
		}
		res, err := s.t.do(ctx, req(s.t.name, i))
		if err != nil {
			return err
		}
		s.add(res, false)
		return nil
	})
	if err != nil {
		return err
	}
	after, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	ds, ps := d.side(parityRequests), p.side(parityRequests)
	spec := r.cellSpec(targetSpec{PassThrough: true, WallP99AddedMax: parityPassThroughAdded.Seconds()})
	b.addRow(name, ds, ps, spec, parityNote(ds, ps)+"; "+parityCPUNote(ds, ps)+"; "+upstreamNote(before, after, parityRequests))
	return nil
}

// parityDelivery measures how long r's writes take to reach a watch: a
// watch of r's collection opens on each side (from its own consistent
// LIST's resourceVersion, JSON), then parityRequests writes (r.write),
// parityGap apart, each read on both watches; per side, the delay from
// sending each write to reading its event. The two sides read the same
// writes, so their delays are compared write by write too. Every write's
// event must arrive on both within parityDeliveryWait of the last write.
func (b *bench) parityDelivery(ctx context.Context, r parityResource) error {
	n := parityRequests
	name := fmt.Sprintf("parity (%s): %s, watch event delivery (%s)", b.cfg.consistentProof, r.name, r.writes)
	logf("scenario: %s (%d writes, read on both sides)", name, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d, p := b.newSeries(b.env.direct), b.newSeries(b.env.proxied)
	arrivals := map[*series]*[]arrival{d: {}, p: {}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, s := range []*series{d, p} {
		rv, err := listRV(ctx, s.t, r.path+"?limit=1")
		if err != nil {
			return err
		}
		resp, err := openStream(ctx, s.t, r.path+"?watch=true&allowWatchBookmarks=true&resourceVersion="+rv)
		if err != nil {
			return err
		}
		s.answer(result{fromSnapshot: resp.Header.Get("X-Listproxy-Served-From") == "snapshot"})
		got := arrivals[s]
		wg.Go(func() {
			defer resp.Body.Close()
			dec := wire.NewWatchDecoder(wire.JSON, resp.Body, wire.WatchOptions{})
			for {
				ev, err := dec.Next()
				if err != nil {
					return
				}
				if ev.Type == wire.Modified {
					*got = append(*got, arrival{rv: ev.ResourceVersion, at: time.Now()})
				}
			}
		})
	}
	sent := map[string]time.Time{}
	var order []string
	for i := range n {
		if err := pause(ctx, parityGap); err != nil {
			return err
		}
		at := time.Now()
		rv, err := r.write(ctx, i)
		if err != nil {
			return fmt.Errorf("%s: write %d: %w", name, i, err)
		}
		sent[rv] = at
		order = append(order, rv)
	}
	if err := pause(ctx, parityDeliveryWait); err != nil {
		return err
	}
	cancel()
	wg.Wait()
	// Each side's delays in the order of the writes, and the difference
	// of the writes both read.
	delays := map[*series]map[string]float64{}
	for _, s := range []*series{d, p} {
		delays[s] = map[string]float64{}
		for _, a := range *arrivals[s] {
			if at, ok := sent[a.rv]; ok {
				delays[s][a.rv] = a.at.Sub(at).Seconds()
			}
		}
	}
	for _, rv := range order {
		dd, dok := delays[d][rv]
		pd, pok := delays[p][rv]
		if dok {
			d.durs = append(d.durs, dd)
		}
		if pok {
			p.durs = append(p.durs, pd)
		}
		if dok && pok {
			p.extra["added_s"] = append(p.extra["added_s"], pd-dd)
		}
	}
	ds, ps := d.side(n), p.side(n)
	note := parityNote(ds, ps) + fmt.Sprintf("; write by write, listproxy's delay minus direct's p50 %+.1f ms, p99 %+.1f ms",
		float64(ps.Extra["added_s_p50"])*1000, float64(ps.Extra["added_s_p99"])*1000) +
		"; CPU not attributed per side: both watches are open at once and read the same writes (through listproxy the apiserver serves no watch for it)"
	b.addRow(name, ds, ps, targetSpec{WallP99AddedMax: parityP99Added.Seconds(), WallP50AddedMax: parityP50Added.Seconds(), NoContentCheck: true}, note)
	row := &b.report.Rows[len(b.report.Rows)-1]
	row.Checks = append(row.Checks, check{
		Name: "events delivered", Want: "every write's, both sides", Got: num(len(d.durs) + len(p.durs)),
		Text: fmt.Sprintf("%d/%d direct, %d/%d through listproxy", len(d.durs), n, len(p.durs), n),
		Met:  len(d.durs) == n && len(p.durs) == n,
	})
	return nil
}

// watchFromList is one "kubectl get -w" on s's side: a consistent LIST of
// collection (JSON, its head kept for the resourceVersion), then a watch of
// collection (query) from that resourceVersion, timed from sending it until
// its response head arrived (the stream is open), then closed. Both
// answers count; the LIST is not timed.
func watchFromList(ctx context.Context, s *series, collection, query string) error {
	list, err := s.t.do(ctx, request{path: collection, accept: acceptJSON, head: 4 << 10})
	if err != nil {
		return err
	}
	s.answer(list)
	m, err := listMetadata(list.body)
	if err != nil {
		return fmt.Errorf("%s LIST %s: %w", s.t.name, collection, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := collection + "?" + query + "&resourceVersion=" + url.QueryEscape(m.ResourceVersion)
	begin := time.Now()
	resp, err := openStream(ctx, s.t, path)
	if err != nil {
		return err
	}
	res := result{status: resp.StatusCode, at: begin, dur: time.Since(begin), servedFrom: resp.Header.Get("X-Listproxy-Served-From")}
	res.fromSnapshot = res.servedFrom == "snapshot"
	resp.Body.Close()
	s.add(res, false)
	return nil
}

// pauseOffClock waits d, or until ctx ends, outside the series' CPU and
// wall accounting.
func (s *series) pauseOffClock(ctx context.Context, d time.Duration) error {
	var err error
	s.offClock(func() { err = pause(ctx, d) })
	return err
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

// parityCPUNote gives a cell's CPU per request, the writes' subtracted:
// kube-apiserver+etcd direct and through listproxy, net (below zero where
// the writes cost less than their rate predicted), with the noise of the
// difference (cpuNoise), and listproxy's own.
func parityCPUNote(d, p side) string {
	n := float64(max(1, p.Requests))
	return fmt.Sprintf("apiserver+etcd CPU per request %s direct, %s through listproxy, net of the writes (noise of the difference ±%s); listproxy's own %s",
		msSigned(d.APIServerCPUNet/n), msSigned(p.APIServerCPUNet/n), ms(cpuNoise(d, p)/n), ms(p.CPUPerRequest))
}

// upstreamNote says what listproxy sent upstream per client request
// between its metrics before and after a cell of n requests per side.
func upstreamNote(before, after framework.Metrics, n int) string {
	var parts []string
	for _, c := range []struct {
		what, metric string
		match        []string
	}{
		{"passed through", "listproxy_http_requests_total", []string{`source="apiserver"`}},
		{"apiserver probes", "listproxy_freshness_apiserver_probe_duration_seconds_count", nil},
		{"auxiliary watches", "listproxy_freshness_aux_watches_total", nil},
		{"etcd revision reads", "listproxy_freshness_probes_total", nil},
		{"etcd progress requests", "listproxy_freshness_progress_requests_total", nil},
	} {
		if got := delta(before, after, c.metric, c.match...); got > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", c.what, got/float64(n)))
		}
	}
	if len(parts) == 0 {
		return "listproxy sent nothing upstream meanwhile"
	}
	return "listproxy sent upstream per request meanwhile: " + strings.Join(parts, ", ")
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

// labelTemplate sets parityLabel of podtemplate name in parityNamespace to
// value through the apiserver and returns its new resourceVersion.
func (e *env) labelTemplate(ctx context.Context, name, value string) (string, error) {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, parityLabel, value)
	pt, err := e.client.CoreV1().PodTemplates(parityNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
	if err != nil {
		return "", err
	}
	return pt.ResourceVersion, nil
}

// annotatePod sets pod p's parityLabel annotation to value through the
// apiserver and returns its new resourceVersion.
func (e *env) annotatePod(ctx context.Context, p podRef, value string) (string, error) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, parityLabel, value)
	pod, err := e.client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
	if err != nil {
		return "", err
	}
	return pod.ResourceVersion, nil
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
