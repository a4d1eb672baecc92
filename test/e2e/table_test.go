package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/test/framework"
)

// The Table tests are the specification of Table LISTs, as `kubectl get`
// sends them: for the same request, listproxy's answer (status,
// Content-Type, inflated body) must equal the apiserver's byte for byte,
// and the answer comes from a snapshot exactly where a case's served-from
// column says so. Cells relative to the clock are equal when both answers
// were rendered within one wall-clock second (a pair of requests is
// repeated until it is); a cell relative to a time with a fraction of a
// second must be what the apiserver's formatter gives for an instant
// within its own request's window.

// expectTablesServed turns the served-from columns on: while false, every
// Table LIST must pass through (X-Listproxy-Served-From: apiserver), and
// the columns document what listproxy is to serve from snapshots. A
// mutant that serves nothing fails with it on.
const expectTablesServed = true

// Table media types: each group version alone, and what kubectl sends.
const (
	acceptTableV1      = "application/json;as=Table;v=v1;g=meta.k8s.io"
	acceptTableV1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
	acceptTableKubectl = acceptTableV1 + "," + acceptTableV1beta1 + ",application/json"
)

// maxPairAttempts bounds how often a pair of requests is repeated to get
// both answers within one wall-clock second and, where the answer's
// resourceVersion follows etcd's latest, at the same resourceVersion.
const maxPairAttempts = 10

// servedOn says on which apiserver minor releases a Table LIST of a
// resource is answered from a snapshot.
type servedOn func(minor int) bool

func allReleases(int) bool { return true }
func noRelease(int) bool   { return false }

func releasesBefore(m int) servedOn { return func(minor int) bool { return minor < m } }

// wantServedFrom is the X-Listproxy-Served-From a Table LIST must carry.
func wantServedFrom(snapshot servedOn, minor int) string {
	if expectTablesServed && snapshot(minor) {
		return "snapshot"
	}
	return "apiserver"
}

// clockCells names cells whose time has a fraction of a second: in the
// row whose Name cell is name, the cells of columns, relative to at.
type clockCells struct {
	name    string
	columns []string
	at      time.Time
}

// tableTarget is a collection the Table matrix lists.
type tableTarget struct {
	name string
	path string
	// snapshot is the served-from column: the releases on which its
	// Table LISTs are answered from a snapshot.
	snapshot servedOn
	labels   []string
	fields   []string
	// walkLabel, when set, is the label selector of limit 1 and 2
	// requests, to keep walks over many objects short.
	walkLabel string
	// full: every Accept × includeObject × limit, not a covering subset.
	full bool
	// fractional: cells compared by the window rule.
	fractional *clockCells
	// objectFields are field selectors on more than metadata of a resource
	// whose Table store holds rows with metadata only: they pass through.
	objectFields map[string]bool
}

