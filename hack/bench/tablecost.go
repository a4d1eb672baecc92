package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
)

// The Table scenario's cost measurements beyond its rows: what listproxy's
// Table store of pods holds against the rows it serves (tableMemory), and
// what one Table watch costs the apiserver per change against one JSON
// watch, for an Object feed (pods) and a Metadata feed (configmaps).

// tableMemoryMax is the target on a Table store's memory: at most 10%
// more than its payload (each row's cells and PartialObjectMetadata as the
// apiserver writes them).
const tableMemoryMax = 1.10

// Targets on one Table watch's apiserver CPU per change, against one JSON
// watch's: the Object feed (includeObject=Object) and the Metadata feed.
const (
	tableObjectFeedMax   = 5
	tableMetadataFeedMax = 1.5
)

// tableFeedNamespace holds the configmaps the Metadata feed's measurement
// lists by watch-lists (tableFeedConfigMaps of them) and writes (the
// first tableFeedWritten); nothing else in the bench watches configmaps
// while it runs.
const (
	tableFeedNamespace  = "bench-table-feed"
	tableFeedConfigMaps = 5000
	tableFeedWritten    = 100
)

// tableEncodeReps is how many watch-lists of each kind at least measure
// what a watcher that encodes its own events pays per event, and
// tableEncodeEvents how many initial events of each kind at least (up to
// tableEncodeMaxReps watch-lists): 5,000 configmaps cost the apiserver
// about 0.1 s of CPU per watch-list, close to the machine's noise.
const (
	tableEncodeReps    = 4
	tableEncodeEvents  = 100000
	tableEncodeMaxReps = 24
)

// tableMemoryResult is what listproxy's Table store of pods holds, against
// its payload.
type tableMemoryResult struct {
	// Rows, PayloadBytes: a walk of the apiserver's Table of pods
	// (includeObject=Metadata, kubectl's); the payload is the sum of each
	// row's JSON as the apiserver writes it: CellsBytes (the cells array)
	// plus ObjectBytes (the PartialObjectMetadata) plus the row's keys.
	Rows         int64 `json:"rows"`
	PayloadBytes int64 `json:"table_payload_bytes"`
	CellsBytes   int64 `json:"cells_bytes"`
	ObjectBytes  int64 `json:"object_bytes"`
	// Store*: listproxy's metrics of its Table store of pods once it
	// served a Table LIST without gzip, before any gzip response. StoreBytes
	// is listproxy_snapshot_bytes (the rows held); History and Feed bytes
	// are held besides. GzipBytes are the gzip row chunks cached after the
	// walks and the feed's writes (a cache, reported apart, not in the
	// ratios).
	StoreObjects int64 `json:"table_store_objects"`
	StoreBytes   int64 `json:"table_store_bytes"`
	HistoryBytes int64 `json:"table_store_history_bytes"`
	FeedBytes    int64 `json:"table_store_feed_bytes"`
	GzipBytes    int64 `json:"table_store_gzip_bytes"`
	// Heap*: listproxy's go_memstats_heap_alloc_bytes after a forced GC
	// (HeapForced; else its live heap estimated from the next GC's goal)
	// before the Table store started and once it was warm, and its RSS.
	HeapForced bool  `json:"heap_after_forced_gc"`
	HeapBefore int64 `json:"heap_before_bytes"`
	HeapAfter  int64 `json:"heap_after_bytes"`
	RSSBefore  int64 `json:"rss_before_bytes"`
	RSSAfter   int64 `json:"rss_after_bytes"`
	// HeapStoreBytes is the heap's growth: the store with every per-row
	// structure besides its bytes (no gzip chunk is cached yet).
	HeapStoreBytes int64 `json:"table_store_heap_bytes"`
	// Ratio is StoreBytes+HistoryBytes+FeedBytes per payload byte;
	// HeapRatio is HeapStoreBytes per payload byte.
	Ratio     num     `json:"table_store_bytes_per_payload_byte"`
	HeapRatio num     `json:"table_store_heap_bytes_per_payload_byte"`
	Checks    []check `json:"checks"`
}

