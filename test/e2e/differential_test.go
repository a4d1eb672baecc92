package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// The differential test is the specification of listproxy's LIST
// semantics: for the same request at the same resourceVersion, listproxy's
// answer must equal the apiserver's, in all four resourceVersion modes
// (unset, i.e. consistent, proven against etcd; "0"; NotOlderThan; Exact),
// whether a snapshot answered or the request passed through. A consistent
// answer must also be at least as new as the apiserver's state when it was
// asked. Objects change while it runs.

const (
	acceptJSON      = "application/json"
	acceptProtobuf  = "application/vnd.kubernetes.protobuf"
	acceptMetaJSON  = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	acceptMetaProto = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)

var formatAccept = map[wire.Format]string{
	wire.JSON: acceptJSON, wire.Protobuf: acceptProtobuf, wire.MetaJSON: acceptMetaJSON, wire.MetaProtobuf: acceptMetaProto,
}

// target is a collection the test lists, with the selectors that make sense for it.
type target struct {
	name           string
	path           string
	custom         bool
	fieldSelectors []string
	// walkable field selectors; metadata.namespace narrows only first pages
	// upstream, so walks with it differ by design of the apiserver.
	noWalk map[string]bool
}

func targets(namespaces []string) []target {
	podFields := []string{"", "spec.nodeName=node-3", "spec.nodeName!=node-1", "status.phase=Pending", "metadata.name=pod-5", "metadata.namespace=" + namespaces[1], "spec.restartPolicy=Always", "spec.hostNetwork=false", "status.podIP=", "status.podIP!=10.0.0.1"}
	// status.podIP (kept with each entry, not interned): no pod has an
	// IP, so these select every pod, and a limit=1 walk of all of them
	// may outlast its pinned snapshot.
	noWalk := map[string]bool{"metadata.namespace=" + namespaces[1]: true, "status.podIP=": true, "status.podIP!=10.0.0.1": true}
	return []target{
		{name: "pods", path: "/api/v1/pods", fieldSelectors: podFields, noWalk: noWalk},
		{name: "pods_ns", path: "/api/v1/namespaces/" + namespaces[0] + "/pods", fieldSelectors: podFields},
		{name: "widgets", path: "/apis/demo.listproxy.io/v1/widgets", custom: true, fieldSelectors: []string{"", "spec.color=red", "spec.color!=blue", "metadata.name=widget-3", "metadata.namespace=" + namespaces[2]}, noWalk: map[string]bool{"metadata.namespace=" + namespaces[2]: true}},
		{name: "widgets_ns", path: "/apis/demo.listproxy.io/v1/namespaces/" + namespaces[1] + "/widgets", custom: true, fieldSelectors: []string{"", "spec.color=green", "metadata.name=widget-7"}},
		{name: "nodes", path: "/api/v1/nodes", fieldSelectors: []string{"", "spec.unschedulable=false", "metadata.name=node-4"}},
	}
}

var labelSelectors = []string{"", "", "app=a", "app in (a,b)", "app!=c", "tier", "!tier", "app=b,tier=x", "idx>5", "idx notin (1,2,3)"}

// rvMode is how a request sets resourceVersion.
type rvMode int

const (
	rvZero rvMode = iota
	rvNotOlderThan
	rvExact
	rvConsistent // resourceVersion unset
	numRVModes
)

var rvModeNames = [...]string{rvZero: "0", rvNotOlderThan: "NotOlderThan", rvExact: "Exact", rvConsistent: "unset"}

func (m rvMode) String() string { return rvModeNames[m] }

type request struct {
	target        target
	format        wire.Format
	labelSelector string
	fieldSelector string
	limit         int
	mode          rvMode
	rv            uint64
	walk          bool
}

func (r request) String() string {
	return fmt.Sprintf("%s %v label=%q field=%q limit=%d resourceVersion=%v rv=%d", r.target.path, r.format, r.labelSelector, r.fieldSelector, r.limit, r.mode, r.rv)
}