func tableTargets(w tableWorld) []tableTarget {
	frac := &clockCells{name: fracEventName, columns: []string{"Last Seen", "First Seen"}, at: w.fracEventTime}
	return []tableTarget{
		{name: "pods", path: "/api/v1/pods", snapshot: allReleases, full: true,
			labels: []string{"", "app=web", "app in (web,db)", "!tier", "tier=be,app!=web"},
			fields: []string{"", "spec.nodeName=node-1", "spec.nodeName=", "metadata.namespace=" + tableNSB, "status.phase=Succeeded", "status.phase!=Running"}},
		{name: "pods_ns", path: "/api/v1/namespaces/" + tableNSA + "/pods", snapshot: allReleases,
			labels: []string{"", "app=web"}, fields: []string{"", "spec.nodeName=node-0", "status.phase=Running"}},
		{name: "jobs", path: "/apis/batch/v1/jobs", snapshot: allReleases, labels: []string{"", "app=job"}, fields: []string{"", "metadata.name=running"}},
		{name: "cronjobs", path: "/apis/batch/v1/namespaces/" + tableNSA + "/cronjobs", snapshot: allReleases, fields: []string{"", "metadata.name=hourly"}},
		{name: "events", path: "/api/v1/events", snapshot: allReleases, fractional: frac,
			fields: []string{"", "type=Warning", "involvedObject.kind=Pod", "metadata.namespace=" + tableNSB}},
		{name: "events_ns", path: "/api/v1/namespaces/" + tableNSB + "/events", snapshot: allReleases, fractional: frac},
		{name: "events.k8s.io", path: "/apis/events.k8s.io/v1/events", snapshot: allReleases, fractional: frac,
			fields: []string{"", "metadata.namespace=" + tableNSA}},
		{name: "gadgets", path: "/apis/demo.listproxy.io/v1/gadgets", snapshot: allReleases,
			labels: []string{"", "app=web"}, fields: []string{"", "metadata.namespace=" + tableNSA}},
		{name: "plainthings_ns", path: "/apis/demo.listproxy.io/v1/namespaces/" + tableNSA + "/plainthings", snapshot: allReleases},
		{name: "roles", path: "/apis/rbac.authorization.k8s.io/v1/roles", snapshot: allReleases, labels: []string{"", "tbl=yes"}},
		{name: "clusterroles", path: "/apis/rbac.authorization.k8s.io/v1/clusterroles", snapshot: allReleases, labels: []string{"", "idx!=1"}, walkLabel: "tbl=yes"},
		{name: "configmaps", path: "/api/v1/configmaps", snapshot: allReleases, labels: []string{"", "idx in (0,2)"}},
		{name: "namespaces", path: "/api/v1/namespaces", snapshot: allReleases, labels: []string{"", "team=1"}, fields: []string{"", "status.phase=Active"}, objectFields: map[string]bool{"status.phase=Active": true}},
		{name: "services", path: "/api/v1/services", snapshot: allReleases, fields: []string{"", "spec.type=ClusterIP"}, objectFields: map[string]bool{"spec.type=ClusterIP": true}},
		{name: "deployments", path: "/apis/apps/v1/deployments", snapshot: allReleases},
		// 1.37 marks the default class per page.
		{name: "storageclasses", path: "/apis/storage.k8s.io/v1/storageclasses", snapshot: releasesBefore(37)},
		// Rows re-sorted per page.
		{name: "flowschemas", path: "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", snapshot: noRelease},
		// A date column read outside .metadata.
		{name: "timers", path: "/apis/demo.listproxy.io/v1/timers", snapshot: noRelease},
	}
}

// tableRequest is one Table LIST of the matrix.
type tableRequest struct {
	accept  string
	include string // includeObject; "" unset
	limit   int
	mode    rvMode
	rv      string
	label   string
	field   string
	// gzip: the request says Accept-Encoding: gzip itself, so that a
	// gzipped answer is read as sent (tableGet).
	gzip bool
}

func (r tableRequest) String() string {
	return fmt.Sprintf("accept=%q includeObject=%q limit=%d resourceVersion=%v rv=%s label=%q field=%q gzip=%v", r.accept, r.include, r.limit, r.mode, r.rv, r.label, r.field, r.gzip)
}

func (r tableRequest) query() url.Values {
	q := url.Values{}
	if r.include != "" {
		q.Set("includeObject", r.include)
	}
	if r.limit > 0 {
		q.Set("limit", strconv.Itoa(r.limit))
	}
	if r.label != "" {
		q.Set("labelSelector", r.label)
	}
	if r.field != "" {
		q.Set("fieldSelector", r.field)
	}
	switch r.mode {
	case rvZero:
		q.Set("resourceVersion", "0")
	case rvNotOlderThan:
		q.Set("resourceVersion", r.rv)
		q.Set("resourceVersionMatch", "NotOlderThan")
	case rvExact:
		q.Set("resourceVersion", r.rv)
		q.Set("resourceVersionMatch", "Exact")
	case rvConsistent:
	}
	return q
}

// tableMatrix returns tg's requests: every limit × includeObject, with
// each Accept (all of them when tg.full), the resourceVersion modes and
// the selectors taken in turn.
func tableMatrix(tg tableTarget) []tableRequest {
	accepts := []string{acceptTableV1, acceptTableV1beta1, acceptTableKubectl}
	labels, fields := tg.labels, tg.fields
	if len(labels) == 0 {
		labels = []string{""}
	}
	if len(fields) == 0 {
		fields = []string{""}
	}
	var reqs []tableRequest
	for li, limit := range []int{0, 1, 2, 500} {
		for ii, include := range []string{"", "None", "Metadata"} {
			for ai, accept := range accepts {
				if !tg.full && ai != (li+ii)%len(accepts) {
					continue
				}
				k := len(reqs)
				r := tableRequest{accept: accept, include: include, limit: limit, mode: rvMode(k % int(numRVModes)),
					label: labels[k%len(labels)], field: fields[(k/2)%len(fields)]}
				if tg.walkLabel != "" && (limit == 1 || limit == 2) {
					r.label = tg.walkLabel
				}
				reqs = append(reqs, r)
			}
		}
	}
	return reqs
}

