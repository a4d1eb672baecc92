package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"
)

// acceptTable is the Accept header of `kubectl get`.
const acceptTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// podClockCells are the cells of a pod's Table row that are relative to
// the clock: RESTARTS ("N (Xm ago)") and AGE.
var podClockCells = []int{3, 4}

// gzipThreshold is the apiserver's: a response longer than this is
// gzipped for a client that accepts gzip.
const gzipThreshold = 128 << 10

// tablePath is `kubectl get pods -A`'s first page.
const tablePath = "/api/v1/pods?limit=500"

// tableFeedWrites is how many pod writes each phase of the feed
// measurement sends, at BENCH_WRITE_RATE.
const tableFeedWrites = 2000

// tableFeedTableWatches and tableFeedJSONWatches are how many watches of
// each kind the harness opens at the apiserver to measure what one costs
// per change (the slope), against the writes' own cost (7–12 ms of
// apiserver+etcd CPU per write at 1.37.2, varying by ±2 ms between 7 s
// intervals on the shared machine). One more watch, Table or JSON, costs
// a few microseconds: the apiserver encodes an event once for all the
// watches of one kind, so the slope stays near the noise there.
const (
	tableFeedTableWatches = 128
	tableFeedJSONWatches  = 256
)

// tableFeedCycles is how many times the phases after the Table store's
// start alternate, tableFeedWrites/tableFeedCycles writes each time.
const tableFeedCycles = 3

// tableResult is the Table scenario's report beyond its rows.
type tableResult struct {
	// Warmed says what was warmed before the Table rows were measured.
	Warmed string `json:"warmed"`
	// Pages compared byte for byte (both answers rendered in the same
	// wall-clock second) and with the clock cells masked (not).
	PagesSameSecond int              `json:"pages_compared_same_second"`
	PagesMasked     int              `json:"pages_compared_clock_cells_masked"`
	Feed            *tableFeedResult `json:"feed,omitempty"`
	// Memory is what the Table store of pods holds against its payload.
	Memory *tableMemoryResult `json:"memory,omitempty"`
}

// tableFeedResult is the apiserver's cost of listproxy's Table feed.
type tableFeedResult struct {
	Phases []tableFeedPhase `json:"phases"`
	// TablePerChange is apiserver+etcd CPU per pod write with listproxy's
	// Table store of pods running less the same without it.
	TablePerChange num `json:"table_store_cpu_s_per_change"`
	// TableWatchPerChange and JSONWatchPerChange are the Object feed's
	// slope (Slopes[0]): kube-apiserver CPU per pod write and per watch
	// opened by the harness at the apiserver, a Table watch with
	// includeObject=Object (what the feed asks for) and a JSON watch.
	TableWatchPerChange num `json:"table_watch_cpu_s_per_change"`
	JSONWatchPerChange  num `json:"json_watch_cpu_s_per_change"`
	// Slopes are one Table watch's kube-apiserver CPU per change against
	// one JSON watch's: the Object feed (pods) and the Metadata feed
	// (configmaps).
	Slopes []feedSlope `json:"slopes"`
	// Encode are the same for a watch that encodes its own events (a
	// watch-list's initial events): what listproxy's feed pays where it
	// is the only Table watch of its kind.
	Encode []encodeCost `json:"encode"`
	// Sole are a sole Table watch's kube-apiserver CPU per change against
	// a sole JSON watch's, with the changes written in etcd
	// (tableSoleWatchCost): the Metadata feed (configmaps).
	Sole   []feedSlope `json:"sole"`
	Checks []check     `json:"checks"`
	// apiserver is kube-apiserver alone (not etcd, which serves no watch
	// the harness opens), idleAPIServer its idle CPU rate.
	apiserver     *target
	idleAPIServer float64
}