func (r request) query() url.Values {
	q := url.Values{}
	if r.labelSelector != "" {
		q.Set("labelSelector", r.labelSelector)
	}
	if r.fieldSelector != "" {
		q.Set("fieldSelector", r.fieldSelector)
	}
	if r.limit > 0 {
		q.Set("limit", strconv.Itoa(r.limit))
	}
	switch r.mode {
	case rvZero:
		q.Set("resourceVersion", "0")
	case rvNotOlderThan:
		q.Set("resourceVersion", strconv.FormatUint(r.rv, 10))
		q.Set("resourceVersionMatch", "NotOlderThan")
	case rvExact:
		q.Set("resourceVersion", strconv.FormatUint(r.rv, 10))
		q.Set("resourceVersionMatch", "Exact")
	case rvConsistent:
	}
	return q
}

// page is one decoded list response.
type page struct {
	env   wire.ListEnvelope
	items [][]byte
}

func decodePage(format wire.Format, body []byte) (page, error) {
	var p page
	env, err := wire.DecodeList(format, bytes.NewReader(body), func(raw []byte) error {
		p.items = append(p.items, append([]byte(nil), raw...))
		return nil
	})
	p.env = env
	return p, err
}

// comparePages reports how listproxy's page differs from the apiserver's.
// Continue tokens differ in form by design; their presence must agree unless
// ignoreMore is set.
func comparePages(lp, api page, ignoreMore bool) string {
	var diffs []string
	if lp.env.APIVersion != api.env.APIVersion || lp.env.Kind != api.env.Kind {
		diffs = append(diffs, fmt.Sprintf("type %s %s, apiserver %s %s", lp.env.APIVersion, lp.env.Kind, api.env.APIVersion, api.env.Kind))
	}
	if lp.env.ListMeta.ResourceVersion != api.env.ListMeta.ResourceVersion {
		diffs = append(diffs, fmt.Sprintf("resourceVersion %s, apiserver %s", lp.env.ListMeta.ResourceVersion, api.env.ListMeta.ResourceVersion))
	}
	if !ignoreMore && (lp.env.ListMeta.Continue == "") != (api.env.ListMeta.Continue == "") {
		diffs = append(diffs, fmt.Sprintf("continue present %v, apiserver %v", lp.env.ListMeta.Continue != "", api.env.ListMeta.Continue != ""))
	}
	if !ignoreMore && fmtCount(lp.env.ListMeta.RemainingItemCount) != fmtCount(api.env.ListMeta.RemainingItemCount) {
		diffs = append(diffs, fmt.Sprintf("remainingItemCount %s, apiserver %s", fmtCount(lp.env.ListMeta.RemainingItemCount), fmtCount(api.env.ListMeta.RemainingItemCount)))
	}
	if len(lp.items) != len(api.items) {
		diffs = append(diffs, fmt.Sprintf("%d items, apiserver %d", len(lp.items), len(api.items)))
	} else {
		for i := range lp.items {
			if !bytes.Equal(lp.items[i], api.items[i]) {
				diffs = append(diffs, fmt.Sprintf("item %d differs:\n  listproxy %.300s\n  apiserver %.300s", i, lp.items[i], api.items[i]))
				break
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func fmtCount(n *int64) string {
	if n == nil {
		return "nil"
	}
	return strconv.FormatInt(*n, 10)
}

type diffStats struct {
	requests, snapshot, passThrough, pagesCompared, walks atomic.Int64
	byMode                                                [numRVModes]atomic.Int64 // requests served from snapshots
}

// diffCheckers is how many requests TestDifferentialAgainstAPIServer has in
// flight at once.
const diffCheckers = 4

func TestDifferentialAgainstAPIServer(t *testing.T) {
	requests := 2000
	if s := os.Getenv("LISTPROXY_DIFF_REQUESTS"); s != "" {
		requests, _ = strconv.Atoi(s)
	}
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	createWidgetCRD(t, cp.AdminConfig)
	w := seedWorld(t, cp, 4, 150, 40, 12)
	// With etcd, consistent reads are served from snapshots once proven.
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)

	lpc := newRawClient(t, lp.Config())
	apic := newRawClient(t, cp.AdminConfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Writers churn objects for the whole run.
	var writers sync.WaitGroup
	writes := make([]int, 2)
	for i := range writes {
		writers.Add(1)
		go func() {
			defer writers.Done()
			writes[i] = w.churn(ctx, 25, rand.New(rand.NewPCG(uint64(i), 7)))
		}()
	}

	tgts := targets(w.namespaces)
	warmUp(ctx, t, lpc, tgts)
	var stats diffStats
	// Checkers send the requests concurrently, each with its own random
	// sequence; they share the resourceVersions recently served.
	var (
		mu        sync.Mutex
		failures  []string
		recentRVs []uint64
		next      atomic.Int64
		checkers  sync.WaitGroup
	)
	start := time.Now()
	for c := range diffCheckers {
		checkers.Go(func() {
			rng := rand.New(rand.NewPCG(42, uint64(c)))
			for {
				i := next.Add(1) - 1
				mu.Lock()
				done := i >= int64(requests) || len(failures) >= 10
				rvs := append([]uint64(nil), recentRVs...)
				mu.Unlock()
				if done {
					return
				}
				req := randomRequest(rng, tgts, rvs)
				rv, failure := checkRequest(ctx, t, lpc, apic, req, &stats)
				mu.Lock()
				if failure != "" {
					failures = append(failures, fmt.Sprintf("request %d %s: %s", i, req, failure))
				}
				if rv > 0 {
					recentRVs = append(recentRVs, rv)
					if len(recentRVs) > 50 {
						recentRVs = recentRVs[1:]
					}
				}
				mu.Unlock()
			}
		})
	}
	checkers.Wait()
	cancel()
	writers.Wait()
	t.Logf("%d requests in %v: %d served from snapshots, %d passed through; %d pages compared, %d full walks; %d writes meanwhile",
		stats.requests.Load(), time.Since(start).Round(time.Millisecond), stats.snapshot.Load(), stats.passThrough.Load(), stats.pagesCompared.Load(), stats.walks.Load(), writes[0]+writes[1])
	for _, f := range failures {
		t.Error(f)
	}
	// Lists over 128 KiB come gzipped from both sides and are compared
	// decompressed.
	t.Logf("gzipped responses: listproxy %d, apiserver %d", lpc.gzipped.Load(), apic.gzipped.Load())
	if lpc.gzipped.Load() == 0 {
		t.Errorf("no listproxy response was gzipped; want large lists gzipped, as the apiserver does")
	}
	if served, total := stats.snapshot.Load(), stats.requests.Load(); served*10 < total*9 {
		t.Errorf("only %d of %d requests were served from snapshots; want at least 90%%", served, total)
	}
	for m := range numRVModes {
		if n := stats.byMode[m].Load(); n == 0 {
			t.Errorf("no request with resourceVersion=%v was served from a snapshot", m)
		} else {
			t.Logf("resourceVersion=%v: %d served from snapshots", m, n)
		}
	}
}

// warmUp lists every target in every format through listproxy until a
// snapshot answers: stores start on first demand and pass requests through
// until they have synced.
func warmUp(ctx context.Context, t *testing.T, lpc rawClient, tgts []target) {
	t.Helper()
	for _, tg := range tgts {
		for format, accept := range formatAccept {
			if tg.custom && format == wire.Protobuf {
				continue
			}
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				_, hdr, _, err := lpc.get(ctx, tg.path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}}, accept)
				return err == nil && hdr.Get("X-Listproxy-Served-From") == "snapshot", nil
			})
			if err != nil {
				t.Fatalf("%s in %v never served from a snapshot: %v", tg.path, format, err)
			}
		}
	}
}