// tableAnswer is one answer and the window it was received in.
type tableAnswer struct {
	code     int
	header   http.Header
	body     []byte // inflated
	sent     time.Time
	received time.Time
}

// tableGet sends a GET with hdr (Accept, User-Agent, Accept-Encoding) and
// reads the whole answer. Without Accept-Encoding in hdr, net/http asks
// for gzip and inflates a gzipped body, dropping its Content-Encoding;
// with it, tableGet inflates a body of Content-Encoding gzip, which the
// header keeps.
func tableGet(ctx context.Context, c rawClient, path string, q url.Values, hdr http.Header) (tableAnswer, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return tableAnswer{}, err
	}
	req.Header.Set("User-Agent", "listproxy-e2e")
	for k, v := range hdr {
		req.Header[k] = v
	}
	a := tableAnswer{sent: time.Now()}
	resp, err := c.client.Do(req)
	if err != nil {
		return tableAnswer{}, err
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return tableAnswer{}, fmt.Errorf("gzipped body: %w", err)
		}
		body = zr
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(body); err != nil {
		return tableAnswer{}, err
	}
	a.received = time.Now()
	a.code, a.header, a.body = resp.StatusCode, resp.Header, buf.Bytes()
	return a, nil
}

// tableMeta is a Table's list metadata.
type tableMeta struct {
	Metadata struct {
		ResourceVersion    string `json:"resourceVersion"`
		Continue           string `json:"continue"`
		RemainingItemCount *int64 `json:"remainingItemCount"`
	} `json:"metadata"`
	ColumnDefinitions []struct {
		Name string `json:"name"`
	} `json:"columnDefinitions"`
}

// isTableList reports whether body is a Table LIST response in JSON.
func isTableList(body []byte) bool { return bytes.HasPrefix(body, []byte(`{"kind":"Table",`)) }