type tableFeedPhase struct {
	Name      string `json:"name"`
	Writes    int    `json:"writes"`
	WriteRate num    `json:"writes_per_s"`
	// CPUSeconds and Seconds are the phase's apiserver+etcd CPU (net of
	// idle) and wall time, over all its intervals.
	CPUSeconds float64 `json:"apiserver_cpu_s"`
	Seconds    float64 `json:"wall_s"`
	// CPUPerWrite is kube-apiserver+etcd CPU per write, net of idle.
	CPUPerWrite num `json:"apiserver_cpu_s_per_write"`
	// APIServerCPUSeconds and APIServerCPUPerWrite are the same of
	// kube-apiserver alone.
	APIServerCPUSeconds  float64 `json:"kube_apiserver_cpu_s"`
	APIServerCPUPerWrite num     `json:"kube_apiserver_cpu_s_per_write"`
	// APIServerCPUPerWriteByCycle is the same for each interval.
	APIServerCPUPerWriteByCycle []float64 `json:"kube_apiserver_cpu_s_per_write_by_cycle"`
	// WatchBytes is what the harness's watches read in the measured
	// intervals; WatchBytesPerWrite per watch and write.
	WatchBytes         int64 `json:"watch_bytes"`
	WatchBytesPerWrite num   `json:"watch_bytes_per_watch_per_write"`
	watchWrites        int
}

// table is the `kubectl get` scenario: Table LISTs of pods as kubectl asks
// for them (acceptTable, Accept-Encoding: gzip as client-go's transport
// sends it, no includeObject, so rows carry PartialObjectMetadata).
//
//  1. tableFeedWrites pod writes at BENCH_WRITE_RATE with listproxy's JSON
//     and protobuf stores of pods only: the base of the Table store's cost.
//  2. The Table store's memory (tableMemory): it is started by Table LISTs
//     without gzip, and its heap compared with its payload.
//  3. Warm-up: Table LISTs of pods through listproxy until one is served
//     from a snapshot, then one walk on each side.
//  4. One more watch's cost per change (tableFeedSlopes), for pods and for
//     configmaps: with the Table store alone, with tableFeedTableWatches
//     Table watches and with tableFeedJSONWatches JSON watches opened by
//     the harness at the apiserver, alternating in tableFeedCycles cycles.
//  5. A sole watch's cost per change (tableSoleWatchCost), for
//     configmaps changed in etcd: with no watch of the harness's, one Table
//     watch or one JSON watch, alternating in tableFeedCycles cycles.
//  6. A watch's cost per event where it encodes its own
//     (tableEncodeCost): watch-lists' initial events, Table and JSON.
//  7. BENCH_REPS walks with limit=500 of every pod on each side,
//     alternating, and BENCH_REPS batches of first pages from
//     BENCH_CONCURRENCY clients.
//
// Sampled answers are compared with the apiserver's at the same
// resourceVersion: row by row, byte for byte where both were rendered in
// the same wall-clock second, else with the clock cells masked.
// Targets: listproxy's CPU ≤ 1/20 of the apiserver's for the walk and the
// batch, the batch's wall p99 ≥ 10× better, the Table store's heap ≤
// tableMemoryMax × its payload, a Table event encoded for its watch ≤
// tableObjectFeedMax × a JSON one for the Object feed, and a change to a
// sole Table watch ≤ tableMetadataFeedMax × one to a sole JSON watch for
// the Metadata feed (the flush and write a live change pays besides its
// encoding are the same for both, and a watch-list's initial events share
// theirs, so initial events overstate the ratio).
func (b *bench) table(ctx context.Context) error {
	res := &tableResult{Feed: &tableFeedResult{}}
	b.report.Table = res
	feed := res.Feed

	logf("scenario: kubectl get (Table): the feed's cost, %d writes per phase at %d/s", tableFeedWrites, b.cfg.writeRate)
	feed.apiserver = &target{name: "kube-apiserver", pids: controlPlanePIDs(b.env.cp, "kube-apiserver")}
	feed.idleAPIServer = measureIdle(ctx, feed.apiserver, 3*time.Second)
	pods := b.podFeed()
	without := &tableFeedPhase{Name: "pods: listproxy's JSON and protobuf stores of pods (before any Table request)"}
	if err := b.tableFeedPhase(ctx, without, pods, "", 0, tableFeedWrites); err != nil {
		return err
	}

	heap, err := b.tableHeap(ctx)
	if err != nil {
		return err
	}
	if res.Memory, err = b.tableMemory(ctx, heap); err != nil {
		return err
	}
	warmed, err := b.warmTable(ctx)
	if err != nil {
		return err
	}
	res.Warmed = warmed

	// The phases with watches alternate with the base in short cycles, so
	// that a drift of the apiserver's own cost falls on all three alike.
	with := &tableFeedPhase{Name: "pods: + listproxy's Table store of pods"}
	podPhases, objectSlope, err := b.tableFeedSlopes(ctx, "Object", "pods", pods, with)
	if err != nil {
		return err
	}
	configMaps, err := b.configMapFeed(ctx)
	if err != nil {
		return err
	}
	cmPhases, metadataSlope, err := b.tableFeedSlopes(ctx, "Metadata", "configmaps", configMaps, nil)
	if err != nil {
		return err
	}
	etcdConfigMaps, closeEtcd, err := b.etcdConfigMapFeed(ctx, configMaps)
	if err != nil {
		return err
	}
	solePhases, metadataSole, err := b.tableSoleWatchCost(ctx, "Metadata", "configmaps", etcdConfigMaps)
	closeEtcd()
	if err != nil {
		return err
	}
	objectEncode, err := b.tableEncodeCost(ctx, "Object", "pods", pods)
	if err != nil {
		return err
	}
	metadataEncode, err := b.tableEncodeCost(ctx, "Metadata", "configmaps", configMaps)
	if err != nil {
		return err
	}
	feed.Encode = []encodeCost{objectEncode, metadataEncode}
	if err := b.tableGzipBytes(ctx, res.Memory); err != nil {
		return err
	}
	feed.Phases = []tableFeedPhase{*without, *with}
	for _, p := range append(append(podPhases, cmPhases...), solePhases...) {
		feed.Phases = append(feed.Phases, *p)
	}
	feed.TablePerChange = with.CPUPerWrite - without.CPUPerWrite
	feed.TableWatchPerChange, feed.JSONWatchPerChange = objectSlope.TablePerChange, objectSlope.JSONPerChange
	feed.Slopes = []feedSlope{objectSlope, metadataSlope}
	feed.Sole = []feedSlope{metadataSole}
	feed.Checks = []check{encodeCheck(objectEncode, tableObjectFeedMax), feedSlopeCheck(metadataSole, tableMetadataFeedMax)}
	logf("  feed: Table store %s per change; per watch at the apiserver: Object feed %s vs JSON %s (%.2f×), Metadata feed %s vs JSON %s (%.2f×)",
		ms(float64(feed.TablePerChange)), us(objectSlope.TablePerChange), us(objectSlope.JSONPerChange), float64(objectSlope.Ratio),
		us(metadataSlope.TablePerChange), us(metadataSlope.JSONPerChange), float64(metadataSlope.Ratio))

	if err := b.tableWalks(ctx, res); err != nil {
		return err
	}
	return b.tableFirstPages(ctx, res)
}