// heapSample is listproxy's heap and RSS at one moment.
type heapSample struct {
	forced    bool
	heap, rss int64
}

// tableHeap forces two GCs in listproxy (through its pprof heap profile,
// served with --profiling; the second frees what the first left in
// sync.Pools' victim caches) and reads its heap and RSS. Without
// profiling, the heap is the live heap the last GC marked.
func (b *bench) tableHeap(ctx context.Context) (heapSample, error) {
	forced := true
	for range 2 {
		ok, err := b.forceGC(ctx)
		if err != nil {
			return heapSample{}, err
		}
		forced = forced && ok
	}
	m, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return heapSample{}, err
	}
	s := heapSample{forced: forced, rss: int64(m.Sum("process_resident_memory_bytes"))}
	if forced {
		s.heap = int64(m.Sum("go_memstats_heap_alloc_bytes"))
		return s, nil
	}
	gogc := 100.0
	if m.Has("go_gc_gogc_percent") {
		gogc = m.Sum("go_gc_gogc_percent")
	}
	s.heap = int64(m.Sum("go_memstats_next_gc_bytes") / (1 + gogc/100))
	return s, nil
}

// forceGC asks listproxy for its heap profile after a GC; it reports
// false when listproxy does not serve profiles.
func (b *bench) forceGC(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.env.proxied.base+"/debug/listproxy/pprof/heap?gc=1", nil)
	if err != nil {
		return false, err
	}
	resp, err := b.env.proxied.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("listproxy heap profile: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}

// tableMemory starts listproxy's Table store of pods with Table LISTs
// without gzip (so that no gzip row chunk is cached) until one is served
// from a snapshot, and measures what it holds (before: the heap before
// it started) against its payload, read by a walk of the apiserver's
// Table of pods.
func (b *bench) tableMemory(ctx context.Context, before heapSample) (*tableMemoryResult, error) {
	begin := time.Now()
	for {
		res, err := b.env.proxied.do(ctx, request{path: tablePath, accept: acceptTable})
		if err != nil {
			return nil, err
		}
		if res.fromSnapshot {
			break
		}
		if time.Since(begin) > 3*time.Minute {
			return nil, fmt.Errorf("the Table store of pods served no LIST within %s (last: %s)", time.Since(begin), res.servedFrom)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	logf("  Table store of pods: a Table LIST without gzip served from a snapshot after %s", ms(time.Since(begin).Seconds()))
	after, err := b.tableHeap(ctx)
	if err != nil {
		return nil, err
	}
	m, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return nil, err
	}
	store := []string{"resource=pods", "format=table"}
	r := &tableMemoryResult{
		StoreObjects: int64(m.Sum("listproxy_snapshot_objects", store...)),
		StoreBytes:   int64(m.Sum("listproxy_snapshot_bytes", store...)),
		HistoryBytes: int64(m.Sum("listproxy_snapshot_history_bytes", store...)),
		FeedBytes:    int64(m.Sum("listproxy_snapshot_feed_bytes", store...)),
		HeapForced:   before.forced && after.forced,
		HeapBefore:   before.heap, HeapAfter: after.heap,
		RSSBefore: before.rss, RSSAfter: after.rss,
	}
	cont := ""
	for {
		path := tablePath
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		res, err := b.env.direct.do(ctx, request{path: path, accept: acceptTable, keep: true})
		if err != nil {
			return nil, err
		}
		t, err := decodeTable(res)
		if err != nil {
			return nil, err
		}
		p, err := tablePayload(t.rows)
		if err != nil {
			return nil, fmt.Errorf("apiserver GET %s: %w", path, err)
		}
		r.Rows += p.rows
		r.PayloadBytes += p.bytes
		r.CellsBytes += p.cells
		r.ObjectBytes += p.object
		if cont = t.cont; cont == "" {
			break
		}
	}
	r.HeapStoreBytes = r.HeapAfter - r.HeapBefore
	r.Ratio, r.HeapRatio = tableMemoryRatios(r)
	r.Checks = []check{tableMemoryCheck(r)}
	logf("  Table store of pods: %d rows, table_store_bytes %s (+%s history, +%s feed), table_payload_bytes %s (%d rows; cells %s, objects %s): %.3f×; heap growth %s: %.3f× (GC forced: %t); RSS %s → %s",
		r.StoreObjects, mib1(r.StoreBytes), mib1(r.HistoryBytes), mib1(r.FeedBytes),
		mib1(r.PayloadBytes), r.Rows, mib1(r.CellsBytes), mib1(r.ObjectBytes), float64(r.Ratio),
		mib1(r.HeapStoreBytes), float64(r.HeapRatio), r.HeapForced, mib1(r.RSSBefore), mib1(r.RSSAfter))
	return r, nil
}

// tableGzipBytes reads the gzip row chunks the Table store of pods
// caches into r (the metric is updated when a change is published, so it
// is read after the feed's writes).
func (b *bench) tableGzipBytes(ctx context.Context, r *tableMemoryResult) error {
	m, err := scrape(ctx, b.env.proxied)
	if err != nil {
		return err
	}
	r.GzipBytes = int64(m.Sum("listproxy_snapshot_gzip_bytes", "resource=pods", "format=table"))
	logf("  Table store of pods: gzip row chunks %s (%s per row)", mib1(r.GzipBytes), bytesText(r.GzipBytes/max(1, r.StoreObjects)))
	return nil
}

// payload is the size of Table rows as the apiserver writes them.
type payload struct {
	rows                 int64
	bytes, cells, object int64
}

// tablePayload sums rows: each row's JSON, and the JSON of its cells and
// of its object.
func tablePayload(rows []json.RawMessage) (payload, error) {
	var p payload
	for i, raw := range rows {
		var r struct {
			Cells  json.RawMessage `json:"cells"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return payload{}, fmt.Errorf("row %d: %w", i, err)
		}
		if r.Cells == nil || r.Object == nil {
			return payload{}, fmt.Errorf("row %d: no cells or no object", i)
		}
		p.rows++
		p.bytes += int64(len(raw))
		p.cells += int64(len(r.Cells))
		p.object += int64(len(r.Object))
	}
	return p, nil
}

// tableMemoryRatios are what the store holds per payload byte, by its
// metrics (rows, history and feed) and by the heap's growth less its gzip
// chunks; 0 where the payload is 0.
func tableMemoryRatios(r *tableMemoryResult) (byMetrics, byHeap num) {
	if r.PayloadBytes <= 0 {
		return 0, 0
	}
	p := float64(r.PayloadBytes)
	return num(float64(r.StoreBytes+r.HistoryBytes+r.FeedBytes) / p), num(float64(r.HeapStoreBytes) / p)
}

// tableMemoryCheck holds the store's heap (its growth less gzip chunks)
// to tableMemoryMax of the payload: the metrics count the rows' bytes,
// not the structures each row keeps besides them.
func tableMemoryCheck(r *tableMemoryResult) check {
	c := check{Name: "Table store of pods: memory (heap growth as it filled) per payload byte (rows' cells + PartialObjectMetadata)",
		Want: fmt.Sprintf("≤ %.2f×", tableMemoryMax), Got: r.HeapRatio}
	switch {
	case r.PayloadBytes <= 0 || r.StoreObjects <= 0:
		c.Text = "not measured (no payload or no Table store)"
	case !r.HeapForced:
		c.Text = fmt.Sprintf("%.3f× (heap not measured after a forced GC: listproxy without --profiling); by the metrics %.3f×", float64(r.HeapRatio), float64(r.Ratio))
	default:
		c.Text = fmt.Sprintf("%s for %s (%.3f×); by the metrics %s (%.3f×)", mib1(r.HeapStoreBytes), mib1(r.PayloadBytes), float64(r.HeapRatio),
			mib1(r.StoreBytes+r.HistoryBytes+r.FeedBytes), float64(r.Ratio))
		c.Met = float64(r.HeapRatio) <= tableMemoryMax
	}
	return c
}

// feedResource is a resource the feed measurement writes and watches.
type feedResource struct {
	// path is the collection's path; includeObject what its Table feed
	// asks for (Object or Metadata).
	path, includeObject string
	// write sends writes at BENCH_WRITE_RATE for d and returns how many
	// succeeded.
	write func(ctx context.Context, d time.Duration) int
}

func (b *bench) podFeed() feedResource {
	return feedResource{path: "/api/v1/pods", includeObject: "Object", write: func(ctx context.Context, d time.Duration) int {
		sent, _ := b.writes(ctx, d, "table-feed")
		return len(sent)
	}}
}

// configMapFeed creates tableFeedNamespace's configmaps and returns the
// feed resource writing them.
func (b *bench) configMapFeed(ctx context.Context) (feedResource, error) {
	if err := b.env.cp.CreateNamespace(ctx, tableFeedNamespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		return feedResource{}, err
	}
	names := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range names {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("feed-%04d", i), Labels: map[string]string{"app": "bench-table-feed"}},
					Data: map[string]string{"n": fmt.Sprint(i), "config.yaml": "replicas: 3\nimage: registry.example/bench:1.0\n"}}
				if _, err := b.env.client.CoreV1().ConfigMaps(tableFeedNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("create configmap: %w", err)
					return
				}
			}
		})
	}
	begin := time.Now()
send:
	for i := range tableFeedConfigMaps {
		select {
		case names <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return feedResource{}, err
	}
	logf("  created %d configmaps in %s", tableFeedConfigMaps, ms(time.Since(begin).Seconds()))
	return feedResource{path: "/api/v1/configmaps", includeObject: "Metadata", write: b.configMapWrites}, nil
}

// configMapWrites patches tableFeedNamespace's configmaps at
// BENCH_WRITE_RATE for d and returns how many writes succeeded.
func (b *bench) configMapWrites(ctx context.Context, d time.Duration) int {
	begin := time.Now()
	return paceWrites(ctx, b.cfg.writeRate, d, func(i int) bool {
		name := fmt.Sprintf("feed-%04d", i%tableFeedWritten)
		patch := fmt.Sprintf(`{"data":{"w":"%d-%d"}}`, begin.UnixNano(), i)
		_, err := b.env.client.CoreV1().ConfigMaps(tableFeedNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
		return err == nil
	})
}

// feedSlope is one Table watch's apiserver CPU per change against one JSON
// watch's, for one feed.
type feedSlope struct {
	Feed         string `json:"feed"`
	Resource     string `json:"resource"`
	TableWatches int    `json:"table_watches"`
	JSONWatches  int    `json:"json_watches"`
	// TablePerChange and JSONPerChange are kube-apiserver CPU per write
	// and per watch: the phase with the watches less the phase without,
	// divided by the number of watches.
	TablePerChange num `json:"table_watch_cpu_s_per_change"`
	JSONPerChange  num `json:"json_watch_cpu_s_per_change"`
	// Ratio is TablePerChange / JSONPerChange; 0 when either is not above 0.
	Ratio num `json:"ratio"`
}

// slopeOf is the per-watch cost of the phases with Table and JSON watches
// over base, by kube-apiserver CPU per write.
func slopeOf(feed, resource string, base, tables, jsons *tableFeedPhase, nTable, nJSON int) feedSlope {
	s := feedSlope{Feed: feed, Resource: resource, TableWatches: nTable, JSONWatches: nJSON,
		TablePerChange: (tables.APIServerCPUPerWrite - base.APIServerCPUPerWrite) / num(nTable),
		JSONPerChange:  (jsons.APIServerCPUPerWrite - base.APIServerCPUPerWrite) / num(nJSON),
	}
	s.setRatio()
	return s
}

// setRatio sets s's ratio.
func (s *feedSlope) setRatio() {
	s.Ratio = 0
	if s.TablePerChange > 0 && s.JSONPerChange > 0 {
		s.Ratio = s.TablePerChange / s.JSONPerChange
	}
}

// feedSlopeCheck holds s's ratio to at most limit.
func feedSlopeCheck(s feedSlope, limit float64) check {
	c := check{Name: fmt.Sprintf("Table %s feed (%s, includeObject=%s) per change, one watch of %d", s.Feed, s.Resource, s.Feed, s.TableWatches),
		Want: fmt.Sprintf("≤ %g× one JSON watch's (of %d, encoding shared)", limit, s.JSONWatches), Got: s.Ratio}
	if s.TableWatches == 1 && s.JSONWatches == 1 {
		c.Name = fmt.Sprintf("Table %s feed (%s, includeObject=%s) per change, a sole watch (changes written in etcd)", s.Feed, s.Resource, s.Feed)
		c.Want = fmt.Sprintf("≤ %g× a sole JSON watch's", limit)
	}
	if s.Ratio <= 0 {
		c.Text = fmt.Sprintf("not measured (%s vs %s per change: not above the noise)", us(s.TablePerChange), us(s.JSONPerChange))
		return c
	}
	c.Text = fmt.Sprintf("%s vs %s (%.2f×)", us(s.TablePerChange), us(s.JSONPerChange), float64(s.Ratio))
	c.Met = float64(s.Ratio) <= limit
	return c
}

// tableFeedSlopes measures, for r, kube-apiserver CPU per write with no
// watch of the harness's (base, which may be given, and then is the first
// of the cycles' phases too), with tableFeedTableWatches Table watches
// (includeObject as r's feed asks) and with tableFeedJSONWatches JSON
// watches, alternating in tableFeedCycles cycles. It returns the phases
// it ran and the slope.
func (b *bench) tableFeedSlopes(ctx context.Context, feed, resource string, r feedResource, base *tableFeedPhase) ([]*tableFeedPhase, feedSlope, error) {
	var phases []*tableFeedPhase
	if base == nil {
		base = &tableFeedPhase{Name: fmt.Sprintf("%s: no watch of the harness's", resource)}
		phases = append(phases, base)
	}
	tables := &tableFeedPhase{Name: fmt.Sprintf("%s: + %d Table watches (includeObject=%s) at the apiserver", resource, tableFeedTableWatches, r.includeObject)}
	jsons := &tableFeedPhase{Name: fmt.Sprintf("%s: + %d JSON watches at the apiserver (instead of the Table watches)", resource, tableFeedJSONWatches)}
	phases = append(phases, tables, jsons)
	for range tableFeedCycles {
		for _, p := range []struct {
			phase  *tableFeedPhase
			accept string
			n      int
		}{{base, "", 0}, {tables, acceptTable, tableFeedTableWatches}, {jsons, acceptJSON, tableFeedJSONWatches}} {
			if err := b.tableFeedPhase(ctx, p.phase, r, p.accept, p.n, tableFeedWrites/tableFeedCycles); err != nil {
				return nil, feedSlope{}, err
			}
		}
	}
	s := slopeOf(feed, resource, base, tables, jsons, tableFeedTableWatches, tableFeedJSONWatches)
	logf("  %s feed (%s): per change and watch at the apiserver: Table %s, JSON %s (%.2f×)", feed, resource, us(s.TablePerChange), us(s.JSONPerChange), float64(s.Ratio))
	return phases, s, nil
}

// slopesMarkdown renders the feeds' per-watch costs.
func (t *tableResult) slopesMarkdown() string {
	if t.Feed == nil || len(t.Feed.Slopes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| Table feed | resource | kube-apiserver CPU per change, one Table watch | one JSON watch | table_*_feed_per_change / json_watch_per_change |\n")
	b.WriteString("|---|---|---:|---:|---:|\n")
	for _, s := range t.Feed.Slopes {
		fmt.Fprintf(&b, "| includeObject=%s | %s | %s (of %d) | %s (of %d) | %.2f× |\n", s.Feed, s.Resource,
			us(s.TablePerChange), s.TableWatches, us(s.JSONPerChange), s.JSONWatches, float64(s.Ratio))
	}
	b.WriteString("\nOne more watch's cost is its phase's kube-apiserver CPU per write less the phase without the harness's watches, divided by their number. The apiserver encodes each live event once per kind of watch (JSON; Table with the same includeObject) and every further watch of that kind writes the same bytes: these are marginal watches, a JSON and a Table one alike.\n\n")
	for _, s := range t.Feed.Sole {
		fmt.Fprintf(&b, "- includeObject=%s (%s): a sole watch per change written in etcd: Table %s vs JSON %s (%.2f×)\n",
			s.Feed, s.Resource, us(s.TablePerChange), us(s.JSONPerChange), float64(s.Ratio))
	}
	for _, c := range t.Feed.Encode {
		fmt.Fprintf(&b, "- includeObject=%s (%s): a watch that encodes its own events (a watch-list's %d initial events, %d watch-lists of each kind): Table %s vs JSON %s per event (%.2f×)\n",
			c.Feed, c.Resource, c.Objects, c.Lists, us(c.TablePerEvent), us(c.JSONPerEvent), float64(c.Ratio))
	}
	b.WriteString("\n")
	return b.String()
}

// memoryMarkdown renders the Table store's memory.
func (t *tableResult) memoryMarkdown() string {
	m := t.Memory
	if m == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("| Table store of pods | rows | bytes |\n|---|---:|---:|\n")
	for _, r := range []struct {
		name string
		rows int64
		n    int64
	}{
		{"table_payload_bytes: the apiserver's rows (includeObject=Metadata), cells + PartialObjectMetadata", m.Rows, m.PayloadBytes},
		{"… of which cells", m.Rows, m.CellsBytes},
		{"… of which PartialObjectMetadata", m.Rows, m.ObjectBytes},
		{"table_store_bytes (listproxy_snapshot_bytes)", m.StoreObjects, m.StoreBytes},
		{"history (listproxy_snapshot_history_bytes)", 0, m.HistoryBytes},
		{"feed (listproxy_snapshot_feed_bytes)", 0, m.FeedBytes},
		{"heap growth as the store filled (after forced GCs; no gzip row chunk yet)", 0, m.HeapStoreBytes},
		{"gzip row chunks after the walks and writes, a cache (listproxy_snapshot_gzip_bytes)", 0, m.GzipBytes},
		{"RSS growth", 0, m.RSSAfter - m.RSSBefore},
	} {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", r.name, r.rows, mib1(r.n))
	}
	fmt.Fprintf(&b, "\nPer payload byte: table_store_bytes (with history and feed) %.3f×, heap %.3f× (GC forced: %t).\n\n", float64(m.Ratio), float64(m.HeapRatio), m.HeapForced)
	return b.String()
}

// mib1 is n bytes in MiB with one decimal.
func mib1(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// countingWriter discards what is written to it and counts it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// us is seconds in microseconds with one decimal.
func us(v num) string { return fmt.Sprintf("%.1f µs", float64(v)*1e6) }

// encodeCost is what one watcher that encodes its own events costs the
// apiserver per event: a watch-list's initial events (sendInitialEvents)
// are encoded for each watch, where a live event's encoding is shared by
// every watch of the same kind (JSON, or Table with the same
// includeObject).
type encodeCost struct {
	Feed     string `json:"feed"`
	Resource string `json:"resource"`
	// Objects is the initial events per watch-list, Lists how many of
	// each kind were read.
	Objects int `json:"objects"`
	Lists   int `json:"lists"`
	// TablePerEvent and JSONPerEvent are kube-apiserver CPU per initial
	// event, net of idle.
	TablePerEvent num `json:"table_cpu_s_per_event"`
	JSONPerEvent  num `json:"json_cpu_s_per_event"`
	// Ratio is TablePerEvent / JSONPerEvent; 0 when either is not above 0.
	Ratio num `json:"ratio"`
}

// encodeRatio sets c's ratio.
func (c *encodeCost) encodeRatio() {
	c.Ratio = 0
	if c.TablePerEvent > 0 && c.JSONPerEvent > 0 {
		c.Ratio = c.TablePerEvent / c.JSONPerEvent
	}
}

// encodeCheck holds c's ratio to at most limit.
func encodeCheck(c encodeCost, limit float64) check {
	ch := check{Name: fmt.Sprintf("Table %s feed (%s, includeObject=%s) per event, encoded for the watch", c.Feed, c.Resource, c.Feed),
		Want: fmt.Sprintf("≤ %g× a JSON watch event encoded for the watch", limit), Got: c.Ratio}
	if c.Ratio <= 0 {
		ch.Text = fmt.Sprintf("not measured (%s vs %s per event)", us(c.TablePerEvent), us(c.JSONPerEvent))
		return ch
	}
	ch.Text = fmt.Sprintf("%s vs %s (%.2f×; %d watch-lists of %d objects each)", us(c.TablePerEvent), us(c.JSONPerEvent), float64(c.Ratio), c.Lists, c.Objects)
	ch.Met = float64(c.Ratio) <= limit
	return ch
}

// tableEncodeCost alternates tableEncodeReps watch-lists of r of each
// kind, JSON and Table (includeObject as r's feed asks), and measures
// kube-apiserver CPU per initial event.
func (b *bench) tableEncodeCost(ctx context.Context, feed, resource string, r feedResource) (encodeCost, error) {
	c := encodeCost{Feed: feed, Resource: resource}
	var cpu [2]float64
	var events [2]int
	for c.Lists < tableEncodeReps || (events[0] < tableEncodeEvents && c.Lists < tableEncodeMaxReps) {
		c.Lists++
		for i, accept := range []string{acceptJSON, acceptTable} {
			sec, n, err := b.watchListCPU(ctx, r, accept)
			if err != nil {
				return c, err
			}
			cpu[i] += sec
			events[i] += n
			c.Objects = n
		}
	}
	if events[0] == 0 || events[1] == 0 {
		return c, fmt.Errorf("%s watch-lists: no initial event", resource)
	}
	c.JSONPerEvent, c.TablePerEvent = num(cpu[0]/float64(events[0])), num(cpu[1]/float64(events[1]))
	c.encodeRatio()
	logf("  %s feed (%s): per initial event of a watch-list: Table %s, JSON %s (%.2f×, %d objects)", feed, resource, us(c.TablePerEvent), us(c.JSONPerEvent), float64(c.Ratio), c.Objects)
	return c, nil
}

// watchListCPU reads one watch-list of r asking for accept up to its
// initial events' end bookmark and returns kube-apiserver CPU meanwhile
// (settled, net of idle) and the initial events read.
func (b *bench) watchListCPU(ctx context.Context, r feedResource, accept string) (float64, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := r.path + "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=&timeoutSeconds=600"
	if accept == acceptTable {
		path += "&includeObject=" + r.includeObject
	}
	f := b.report.Table.Feed
	api := sampler{t: f.apiserver, idleRate: f.idleAPIServer}
	settle(ctx, b.idleDirect, b.env.direct)
	api.startInterval()
	resp, err := openStreamAs(ctx, b.env.direct, path, accept)
	if err != nil {
		return 0, 0, err
	}
	n, err := initialEvents(resp.Body)
	cancel()
	resp.Body.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("watch-list %s: %w", path, err)
	}
	settle(context.Background(), b.idleDirect, b.env.direct)
	api.endInterval()
	return api.seconds(), n, nil
}

// initialEvents reads a watch-list's events up to the bookmark that ends
// its initial events and returns how many came before it.
func initialEvents(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	n := 0
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return n, fmt.Errorf("after %d events: %w", n, err)
		}
		switch ev.Type {
		case "ADDED":
			n++
		case "BOOKMARK":
			if bytes.Contains(ev.Object, []byte(`"k8s.io/initial-events-end":"true"`)) {
				return n, nil
			}
		default:
			return n, fmt.Errorf("a %s event among the initial events", ev.Type)
		}
	}
}