func equalCount(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func countString(n *int64) string {
	if n == nil {
		return "unset"
	}
	return strconv.FormatInt(*n, 10)
}

func decodeTableMeta(body []byte) tableMeta {
	var m tableMeta
	_ = json.Unmarshal(body, &m) // a body that is not a Table has none
	return m
}

// pairStats counts the work of the Table comparisons.
type pairStats struct {
	pairs, retries, pages, walks, windowChecks int
	// gzipped counts the pages both sides gzipped.
	gzipped int
}

// tablePair sends the same request to listproxy (query lq) and to the
// apiserver (aq), back to back, alternating which goes first, until both
// were answered within one wall-clock second with the same Date and, when
// sameRV, at the same resourceVersion; at most maxPairAttempts times. It
// returns the last pair and whether it was in one second.
func tablePair(ctx context.Context, lpc, apic rawClient, path string, lq, aq url.Values, hdr http.Header, sameRV bool, stats *pairStats) (lp, api tableAnswer, oneSecond bool, err error) {
	for attempt := range maxPairAttempts {
		stats.pairs++
		if attempt > 0 {
			stats.retries++
		}
		t0 := time.Now()
		if attempt%2 == 0 {
			if lp, err = tableGet(ctx, lpc, path, lq, hdr); err == nil {
				api, err = tableGet(ctx, apic, path, aq, hdr)
			}
		} else {
			if api, err = tableGet(ctx, apic, path, aq, hdr); err == nil {
				lp, err = tableGet(ctx, lpc, path, lq, hdr)
			}
		}
		t1 := time.Now()
		if err != nil {
			return lp, api, false, err
		}
		oneSecond = t0.Unix() == t1.Unix() && lp.header.Get("Date") == api.header.Get("Date")
		lrv, arv := decodeTableMeta(lp.body).Metadata.ResourceVersion, decodeTableMeta(api.body).Metadata.ResourceVersion
		if oneSecond && (!sameRV || lrv == arv) {
			return lp, api, true, nil
		}
		if sameRV && olderRV(lrv, arv) {
			// The apiserver's caches moved on without a change of the
			// resource (etcd's progress notifications after a write
			// elsewhere); listproxy's store moves on with a proven
			// consistent read. Both answers were valid; the next pair
			// is at one resourceVersion.
			if _, err := tableGet(ctx, lpc, path, url.Values{"limit": {"1"}}, nil); err != nil {
				return lp, api, false, err
			}
		}
	}
	return lp, api, oneSecond, nil
}

// olderRV reports whether resourceVersion a is below b (both numbers).
func olderRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// compareTable reports how listproxy's answer differs from the
// apiserver's: status, Content-Type, Content-Encoding and inflated body.
// Cells of frac are checked on each side by the window rule and then
// taken as equal; with ignoreMore the list metadata must only agree on the
// resourceVersion.
func compareTable(lp, api tableAnswer, frac *clockCells, ignoreMore bool, stats *pairStats) string {
	var diffs []string
	if lp.code != api.code {
		diffs = append(diffs, fmt.Sprintf("HTTP %d, apiserver %d", lp.code, api.code))
	}
	if got, want := lp.header.Get("Content-Type"), api.header.Get("Content-Type"); got != want {
		diffs = append(diffs, fmt.Sprintf("Content-Type %q, apiserver %q", got, want))
	}
	if got, want := lp.header.Get("Content-Encoding"), api.header.Get("Content-Encoding"); got != want {
		diffs = append(diffs, fmt.Sprintf("Content-Encoding %q, apiserver %q", got, want))
	}
	lpBody := lp.body
	// Continue tokens are each side's own (listproxy seals its own): their
	// presence is compared, and the apiserver's metadata is spliced in.
	if lp.code == http.StatusOK && api.code == http.StatusOK && isTableList(lp.body) && isTableList(api.body) {
		var d string
		lpBody, d = spliceTable(lp, api, frac, ignoreMore, stats)
		if d != "" {
			diffs = append(diffs, d)
		}
	}
	if d := firstDifference(lpBody, api.body); d != "" {
		diffs = append(diffs, d)
	}
	return strings.Join(diffs, "; ")
}

// spliceTable returns listproxy's body with the cells of frac and, with
// ignoreMore, the list metadata replaced by the apiserver's, after
// checking each side's cells by the window rule and that both metadata
// carry the same resourceVersion.
func spliceTable(lp, api tableAnswer, frac *clockCells, ignoreMore bool, stats *pairStats) ([]byte, string) {
	lpSpans, err := tableSpans(lp.body)
	if err != nil {
		return lp.body, fmt.Sprintf("listproxy body: %v", err)
	}
	apiSpans, err := tableSpans(api.body)
	if err != nil {
		return lp.body, fmt.Sprintf("apiserver body: %v", err)
	}
	type repl struct {
		at   span
		with []byte
	}
	var repls []repl
	var diffs []string
	lm, am := decodeTableMeta(lp.body).Metadata, decodeTableMeta(api.body).Metadata
	if lm.ResourceVersion != am.ResourceVersion {
		diffs = append(diffs, fmt.Sprintf("resourceVersion %s, apiserver %s", lm.ResourceVersion, am.ResourceVersion))
	}
	if !ignoreMore {
		if (lm.Continue == "") != (am.Continue == "") {
			diffs = append(diffs, fmt.Sprintf("continue present %v, apiserver %v", lm.Continue != "", am.Continue != ""))
		}
		if !equalCount(lm.RemainingItemCount, am.RemainingItemCount) {
			diffs = append(diffs, fmt.Sprintf("remainingItemCount %v, apiserver %v", countString(lm.RemainingItemCount), countString(am.RemainingItemCount)))
		}
	}
	repls = append(repls, repl{at: lpSpans.metadata, with: api.body[apiSpans.metadata.start:apiSpans.metadata.end]})
	if frac != nil {
		lpCells, err := fracCells(lp.body, lpSpans, frac)
		if err != nil {
			return lp.body, "listproxy body: " + err.Error()
		}
		apiCells, err := fracCells(api.body, apiSpans, frac)
		if err != nil {
			return lp.body, "apiserver body: " + err.Error()
		}
		for _, side := range []struct {
			who   string
			a     tableAnswer
			cells []fracCell
		}{{"listproxy", lp, lpCells}, {"apiserver", api, apiCells}} {
			for _, c := range side.cells {
				stats.windowChecks++
				got := string(side.a.body[c.at.start:c.at.end])
				if want := humanDurations(side.a.sent.Sub(frac.at), side.a.received.Sub(frac.at)); !want[got] {
					diffs = append(diffs, fmt.Sprintf("%s: %s cell %s of %s is none of %v, the durations since %s during its request", side.who, c.column, got, frac.name, keys(want), frac.at.Format(time.RFC3339Nano)))
				}
			}
		}
		if len(lpCells) == len(apiCells) {
			for i, c := range lpCells {
				repls = append(repls, repl{at: c.at, with: api.body[apiCells[i].at.start:apiCells[i].at.end]})
			}
		}
	}
	// Replace from the end, so that earlier spans stay valid.
	out := append([]byte(nil), lp.body...)
	for i := len(repls) - 1; i >= 0; i-- {
		r := repls[i]
		out = append(out[:r.at.start:r.at.start], append(append([]byte(nil), r.with...), out[r.at.end:]...)...)
	}
	return out, strings.Join(diffs, "; ")
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// humanDurations returns the cells the apiserver's formatter renders for
// every duration in [from, to] as JSON strings: duration.HumanDuration is
// constant between whole seconds, so the two ends and each whole second
// between them give all of them.
func humanDurations(from, to time.Duration) map[string]bool {
	cells := map[string]bool{}
	add := func(d time.Duration) {
		b, _ := json.Marshal(duration.HumanDuration(d))
		cells[string(b)] = true
	}
	add(from)
	add(to)
	for s := from.Truncate(time.Second); s <= to; s += time.Second {
		if s >= from {
			add(s)
		}
	}
	return cells
}

// span is a byte range of a body.
type span struct{ start, end int }

// tableLayout is where a Table body's metadata and each row's cells lie.
type tableLayout struct {
	metadata span
	cells    [][]span
}

// tableSpans finds the metadata and the cells of every row in a compact
// Table body.
func tableSpans(body []byte) (tableLayout, error) {
	var l tableLayout
	dec := json.NewDecoder(bytes.NewReader(body))
	value := func() (span, error) {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return span{}, err
		}
		end := int(dec.InputOffset())
		return span{end - len(raw), end}, nil
	}
	delim := func(want json.Delim) (bool, error) {
		tok, err := dec.Token()
		if err != nil {
			return false, err
		}
		if tok == nil {
			return false, nil
		}
		if tok != want {
			return false, fmt.Errorf("%v where %v was expected", tok, want)
		}
		return true, nil
	}
	if _, err := delim('{'); err != nil {
		return l, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return l, err
		}
		switch key {
		case "metadata":
			if l.metadata, err = value(); err != nil {
				return l, err
			}
		case "rows":
			if ok, err := delim('['); err != nil || !ok {
				if err != nil {
					return l, err
				}
				continue
			}
			for dec.More() {
				if _, err := delim('{'); err != nil {
					return l, err
				}
				var cells []span
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						return l, err
					}
					if k != "cells" {
						if _, err := value(); err != nil {
							return l, err
						}
						continue
					}
					if _, err := delim('['); err != nil {
						return l, err
					}
					for dec.More() {
						s, err := value()
						if err != nil {
							return l, err
						}
						cells = append(cells, s)
					}
					if _, err := delim(']'); err != nil {
						return l, err
					}
				}
				if _, err := delim('}'); err != nil {
					return l, err
				}
				l.cells = append(l.cells, cells)
			}
			if _, err := delim(']'); err != nil {
				return l, err
			}
		default:
			if _, err := value(); err != nil {
				return l, err
			}
		}
	}
	return l, nil
}