// tableFeedPhase sends about writes writes of r at BENCH_WRITE_RATE with
// n watches of r asking for accept open at the apiserver (none when n is
// 0; a Table watch with r's includeObject), each read to its end, and adds
// them and kube-apiserver+etcd and kube-apiserver CPU meanwhile to p.
func (b *bench) tableFeedPhase(ctx context.Context, p *tableFeedPhase, r feedResource, accept string, n, writes int) error {
	read := &countingWriter{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if n > 0 {
		// The watches start at the resource's latest resourceVersion (a
		// consistent LIST): one of another resource may be older than
		// this resource's watch cache holds after many changes, and the
		// watch would end at once (410).
		rv, err := listRV(ctx, b.env.direct, r.path+"?limit=1")
		if err != nil {
			return err
		}
		path := r.path + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion=" + url.QueryEscape(rv)
		if accept == acceptTable {
			path += "&includeObject=" + r.includeObject
		}
		for range n {
			resp, err := openStreamAs(ctx, b.env.direct, path, accept)
			if err != nil {
				return err
			}
			wg.Go(func() {
				defer resp.Body.Close()
				_, _ = io.Copy(read, resp.Body)
			})
		}
	}
	f := b.report.Table.Feed
	cpu := sampler{t: b.env.direct, idleRate: b.idleDirect}
	api := sampler{t: f.apiserver, idleRate: f.idleAPIServer}
	settle(ctx, b.idleDirect, b.env.direct)
	read0 := read.n.Load()
	cpu.startInterval()
	api.startInterval()
	sent := r.write(ctx, time.Duration(writes)*time.Second/time.Duration(b.cfg.writeRate))
	settle(ctx, b.idleDirect, b.env.direct)
	cpu.endInterval()
	api.endInterval()
	if err := ctx.Err(); err != nil {
		return err
	}
	if sent == 0 {
		return errors.New("table feed: no write succeeded")
	}
	// Totals so far, per write: CPUSeconds and Seconds accumulate.
	p.CPUSeconds += cpu.seconds()
	p.APIServerCPUSeconds += api.seconds()
	p.Seconds += cpu.wall.Seconds()
	p.Writes += sent
	p.WriteRate = num(float64(p.Writes) / p.Seconds)
	p.CPUPerWrite = num(p.CPUSeconds / float64(p.Writes))
	p.APIServerCPUPerWrite = num(p.APIServerCPUSeconds / float64(p.Writes))
	p.APIServerCPUPerWriteByCycle = append(p.APIServerCPUPerWriteByCycle, api.seconds()/float64(sent))
	if n > 0 {
		p.WatchBytes += read.n.Load() - read0
		p.watchWrites += n * sent
		p.WatchBytesPerWrite = num(float64(p.WatchBytes) / float64(p.watchWrites))
	}
	logf("  writes with %s: %d, apiserver+etcd %s, kube-apiserver %s per write (%d writes in all, %s, %s per write; %.0f bytes read per watch and write)", p.Name, sent,
		ms(cpu.seconds()/float64(sent)), ms(api.seconds()/float64(sent)), p.Writes, ms(float64(p.CPUPerWrite)), ms(float64(p.APIServerCPUPerWrite)), float64(p.WatchBytesPerWrite))
	return nil
}

// warmTable lists pods as kubectl does through listproxy until the answer
// comes from a snapshot (the first starts the Table store), then walks
// them once on each side. A Table store that does not become ready is
// logged, not fatal: the scenario's answers then fail their snapshot
// check. It returns what it warmed, for the report.
func (b *bench) warmTable(ctx context.Context) (string, error) {
	begin := time.Now()
	deadline := begin.Add(3 * time.Minute)
	served := "served from a snapshot after %s"
	for {
		res, err := b.env.proxied.do(ctx, request{path: tablePath, accept: acceptTable, gzip: true})
		if err != nil {
			return "", err
		}
		if res.fromSnapshot {
			break
		}
		if time.Now().After(deadline) {
			served = "NOT served from a snapshot within %s (last: " + res.servedFrom + ")"
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	served = fmt.Sprintf(served, ms(time.Since(begin).Seconds()))
	for _, t := range []*target{b.env.direct, b.env.proxied} {
		s := b.newSeries(t)
		if err := b.tableWalkPages(ctx, s, false); err != nil {
			return "", err
		}
	}
	logf("  Table store of pods: Table LISTs %s; one walk on each side (%s in all)", served, ms(time.Since(begin).Seconds()))
	return fmt.Sprintf("listproxy's Table store of pods (Table LISTs through listproxy until one was served from a snapshot: %s), then one unmeasured walk on each side", served), nil
}

func (b *bench) tableWalks(ctx context.Context, res *tableResult) error {
	name := "kubectl get: Table walk, limit=500"
	logf("scenario: %s (%d reps)", name, b.cfg.reps)
	d, p, err := b.alternateSettled(ctx, b.cfg.reps, func(ctx context.Context, s *series, i int) error {
		// A sampled repetition through listproxy adds a checked walk,
		// wholly off the clock, before the measured one.
		if s.t.proxied && sampled(i, b.cfg.reps) {
			var err error
			s.offClock(func() { err = b.tableWalkPages(ctx, s, true) })
			if err != nil {
				return err
			}
		}
		return b.tableWalkPages(ctx, s, false)
	})
	if err != nil {
		return err
	}
	ds, ps := d.side(b.cfg.reps), p.side(b.cfg.reps)
	note := fmt.Sprintf("kubectl's Accept, Accept-Encoding: gzip; first/last page p50: apiserver %s / %s, listproxy %s / %s; etcd CPU per walk: direct %s, through listproxy %s",
		ms(ds.Extra["first_page_s_p50"]), ms(ds.Extra["last_page_s_p50"]),
		ms(ps.Extra["first_page_s_p50"]), ms(ps.Extra["last_page_s_p50"]),
		ms(ds.EtcdCPUTotal/float64(b.cfg.reps)), ms(ps.EtcdCPUTotal/float64(b.cfg.reps)))
	note += "; " + trailingNote(ds, ps) + "; warmed: " + res.Warmed
	b.addRow(name, ds, ps, targetSpec{CPU: 20}, note)
	return nil
}

// tableWalkPages walks the pods' Table in pages of 500, as `kubectl get
// pods -A` does. A measured walk records its wall time, bytes and first and
// last page times. A checked walk compares every page with the apiserver's
// at the same resourceVersion and records nothing else.
func (b *bench) tableWalkPages(ctx context.Context, s *series, check bool) error {
	begin := time.Now()
	var total int64
	var pages []float64
	cont, apiCont := "", ""
	for {
		path := tablePath
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		res, err := s.t.do(ctx, request{path: path, accept: acceptTable, gzip: true, keep: true})
		if err != nil {
			return err
		}
		pages = append(pages, res.dur.Seconds())
		total += res.bytes
		s.answer(res)
		s.checkGzip(res)
		if cont, err = tableContinue(res); err != nil {
			return err
		}
		if check {
			apiPath := tablePath + "&continue=" + url.QueryEscape(apiCont)
			if len(pages) == 1 {
				apiPath = ""
			}
			want, err := b.checkTable(ctx, res, apiPath)
			if err != nil {
				s.noteCheck(err)
				return nil // the walks diverged; compare no further
			}
			apiCont = want.cont
			if cont == "" {
				s.noteCheck(nil)
			}
		}
		if cont == "" {
			break
		}
	}
	if check {
		return nil
	}
	s.durs = append(s.durs, time.Since(begin).Seconds())
	s.bytes = append(s.bytes, total)
	s.extra["first_page_s"] = append(s.extra["first_page_s"], pages[0])
	s.extra["last_page_s"] = append(s.extra["last_page_s"], pages[len(pages)-1])
	s.extra["pages"] = append(s.extra["pages"], float64(len(pages)))
	return nil
}

// checkGzip counts an answer of listproxy's that the apiserver would have
// gzipped (longer than its threshold) but that was not.
func (s *series) checkGzip(res result) {
	if s.t.proxied && !res.gzipped && res.bytes > gzipThreshold {
		s.notGzip++
	}
}

func (b *bench) tableFirstPages(ctx context.Context, res *tableResult) error {
	const perClient = 10
	name := fmt.Sprintf("kubectl get: Table first page limit=500, %d clients", b.cfg.concurrency)
	logf("scenario: %s (%d batches of %d×%d per side)", name, b.cfg.reps, b.cfg.concurrency, perClient)
	req := request{path: tablePath, accept: acceptTable, gzip: true}
	var mu sync.Mutex
	d, p, err := b.alternateSettled(ctx, b.cfg.reps, func(ctx context.Context, s *series, _ int) error {
		var wg sync.WaitGroup
		errs := make(chan error, b.cfg.concurrency)
		// One answer per batch (client 0's first) is checked after it.
		var kept result
		for c := range b.cfg.concurrency {
			wg.Go(func() {
				for j := range perClient {
					req := req
					req.keep = s.t.proxied && c == 0 && j == 0
					res, err := s.t.do(ctx, req)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					s.add(res, false)
					s.checkGzip(res)
					if req.keep {
						kept = res
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if s.t.proxied {
			s.offClock(func() {
				_, err := b.checkTable(ctx, kept, "")
				s.noteCheck(err)
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := b.cfg.reps * b.cfg.concurrency * perClient
	note := fmt.Sprintf("kubectl's Accept, Accept-Encoding: gzip; %s; pages compared with the apiserver's byte for byte (same wall-clock second) %d, with RESTARTS and AGE masked %d (walks and batches)",
		trailingNote(d.side(n), p.side(n)), res.PagesSameSecond, res.PagesMasked)
	b.addRow(name, d.side(n), p.side(n), targetSpec{CPU: 20, WallP99: 10}, note)
	return nil
}

// tableView is what a Table answer says.
type tableView struct {
	kind, apiVersion string
	rv, cont         string
	remaining        *int64
	columns          json.RawMessage
	rows             []json.RawMessage
}

// gunzipped is res's body, gunzipped if it came gzipped.
func gunzipped(res result) ([]byte, error) {
	if !res.gzipped {
		return res.body, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(res.body))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return body, nil
}

func decodeTable(res result) (tableView, error) {
	body, err := gunzipped(res)
	if err != nil {
		return tableView{}, err
	}
	var t struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			ResourceVersion    string `json:"resourceVersion"`
			Continue           string `json:"continue"`
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		ColumnDefinitions json.RawMessage   `json:"columnDefinitions"`
		Rows              []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(body, &t); err != nil {
		return tableView{}, fmt.Errorf("decode table: %w", err)
	}
	if t.Kind != "Table" {
		return tableView{}, fmt.Errorf("decode table: kind %q, not Table", t.Kind)
	}
	return tableView{kind: t.Kind, apiVersion: t.APIVersion, rv: t.Metadata.ResourceVersion, cont: t.Metadata.Continue,
		remaining: t.Metadata.RemainingItemCount, columns: t.ColumnDefinitions, rows: t.Rows}, nil
}

// tableContinue reads metadata.continue from the head of a Table response
// without decoding its rows.
func tableContinue(res result) (string, error) {
	var r io.Reader = bytes.NewReader(res.body)
	if res.gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return "", fmt.Errorf("gunzip: %w", err)
		}
		r = zr
	}
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil {
		return "", fmt.Errorf("decode table head: %w", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("decode table head: %w", err)
		}
		if key == "metadata" {
			var m struct {
				Continue string `json:"continue"`
			}
			if err := dec.Decode(&m); err != nil {
				return "", fmt.Errorf("decode table metadata: %w", err)
			}
			return m.Continue, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", fmt.Errorf("decode table head: %w", err)
		}
	}
	return "", errors.New("table without metadata")
}

// checkTable compares listproxy's Table answer res with the apiserver's
// answer to apiPath, or, when apiPath is empty, to tablePath at res's
// resourceVersion exactly; it returns the apiserver's answer (whose
// continue token walks on). Rows are compared byte for byte when both
// answers were rendered in the same wall-clock second, else with the
// clock cells masked.
func (b *bench) checkTable(ctx context.Context, res result, apiPath string) (tableView, error) {
	got, err := decodeTable(res)
	if err != nil {
		return tableView{}, err
	}
	if apiPath == "" {
		apiPath = exactAt(tablePath, got.rv)
	}
	wres, err := b.env.direct.do(ctx, request{path: apiPath, accept: acceptTable, gzip: true, keep: true})
	if err != nil {
		return tableView{}, err
	}
	want, err := decodeTable(wres)
	if err != nil {
		return tableView{}, fmt.Errorf("apiserver GET %s: %w", apiPath, err)
	}
	same := sameSecond(res, wres)
	if same {
		b.report.Table.PagesSameSecond++
	} else {
		b.report.Table.PagesMasked++
	}
	return want, compareTables(apiPath, want, got, same)
}

// compareTables compares listproxy's Table got with the apiserver's want:
// the same kind, version, columns and rows, remainingItemCount, and a
// continue token exactly when the apiserver gives one. Rows are compared
// byte for byte when exact, else with podClockCells masked.
func compareTables(path string, want, got tableView, exact bool) error {
	switch {
	case want.apiVersion != got.apiVersion:
		return fmt.Errorf("GET %s: listproxy apiVersion %q, the apiserver %q", path, got.apiVersion, want.apiVersion)
	case !bytes.Equal(want.columns, got.columns):
		return fmt.Errorf("GET %s: listproxy's columnDefinitions differ from the apiserver's", path)
	case len(want.rows) != len(got.rows):
		return fmt.Errorf("GET %s: listproxy answered %d rows, the apiserver %d", path, len(got.rows), len(want.rows))
	case (want.cont == "") != (got.cont == ""):
		return fmt.Errorf("GET %s: listproxy continue %q, the apiserver %q", path, got.cont, want.cont)
	case !equalCount(want.remaining, got.remaining):
		return fmt.Errorf("GET %s: listproxy remainingItemCount %s, the apiserver %s", path, countText(got.remaining), countText(want.remaining))
	}
	for i := range want.rows {
		w, g := []byte(want.rows[i]), []byte(got.rows[i])
		if !exact {
			var err error
			if w, err = maskCells(w, podClockCells); err != nil {
				return fmt.Errorf("GET %s: apiserver's row %d: %w", path, i, err)
			}
			if g, err = maskCells(g, podClockCells); err != nil {
				return fmt.Errorf("GET %s: listproxy's row %d: %w", path, i, err)
			}
		}
		if !bytes.Equal(w, g) {
			return fmt.Errorf("GET %s: row %d differs from the apiserver's (clock cells masked: %t): listproxy %.300s, apiserver %.300s", path, i, !exact, g, w)
		}
	}
	return nil
}

// maskCells returns row (a Table row's JSON) with the cells at idx
// replaced by null, re-encoded (keys sorted, compact).
func maskCells(row []byte, idx []int) ([]byte, error) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(row, &r); err != nil {
		return nil, err
	}
	var cells []json.RawMessage
	if err := json.Unmarshal(r["cells"], &cells); err != nil {
		return nil, fmt.Errorf("cells: %w", err)
	}
	for _, i := range idx {
		if i < len(cells) {
			cells[i] = json.RawMessage("null")
		}
	}
	c, err := json.Marshal(cells)
	if err != nil {
		return nil, err
	}
	r["cells"] = c
	return json.Marshal(r)
}

// sameSecond reports whether a and b were both sent and read within one
// wall-clock second, so that each was rendered in it: their clock cells
// (seconds-resolution ages of whole-second timestamps) must be equal.
func sameSecond(a, b result) bool {
	s := a.at.Unix()
	for _, t := range []time.Time{a.at.Add(a.dur), b.at, b.at.Add(b.dur)} {
		if t.Unix() != s {
			return false
		}
	}
	return true
}

// tableMarkdown renders the Table scenario's feed measurement.
func (t *tableResult) markdown() string {
	f := t.Feed
	if f == nil || len(f.Phases) == 0 {
		return ""
	}
	var b bytes.Buffer
	b.WriteString("\n| kubectl get (Table): writes with | writes | writes/s (settling included) | apiserver+etcd CPU per write | kube-apiserver CPU per write | bytes read per watch and write |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, p := range f.Phases {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %.0f |\n", p.Name, p.Writes, float64(p.WriteRate), ms(float64(p.CPUPerWrite)), ms(float64(p.APIServerCPUPerWrite)), float64(p.WatchBytesPerWrite))
	}
	fmt.Fprintf(&b, "\nThe first phase ran before the Table store started; the others after, each resource's alternating in %d cycles. Per change: listproxy's Table store (second phase less the first, apiserver+etcd) %s. Warmed before the Table rows were measured: %s.\n\n",
		tableFeedCycles, ms(float64(f.TablePerChange)), t.Warmed)
	b.WriteString(t.slopesMarkdown())
	b.WriteString(t.memoryMarkdown())
	for _, ch := range f.Checks {
		fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
	}
	if m := t.Memory; m != nil {
		for _, ch := range m.Checks {
			fmt.Fprintf(&b, "- %s: %s (target %s) %s\n", ch.Name, ch.Text, ch.Want, mark(ch.Met))
		}
	}
	return b.String()
}