func randomRequest(rng *rand.Rand, tgts []target, recentRVs []uint64) request {
	tg := tgts[rng.IntN(len(tgts))]
	formats := []wire.Format{wire.JSON, wire.Protobuf, wire.MetaJSON, wire.MetaProtobuf}
	if tg.custom {
		formats = []wire.Format{wire.JSON, wire.MetaJSON, wire.MetaProtobuf}
	}
	req := request{
		target:        tg,
		format:        formats[rng.IntN(len(formats))],
		labelSelector: labelSelectors[rng.IntN(len(labelSelectors))],
		fieldSelector: tg.fieldSelectors[rng.IntN(len(tg.fieldSelectors))],
	}
	if req.format == wire.MetaJSON || req.format == wire.MetaProtobuf {
		// Only metadata.* field selectors can be evaluated on metadata.
		if req.fieldSelector != "" && !strings.HasPrefix(req.fieldSelector, "metadata.") {
			req.fieldSelector = ""
		}
	}
	switch n := rng.IntN(10); {
	case n < 3:
		req.limit = 0
	case n < 6:
		req.limit = 1 + rng.IntN(40)
	default:
		req.limit = 1 + rng.IntN(600)
	}
	req.mode = rvMode(rng.IntN(int(numRVModes)))
	if len(recentRVs) == 0 && (req.mode == rvNotOlderThan || req.mode == rvExact) {
		req.mode = rvZero
	} else if len(recentRVs) > 0 {
		req.rv = recentRVs[len(recentRVs)-1-rng.IntN(min(len(recentRVs), 20))]
	}
	req.walk = req.limit > 0 && rng.IntN(4) == 0 && !tg.noWalk[req.fieldSelector]
	return req
}