// fracCell is one cell of clockCells in a body.
type fracCell struct {
	at     span
	column string
}

// fracCells finds frac's cells in a Table body, in row order.
func fracCells(body []byte, l tableLayout, frac *clockCells) ([]fracCell, error) {
	cols := decodeTableMeta(body).ColumnDefinitions
	index := map[string]int{}
	for i, c := range cols {
		index[c.Name] = i
	}
	nameCol, ok := index["Name"]
	if !ok {
		return nil, fmt.Errorf("no Name column in %d columns", len(cols))
	}
	wantName, _ := json.Marshal(frac.name)
	var out []fracCell
	for _, row := range l.cells {
		if nameCol >= len(row) || !bytes.Equal(body[row[nameCol].start:row[nameCol].end], wantName) {
			continue
		}
		for _, col := range frac.columns {
			i, ok := index[col]
			if !ok || i >= len(row) {
				return nil, fmt.Errorf("no %s cell in the row of %s", col, frac.name)
			}
			out = append(out, fracCell{at: row[i], column: col})
		}
	}
	return out, nil
}

// firstDifference describes where two bodies first differ, or "".
func firstDifference(lp, api []byte) string {
	if bytes.Equal(lp, api) {
		return ""
	}
	i := 0
	for i < len(lp) && i < len(api) && lp[i] == api[i] {
		i++
	}
	from := max(0, i-80)
	return fmt.Sprintf("bodies differ at byte %d of %d (apiserver %d):\n  listproxy ...%.200q\n  apiserver ...%.200q", i, len(lp), len(api), lp[from:min(len(lp), i+120)], api[from:min(len(api), i+120)])
}

// checkTableRequest compares listproxy's answer to req with the
// apiserver's, page by page through a continue walk (each side with its
// own tokens), and checks the served-from column on every page. It
// returns the apiserver's resourceVersion.
func checkTableRequest(ctx context.Context, lpc, apic rawClient, tg tableTarget, req tableRequest, wantFrom string, stats *pairStats) (string, string) {
	hdr := http.Header{"Accept": {req.accept}}
	if req.gzip {
		hdr.Set("Accept-Encoding", "gzip")
	}
	q := req.query()
	// The watch cache answers latest reads of pods by spec.nodeName from
	// its index, where "more" means more matches; exact reads scan.
	ignoreMore := req.limit > 0 && req.mode != rvExact && strings.HasPrefix(req.field, "spec.nodeName=") && strings.Contains(tg.path, "/pods")
	// A field selector on metadata.namespace narrows only the first page
	// of a cluster-wide walk upstream.
	walk := !ignoreMore && !strings.HasPrefix(req.field, "metadata.namespace=")
	// Every mode but Exact answers at the latest resourceVersion each side
	// holds (RV=0: each side's cache), which a write anywhere in the
	// cluster (a lease) moves: the pair is repeated until both agree.
	sameRV := req.mode != rvExact
	lq, aq := q, q
	var rv string
	for page := 1; ; page++ {
		lp, api, oneSecond, err := tablePair(ctx, lpc, apic, tg.path, lq, aq, hdr, sameRV && page == 1, stats)
		if err != nil {
			return rv, fmt.Sprintf("page %d: %v", page, err)
		}
		stats.pages++
		if !oneSecond {
			return rv, fmt.Sprintf("page %d: no pair of answers within one wall-clock second in %d attempts", page, maxPairAttempts)
		}
		if got := lp.header.Get(headerServedFrom); got != wantFrom {
			return rv, fmt.Sprintf("page %d: %s %q, want %q", page, headerServedFrom, got, wantFrom)
		}
		if d := compareTable(lp, api, tg.fractional, ignoreMore, stats); d != "" {
			return rv, fmt.Sprintf("page %d: %s", page, d)
		}
		if lp.header.Get("Content-Encoding") == "gzip" {
			stats.gzipped++
		}
		if api.code != http.StatusOK {
			return rv, ""
		}
		lm, am := decodeTableMeta(lp.body).Metadata, decodeTableMeta(api.body).Metadata
		if page == 1 {
			rv = am.ResourceVersion
		}
		if !walk || lm.Continue == "" || am.Continue == "" {
			if page > 1 {
				stats.walks++
			}
			return rv, ""
		}
		next := func(token string) url.Values {
			n := url.Values{"continue": {token}, "limit": {strconv.Itoa(req.limit)}}
			for _, k := range []string{"labelSelector", "fieldSelector", "includeObject"} {
				if v := q.Get(k); v != "" {
					n.Set(k, v)
				}
			}
			return n
		}
		lq, aq = next(lm.Continue), next(am.Continue)
	}
}

// warmTables waits, when Table LISTs are expected from snapshots, until
// each target's first request is answered from one: stores start on
// first demand.
func warmTables(ctx context.Context, t *testing.T, lpc rawClient, tgts []tableTarget, minor int) {
	t.Helper()
	for _, tg := range tgts {
		if wantServedFrom(tg.snapshot, minor) != "snapshot" {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			a, err := tableGet(ctx, lpc, tg.path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}}, http.Header{"Accept": {acceptTableKubectl}})
			return err == nil && a.header.Get(headerServedFrom) == "snapshot", nil
		})
		if err != nil {
			t.Fatalf("Table LIST %s never answered from a snapshot: %v", tg.path, err)
		}
	}
}