// checkRequest sends req to listproxy and the same request at the
// resourceVersion of its answer to the apiserver, and compares every page;
// answers that passed through are compared too. It returns the listproxy
// answer's resourceVersion.
func checkRequest(ctx context.Context, t *testing.T, lpc, apic rawClient, req request, stats *diffStats) (uint64, string) {
	stats.requests.Add(1)
	// A consistent read must reflect every write completed before it was
	// sent: the apiserver's own consistent read, made just before, is the
	// floor.
	var floor uint64
	if req.mode == rvConsistent {
		code, _, body, err := apic.get(ctx, req.target.path, url.Values{"limit": {"1"}}, acceptJSON)
		if err != nil || code != http.StatusOK {
			return 0, fmt.Sprintf("apiserver consistent read: HTTP %d %v: %.300s", code, err, body)
		}
		p, err := decodePage(wire.JSON, body)
		if err != nil {
			return 0, fmt.Sprintf("decode apiserver consistent read: %v", err)
		}
		if floor, err = strconv.ParseUint(p.env.ListMeta.ResourceVersion, 10, 64); err != nil {
			return 0, fmt.Sprintf("apiserver resourceVersion %q", p.env.ListMeta.ResourceVersion)
		}
	}
	code, hdr, body, err := lpc.get(ctx, req.target.path, req.query(), formatAccept[req.format])
	if err != nil {
		return 0, fmt.Sprintf("listproxy: %v", err)
	}
	fromSnapshot := hdr.Get("X-Listproxy-Served-From") == "snapshot"
	if fromSnapshot {
		stats.snapshot.Add(1)
		stats.byMode[req.mode].Add(1)
	} else {
		stats.passThrough.Add(1)
	}
	if code == http.StatusGone && !fromSnapshot && req.mode == rvExact {
		// The apiserver's own answer for a resourceVersion it compacted
		// or, for an Exact read, no longer has in its watch cache.
		return 0, ""
	}
	if code != http.StatusOK {
		return 0, fmt.Sprintf("listproxy HTTP %d (served from %q): %.300s", code, hdr.Get("X-Listproxy-Served-From"), body)
	}
	if got, want := hdr.Get("Content-Type"), req.format.ContentType(); got != want {
		return 0, fmt.Sprintf("Content-Type %q, want %q", got, want)
	}
	lpPage, err := decodePage(req.format, body)
	if err != nil {
		return 0, fmt.Sprintf("decode listproxy page: %v", err)
	}
	rv, err := strconv.ParseUint(lpPage.env.ListMeta.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("listproxy resourceVersion %q", lpPage.env.ListMeta.ResourceVersion)
	}
	if req.mode != rvZero && rv < req.rv {
		return rv, fmt.Sprintf("served resourceVersion %d older than requested %d", rv, req.rv)
	}
	if req.mode == rvExact && rv != req.rv {
		return rv, fmt.Sprintf("exact read served resourceVersion %d", rv)
	}
	if req.mode == rvConsistent && rv < floor {
		return rv, fmt.Sprintf("consistent read served resourceVersion %d, older than the apiserver's %d just before", rv, floor)
	}

	// The oracle: the apiserver at exactly that resourceVersion.
	oracle := req
	oracle.mode, oracle.rv = rvExact, rv
	if req.mode == rvZero {
		// The apiserver ignores limit at resourceVersion=0, and so does
		// listproxy by default.
		oracle.limit = 0
	}
	q := oracle.query()
	// The watch cache answers latest reads of pods by spec.nodeName from its
	// index, where "more" means more matches; exact reads scan.
	_, nodeIndexed := strings.CutPrefix(req.fieldSelector, "spec.nodeName=")
	ignoreMore := req.mode != rvExact && nodeIndexed && strings.Contains(req.target.path, "/pods") && req.format != wire.MetaJSON && req.format != wire.MetaProtobuf
	for pages := 1; ; pages++ {
		code, _, apiBody, err := apic.get(ctx, req.target.path, q, formatAccept[req.format])
		if err != nil || code != http.StatusOK {
			return rv, fmt.Sprintf("apiserver page %d: HTTP %d %v: %.300s", pages, code, err, apiBody)
		}
		apiPage, err := decodePage(req.format, apiBody)
		if err != nil {
			return rv, fmt.Sprintf("decode apiserver page: %v", err)
		}
		stats.pagesCompared.Add(1)
		if d := comparePages(lpPage, apiPage, ignoreMore && pages == 1); d != "" {
			return rv, fmt.Sprintf("page %d: %s", pages, d)
		}
		if !req.walk || lpPage.env.ListMeta.Continue == "" || apiPage.env.ListMeta.Continue == "" {
			if req.walk {
				stats.walks.Add(1)
			}
			return rv, ""
		}
		// Next page on both sides, each with its own token.
		lq := url.Values{"continue": {lpPage.env.ListMeta.Continue}, "limit": {strconv.Itoa(req.limit)}}
		q = url.Values{"continue": {apiPage.env.ListMeta.Continue}, "limit": {strconv.Itoa(req.limit)}}
		for _, k := range []string{"labelSelector", "fieldSelector"} {
			if v := oracle.query().Get(k); v != "" {
				lq.Set(k, v)
				q.Set(k, v)
			}
		}
		code, hdr, body, err := lpc.get(ctx, req.target.path, lq, formatAccept[req.format])
		if err != nil || code != http.StatusOK {
			return rv, fmt.Sprintf("listproxy page %d: HTTP %d %v: %.300s", pages+1, code, err, body)
		}
		if fromSnapshot && hdr.Get("X-Listproxy-Served-From") != "snapshot" {
			return rv, fmt.Sprintf("listproxy page %d passed through", pages+1)
		}
		if lpPage, err = decodePage(req.format, body); err != nil {
			return rv, fmt.Sprintf("decode listproxy page %d: %v", pages+1, err)
		}
		ignoreMore = false
	}
}