// startTableListproxy starts listproxy for the Table tests: consistent
// reads are served once proven against etcd.
func startTableListproxy(t *testing.T, cp *framework.ControlPlane) *framework.Listproxy {
	t.Helper()
	return framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
}

// TestTableDifferential: Table LISTs of realistic objects through
// listproxy equal the apiserver's, across limits and continue walks,
// includeObject, both Table group versions and kubectl's Accept, the
// resourceVersion modes and selectors; empty lists keep the apiserver's
// "rows":[] or "rows":null; and what must pass through gets the
// apiserver's own answer. Nothing is written while it compares. (Pages
// above the gzip threshold: TestTableWatchDifferential, checkTableGzip.)
func TestTableDifferential(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	w := seedTableWorld(t, cp)
	lp := startTableListproxy(t, cp)
	lpc := newRawClient(t, lp.Config())
	apic := newRawClient(t, cp.AdminConfig)
	ctx := context.Background()
	tgts := tableTargets(w)
	warmTables(ctx, t, lpc, tgts, w.minor)

	var stats pairStats
	start := time.Now()
	t.Run("matrix", func(t *testing.T) {
		for _, tg := range tgts {
			t.Run(tg.name, func(t *testing.T) {
				wantFrom := wantServedFrom(tg.snapshot, w.minor)
				// N for resourceVersion=N: the apiserver's latest.
				_, _, body, err := apic.get(ctx, tg.path, url.Values{"limit": {"1"}}, acceptJSON)
				if err != nil {
					t.Fatal(err)
				}
				rv := decodeTableMeta(body).Metadata.ResourceVersion
				failures := 0
				for _, req := range tableMatrix(tg) {
					req.rv = rv
					want := wantFrom
					if tg.objectFields[req.field] {
						want = "apiserver"
					}
					got, failure := checkTableRequest(ctx, lpc, apic, tg, req, want, &stats)
					if failure != "" {
						t.Errorf("%s %s: %s", tg.path, req, failure)
						if failures++; failures == 5 {
							t.FailNow()
						}
					}
					if got != "" {
						rv = got
					}
				}
			})
		}
	})

	t.Run("empty", func(t *testing.T) {
		nothing := "tbl=none"
		for _, tc := range []struct {
			name     string
			path     string
			label    string
			snapshot servedOn
			wantRows string // the apiserver's, so that both forms are covered
		}{
			{name: "pods", path: "/api/v1/namespaces/" + tableEmptyNS + "/pods", snapshot: allReleases, wantRows: `"rows":[]`},
			{name: "jobs", path: "/apis/batch/v1/namespaces/" + tableEmptyNS + "/jobs", snapshot: allReleases, wantRows: `"rows":[]`},
			{name: "configmaps", path: "/api/v1/namespaces/" + tableEmptyNS + "/configmaps", snapshot: allReleases, wantRows: `"rows":[]`},
			{name: "gadgets", path: "/apis/demo.listproxy.io/v1/namespaces/" + tableEmptyNS + "/gadgets", snapshot: allReleases, wantRows: `"rows":[]`},
			{name: "plainthings selected", path: "/apis/demo.listproxy.io/v1/plainthings", label: nothing, snapshot: allReleases, wantRows: `"rows":[]`},
			{name: "roles", path: "/apis/rbac.authorization.k8s.io/v1/namespaces/" + tableEmptyNS + "/roles", snapshot: allReleases, wantRows: `"rows":null`},
			{name: "clusterroles selected", path: "/apis/rbac.authorization.k8s.io/v1/clusterroles", label: nothing, snapshot: allReleases, wantRows: `"rows":null`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, accept := range []string{acceptTableKubectl, acceptTableV1beta1} {
					for _, limit := range []int{0, 500} {
						req := tableRequest{accept: accept, limit: limit, mode: rvConsistent, label: tc.label}
						tg := tableTarget{path: tc.path}
						if _, failure := checkTableRequest(ctx, lpc, apic, tg, req, wantServedFrom(tc.snapshot, w.minor), &stats); failure != "" {
							t.Errorf("%s %s: %s", tc.path, req, failure)
						}
					}
				}
				a, err := tableGet(ctx, apic, tc.path, url.Values{"labelSelector": {tc.label}}, http.Header{"Accept": {acceptTableKubectl}})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(a.body, []byte(tc.wantRows)) {
					t.Errorf("apiserver's empty Table of %s has no %s: %.300s", tc.path, tc.wantRows, a.body)
				}
			})
		}
	})

	t.Run("passthrough", func(t *testing.T) {
		pods := "/api/v1/pods"
		_, _, body, err := apic.get(ctx, pods, url.Values{"limit": {"1"}}, acceptJSON)
		if err != nil {
			t.Fatal(err)
		}
		rv := decodeTableMeta(body).Metadata.ResourceVersion
		for _, tc := range []struct {
			name       string
			query      url.Values
			accept     string
			userAgent  string
			wantCode   int
			servedFrom string // the served-from column
		}{
			{name: "includeObject=Object", query: url.Values{"includeObject": {"Object"}, "limit": {"500"}}, accept: acceptTableKubectl, wantCode: http.StatusOK, servedFrom: "apiserver"},
			{name: "includeObject=Foo", query: url.Values{"includeObject": {"Foo"}}, accept: acceptTableV1, wantCode: http.StatusBadRequest, servedFrom: "apiserver"},
			{name: "yaml", query: url.Values{"limit": {"500"}}, accept: "application/yaml;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusOK, servedFrom: "apiserver"},
			{name: "protobuf", query: url.Values{"limit": {"500"}}, accept: "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusNotAcceptable, servedFrom: "apiserver"},
			{name: "pretty user agent", query: url.Values{"limit": {"500"}}, accept: acceptTableKubectl, userAgent: "curl/8.5.0", wantCode: http.StatusOK, servedFrom: "apiserver"},
			{name: "pretty=true", query: url.Values{"limit": {"500"}, "pretty": {"true"}}, accept: acceptTableKubectl, wantCode: http.StatusOK, servedFrom: "apiserver"},
			{name: "watch_served", query: url.Values{"watch": {"true"}, "resourceVersion": {rv}, "timeoutSeconds": {"1"}}, accept: acceptTableKubectl, wantCode: http.StatusOK, servedFrom: "snapshot"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hdr := http.Header{"Accept": {tc.accept}}
				if tc.userAgent != "" {
					hdr.Set("User-Agent", tc.userAgent)
				}
				var lp, api tableAnswer
				var err error
				if tc.query.Get("watch") != "" {
					// Both end after timeoutSeconds, with no event.
					if lp, err = tableGet(ctx, lpc, pods, tc.query, hdr); err == nil {
						api, err = tableGet(ctx, apic, pods, tc.query, hdr)
					}
				} else {
					// Passed through, both are the apiserver's consistent
					// reads: a write anywhere between them (a lease
					// renewal) moves the second one's resourceVersion, so
					// the pair is repeated until both are at one.
					var oneSecond bool
					lp, api, oneSecond, err = tablePair(ctx, lpc, apic, pods, tc.query, tc.query, hdr, true, &stats)
					if err == nil && !oneSecond {
						t.Fatalf("no pair of answers within one wall-clock second and at one resourceVersion in %d attempts", maxPairAttempts)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				if api.code != tc.wantCode {
					t.Errorf("apiserver HTTP %d, want %d: %.300s", api.code, tc.wantCode, api.body)
				}
				if got := lp.header.Get(headerServedFrom); got != tc.servedFrom {
					t.Errorf("%s %q, want %q", headerServedFrom, got, tc.servedFrom)
				}
				if tc.query.Get("watch") != "" {
					// Watches are compared event by event in
					// TestTableWatchDifferential; a bookmark's timing is
					// the apiserver's own.
					return
				}
				if d := compareTable(lp, api, nil, false, &stats); d != "" {
					t.Errorf("listproxy differs from the apiserver: %s", d)
				}
			})
		}
	})
	t.Logf("%d request pairs (%d repeated to fall within one second or at one resourceVersion), %d pages compared, %d walks, %d fractional cells checked by the window rule, in %v",
		stats.pairs, stats.retries, stats.pages, stats.walks, stats.windowChecks, time.Since(start).Round(time.Millisecond))
}
