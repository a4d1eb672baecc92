package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// How long a watch-list may take, through listproxy, to end its initial
// events: within wlEndsFactor times the same request answered directly by
// the apiserver, or wlEndsFloor, whichever is longer (a watch-list of a few
// objects takes milliseconds either way; the floor absorbs a loaded 2-core
// machine's scheduling). A case over its bound is sent again, both ways,
// up to wlEndsAttempts times in all, and fails when every attempt was over.
// A watch-list that has not ended after wlEndsHang fails at once, as hung.
const (
	wlEndsFactor   = 2
	wlEndsFloor    = time.Second
	wlEndsAttempts = 3
	wlEndsHang     = 15 * time.Second
	// wlEndsMaxFailures stops starting cases once this many failed: a
	// listproxy that hangs every watch-list would otherwise take
	// wlEndsHang per case.
	wlEndsMaxFailures = 8
)

// wlEndsNS is the namespace of TestEveryWatchListEnds's objects.
const wlEndsNS = "wl-ends"

// wlEndsLabelSelector selects, in every resource, every object but this
// test's app=b ones: most of the cluster's objects have no app label.
const wlEndsLabelSelector = "app!=b"

// wlRep is a representation a watch-list asks for: what the stream is
// framed as, and the Accept header a client sends for it.
type wlRep struct {
	name   string
	format wire.Format
	accept string
}

// wlReps are the representations listproxy serves: whole objects in JSON
// and protobuf (built-in resources only), PartialObjectMetadata in both, and
// the Table kubectl asks for.
var wlReps = []wlRep{
	{"json", wire.JSON, watchAccept[wire.JSON]},
	{"protobuf", wire.Protobuf, watchAccept[wire.Protobuf]},
	{"meta-json", wire.MetaJSON, watchAccept[wire.MetaJSON]},
	{"meta-protobuf", wire.MetaProtobuf, watchAccept[wire.MetaProtobuf]},
	{"table", wire.Table, kubectlTableAccept},
}

// wlTarget is one resource every watch-list case of which is sent.
type wlTarget struct {
	name       string // resource[.group], as kubectl api-resources names it
	path       string // its collection across namespaces
	namespaced bool
	custom     bool
	// fieldSelector is the case with a field selector's.
	fieldSelector string
}

// wlCase is one watch-list: a resource, a representation, a selection.
type wlCase struct {
	target wlTarget
	rep    wlRep
	// sel names the selection: "all", "rv0" (all, from resourceVersion
	// 0 rather than a consistent read), "label", "field", "namespace".
	sel   string
	path  string
	query url.Values
}

func (c wlCase) String() string {
	return fmt.Sprintf("%s as %s (%s: GET %s?%s)", c.target.name, c.rep.name, c.sel, c.path, c.query.Encode())
}

// wlAnswer is how one server answered a watch-list, read up to the end of
// its initial events.
type wlAnswer struct {
	code       int    // HTTP status
	servedFrom string // listproxy's X-Listproxy-Served-From
	// message is a refusal's body, or an ERROR event's Status message.
	message string
	// errorCode is the Status code of an ERROR event sent before the end
	// of the initial events.
	errorCode int
	// ended: the initial-events-end bookmark came, at endRV, elapsed
	// after the request was sent.
	ended   bool
	endRV   string
	elapsed time.Duration
	// keys are the initial objects' namespace/name in the order sent;
	// dups those sent more than once.
	keys, dups []string
	// hung: wlEndsHang passed before the end of the initial events.
	hung bool
	// broken is why the stream ended before them otherwise.
	broken error
}

// outcome is the answer's code: the HTTP status of a refusal, the Status
// code of an ERROR event, or 200 for initial events that ended.
func (a wlAnswer) outcome() int {
	if a.code == http.StatusOK && a.errorCode != 0 {
		return a.errorCode
	}
	return a.code
}

func (a wlAnswer) String() string {
	switch {
	case a.hung:
		return fmt.Sprintf("HTTP %d from %q, no initial-events-end bookmark within %v (%d initial events)", a.code, a.servedFrom, wlEndsHang, len(a.keys))
	case a.broken != nil:
		return fmt.Sprintf("HTTP %d from %q, stream ended before the initial-events-end bookmark: %v", a.code, a.servedFrom, a.broken)
	case a.code != http.StatusOK:
		return fmt.Sprintf("HTTP %d from %q: %.200s", a.code, a.servedFrom, a.message)
	case a.errorCode != 0:
		return fmt.Sprintf("ERROR event %d from %q: %.200s", a.errorCode, a.servedFrom, a.message)
	}
	return fmt.Sprintf("%d initial objects, end bookmark at %s after %v (from %q)", len(a.keys), a.endRV, a.elapsed.Round(time.Millisecond), a.servedFrom)
}

// watchListOnce sends c's watch-list to server and reads its initial
// events. Through listproxy (viaListproxy), an answer passed through to the
// apiserver is not read: it is the apiserver's.
func watchListOnce(ctx context.Context, server rawClient, c wlCase, viaListproxy bool) wlAnswer {
	ctx, cancel := context.WithTimeout(ctx, wlEndsHang)
	defer cancel()
	var a wlAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.base+c.path+"?"+c.query.Encode(), nil)
	if err != nil {
		a.broken = err
		return a
	}
	req.Header.Set("Accept", c.rep.accept)
	req.Header.Set("User-Agent", "listproxy-e2e")
	start := time.Now()
	resp, err := server.client.Do(req)
	if err != nil {
		a.hung = errors.Is(ctx.Err(), context.DeadlineExceeded)
		a.broken = err
		return a
	}
	defer resp.Body.Close()
	a.code, a.servedFrom = resp.StatusCode, resp.Header.Get(httpapi.HeaderServedFrom)
	if a.code != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		a.message, a.elapsed = string(body), time.Since(start)
		return a
	}
	if viaListproxy && a.servedFrom == httpapi.SourceAPIServer {
		return a
	}
	d := wire.NewWatchDecoder(c.rep.format, resp.Body, wire.WatchOptions{})
	seen := map[string]bool{}
	for {
		ev, err := d.Next()
		if err != nil {
			if ctx.Err() != nil {
				a.hung = true
			} else {
				a.broken = fmt.Errorf("after %d initial events: %w", len(a.keys), err)
			}
			return a
		}
		switch ev.Type {
		case wire.Added:
			key, _, err := wlObjectKey(c.rep.format, ev.Object)
			if err != nil {
				a.broken = fmt.Errorf("initial event %d: %w", len(a.keys), err)
				return a
			}
			if seen[key] {
				a.dups = append(a.dups, key)
			}
			seen[key] = true
			a.keys = append(a.keys, key)
		case wire.Bookmark:
			end := ev.InitialEventsEnd
			if c.rep.format == wire.Table {
				if _, end, err = wlObjectKey(wire.Table, ev.Object); err != nil {
					a.broken = fmt.Errorf("bookmark: %w", err)
					return a
				}
			}
			if end {
				a.ended, a.endRV, a.elapsed = true, ev.ResourceVersion, time.Since(start)
				return a
			}
		case wire.Error:
			status, err := wire.DecodeStatus(c.rep.format, ev.Object)
			if err != nil {
				a.broken = fmt.Errorf("ERROR event: %w", err)
				return a
			}
			a.errorCode, a.message, a.elapsed = int(status.Code), status.Message, time.Since(start)
			return a
		default:
			a.broken = fmt.Errorf("%s event after %d initial events, before the initial-events-end bookmark", ev.Type, len(a.keys))
			return a
		}
	}
}

// wlObjectKey returns the namespace/name of an event's object in format f
// (a Table event's object is its row, whose object carries the metadata),
// and whether it carries the k8s.io/initial-events-end annotation.
func wlObjectKey(f wire.Format, raw []byte) (string, bool, error) {
	if f != wire.Table {
		m, err := wire.ExtractMeta(f, raw)
		return objectKey(m.Namespace, m.Name), false, err
	}
	var row struct {
		Object struct {
			Metadata struct {
				Namespace   string            `json:"namespace"`
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if err := json.Unmarshal(raw, &row); err != nil {
		return "", false, fmt.Errorf("table row %.200q: %w", raw, err)
	}
	m := row.Object.Metadata
	return objectKey(m.Namespace, m.Name), m.Annotations["k8s.io/initial-events-end"] == "true", nil
}

// objectKey is namespace/name, or name for a cluster-scoped object.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// wlVerdict is one case's outcome.
type wlVerdict struct {
	c wlCase
	// problems fail the case; slow alone is retried.
	problems []string
	slow     string
	// how listproxy answered: "snapshot", "passed through", "refused
	// as the apiserver" (the same error code), or "failed".
	how string
	// attempts made; lpTime and apiTime are how long listproxy and the
	// apiserver took to end the last attempt's initial events.
	attempts        int
	lpTime, apiTime time.Duration
	// start and end are when the first attempt started and the last
	// ended.
	start, end time.Time
}

// wlChecker runs watch-list cases against listproxy and the apiserver.
type wlChecker struct {
	lpc, apic rawClient
	// watchList: the apiserver serves watch-lists itself (its WatchList
	// feature); where it does not, listproxy serves those it refuses.
	watchList bool
	// enforceTime applies the time bound (not to a store's first,
	// cold, watch-list).
	enforceTime bool
}

// check runs c until it meets its time bound, at most wlEndsAttempts
// times, and returns its verdict.
func (k wlChecker) check(ctx context.Context, c wlCase) wlVerdict {
	var v wlVerdict
	start := time.Now()
	for attempt := 1; attempt <= wlEndsAttempts; attempt++ {
		v = k.once(ctx, c)
		v.attempts = attempt
		if len(v.problems) > 0 || v.slow == "" || ctx.Err() != nil {
			break
		}
	}
	if v.slow != "" {
		v.problems = append(v.problems, fmt.Sprintf("slow in every one of %d attempts, the last: %s", v.attempts, v.slow))
	}
	if len(v.problems) > 0 {
		v.how = "failed"
	}
	v.start, v.end = start, time.Now()
	return v
}

// once sends c to the apiserver, then to listproxy, and judges listproxy's
// answer by the apiserver's.
func (k wlChecker) once(ctx context.Context, c wlCase) wlVerdict {
	v := wlVerdict{c: c}
	api := watchListOnce(ctx, k.apic, c, false)
	lp := watchListOnce(ctx, k.lpc, c, true)
	bad := func(format string, args ...any) {
		v.problems = append(v.problems, fmt.Sprintf(format, args...)+fmt.Sprintf("\n\tlistproxy: %v\n\tapiserver: %v", lp, api))
	}
	switch {
	case lp.servedFrom == httpapi.SourceAPIServer && !lp.hung && lp.broken == nil:
		// Passed through before its first byte: the apiserver's answer.
		v.how = "passed through"
		return v
	case lp.hung:
		bad("HANG: no initial-events-end bookmark within %v", wlEndsHang)
		return v
	case lp.servedFrom != httpapi.SourceSnapshot:
		bad("served from %q, want %q or %q", lp.servedFrom, httpapi.SourceSnapshot, httpapi.SourceAPIServer)
		return v
	case lp.broken != nil:
		bad("the stream ended without the initial-events-end bookmark")
		return v
	}
	apiServes := api.ended
	if !api.ended && !api.hung && api.broken == nil {
		// The apiserver answered an error: so must listproxy, with the
		// same code, unless it is the refusal of an apiserver without the
		// WatchList feature, whose watch-lists listproxy serves.
		refusedWatchList := !k.watchList && api.code == http.StatusUnprocessableEntity && strings.Contains(api.message, "sendInitialEvents")
		if !refusedWatchList || !lp.ended {
			if lp.outcome() != api.outcome() {
				bad("answered %d, the apiserver %d", lp.outcome(), api.outcome())
			}
			v.how = "refused as the apiserver"
			return v
		}
	}
	if !lp.ended {
		bad("answered %d, the apiserver ended its initial events", lp.outcome())
		return v
	}
	v.how = "snapshot"
	if len(lp.dups) > 0 {
		bad("initial objects sent twice: %v", firstFew(lp.dups))
	}
	// The initial objects are the apiserver's: those of its own
	// watch-list when both hold the same set, else (a change between the
	// two, or no watch-list from the apiserver) its LIST at exactly the
	// end bookmark's resourceVersion.
	if !apiServes || wlKeyDiff(api.keys, lp.keys) != "" {
		want, err := wlListKeysAt(ctx, k.apic, c, lp.endRV)
		if err != nil {
			bad("the apiserver's LIST at the end bookmark's resourceVersion %s: %v", lp.endRV, err)
		} else if d := wlKeyDiff(want, lp.keys); d != "" {
			bad("initial objects differ from the apiserver's LIST at the end bookmark's resourceVersion %s: %s", lp.endRV, d)
		}
	}
	v.lpTime, v.apiTime = lp.elapsed, api.elapsed
	if !apiServes {
		// The apiserver gave no time to compare with: the floor alone.
		api.elapsed = 0
	}
	if limit := max(wlEndsFactor*api.elapsed, wlEndsFloor); k.enforceTime && lp.elapsed > limit {
		v.slow = fmt.Sprintf("initial events ended after %v through listproxy, %v directly (bound %v)",
			lp.elapsed.Round(time.Millisecond), api.elapsed.Round(time.Millisecond), limit.Round(time.Millisecond))
	}
	return v
}

// wlListKeysAt is the apiserver's LIST of c's objects (its path and
// selectors) at exactly rv, as namespace/name.
func wlListKeysAt(ctx context.Context, apic rawClient, c wlCase, rv string) ([]string, error) {
	q := url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}
	for _, p := range []string{"labelSelector", "fieldSelector"} {
		if s := c.query.Get(p); s != "" {
			q.Set(p, s)
		}
	}
	code, _, body, err := apic.get(ctx, c.path, q, acceptMetaJSON)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.200s", code, body)
	}
	var l metav1.PartialObjectMetadataList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	keys := make([]string, len(l.Items))
	for i, it := range l.Items {
		keys[i] = objectKey(it.Namespace, it.Name)
	}
	return keys, nil
}

// wlKeyDiff describes how the set got differs from the set want ("" when
// equal).
func wlKeyDiff(want, got []string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, k := range want {
		w[k] = true
	}
	for _, k := range got {
		g[k] = true
	}
	var missing, extra []string
	for k := range w {
		if !g[k] {
			missing = append(missing, k)
		}
	}
	for k := range g {
		if !w[k] {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("%d objects, want %d; missing %v, not the apiserver's %v", len(g), len(w), firstFew(missing), firstFew(extra))
}

func firstFew(s []string) []string {
	if len(s) > 5 {
		return append(slices.Clone(s[:5]), fmt.Sprintf("… %d more", len(s)-5))
	}
	return s
}

// wlTargets are the resources `kubectl api-resources --verbs=list,watch`
// lists (the preferred version of each), read from discovery as it does,
// with custom resources marked by their CustomResourceDefinitions.
func wlTargets(ctx context.Context, t *testing.T, cp *framework.ControlPlane) []wlTarget {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	crds, err := apiextensionsclient.NewForConfigOrDie(cp.AdminConfig).ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	custom := map[schema.GroupResource]bool{}
	for _, crd := range crds.Items {
		custom[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = true
	}
	var out []wlTarget
	for _, l := range discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"list", "watch"}}, lists) {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			tg := wlTarget{name: r.Name, namespaced: r.Namespaced, custom: custom[gv.WithResource(r.Name).GroupResource()]}
			tg.path = "/apis/" + gv.String() + "/" + r.Name
			if gv.Group == "" {
				tg.path = "/api/" + gv.Version + "/" + r.Name
			} else {
				tg.name += "." + gv.Group
			}
			switch {
			case tg.name == "pods":
				tg.fieldSelector = "spec.nodeName=node-1"
			case gv.WithResource(r.Name) == widgetGVR:
				tg.fieldSelector = "spec.color=red" // a selectable field
			case r.Namespaced:
				tg.fieldSelector = "metadata.namespace=" + wlEndsNS
			default:
				tg.fieldSelector = "metadata.name!=default"
			}
			out = append(out, tg)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// wlCases are tg's watch-lists in every representation it has, each
// selection named: all objects (consistent, as client-go's informers
// ask), all from resourceVersion 0, with a label selector, with a field
// selector, and (namespaced resources) of one namespace.
func wlCases(tg wlTarget, selections ...string) []wlCase {
	var out []wlCase
	for _, rep := range wlReps {
		if tg.custom && rep.format == wire.Protobuf {
			continue // custom resources have no protobuf
		}
		for _, sel := range selections {
			c := wlCase{target: tg, rep: rep, sel: sel, path: tg.path, query: url.Values{
				"watch": {"true"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
				"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"60"},
			}}
			switch sel {
			case "label":
				c.query.Set("labelSelector", wlEndsLabelSelector)
			case "field":
				c.query.Set("fieldSelector", tg.fieldSelector)
			case "rv0":
				c.query.Set("resourceVersion", "0")
			case "namespace":
				if !tg.namespaced {
					continue
				}
				i := strings.LastIndex(tg.path, "/")
				c.path = tg.path[:i] + "/namespaces/" + wlEndsNS + tg.path[i:]
				c.query.Set("labelSelector", wlEndsLabelSelector)
			}
			out = append(out, c)
		}
	}
	return out
}

// wlRun checks cases on workers goroutines and returns their verdicts;
// after wlEndsMaxFailures failed cases it starts no more.
func wlRun(ctx context.Context, k wlChecker, cases []wlCase, workers int) []wlVerdict {
	verdicts := make([]wlVerdict, len(cases))
	var failed atomic.Int64
	_ = framework.Parallel(ctx, workers, len(cases), func(ctx context.Context, i int) error {
		if failed.Load() >= wlEndsMaxFailures {
			verdicts[i] = wlVerdict{c: cases[i], how: "not run"}
			return nil
		}
		verdicts[i] = k.check(ctx, cases[i])
		if len(verdicts[i].problems) > 0 {
			failed.Add(1)
		}
		return nil
	})
	return verdicts
}

// wlReport fails t with every failed verdict and returns how many cases
// listproxy answered each way.
func wlReport(t *testing.T, phase string, verdicts []wlVerdict) map[string]int {
	t.Helper()
	how := map[string]int{}
	for _, v := range verdicts {
		how[v.how]++
		for _, p := range v.problems {
			t.Errorf("%s: %v: %s", phase, v.c, p)
		}
	}
	if n := how["not run"]; n > 0 {
		t.Errorf("%s: %d cases not run after %d failed", phase, n, wlEndsMaxFailures)
	}
	return how
}

// TestEveryWatchListEnds: every watch-list a client may send — every
// resource `kubectl api-resources --verbs=list,watch` lists (a CRD's
// custom resources among them), in every representation listproxy serves
// (JSON, protobuf but for custom resources, PartialObjectMetadata in JSON
// and protobuf, and the Table kubectl asks for), of every object, with a
// label selector, with a field selector, and of one namespace — either
// ends its initial events with the k8s.io/initial-events-end bookmark,
// sending no object twice and the apiserver's objects (those of the same
// watch-list sent to the apiserver, or of its LIST at exactly the
// bookmark's resourceVersion), within the time bound above; or passes
// through to the apiserver before its first byte; or, where the apiserver
// refuses it, is refused with the same code. A watch-list that never ends
// fails with its resource, representation and query. The first watch-list
// of each store (cold: it waits for the store's first list) is held to
// all of this but the time bound.
//
// Then a store relists under watch-lists: a second listproxy reaches the
// apiserver through a TCP balancer; events (no watch cache: their watches
// read etcd) are watch-listed in a loop while etcd is compacted past the
// events store's resourceVersion and the balancer drops every connection,
// so that the store's watch resumes from a compacted revision, gets 410
// and relists. Every watch-list before, during and after must pass the
// same checks.
func TestEveryWatchListEnds(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	begin := time.Now()
	createWidgetCRD(t, cp.AdminConfig)
	seedWatchListEnds(ctx, t, cp)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint)
	k := wlChecker{lpc: newRawClient(t, lp.Config()), apic: newRawClient(t, cp.AdminConfig), watchList: watchListServedBy(t, cp)}
	targets := wlTargets(ctx, t, cp)
	var names []string
	for _, tg := range targets {
		names = append(names, tg.name)
	}
	t.Logf("%d resources with list and watch: %s", len(targets), strings.Join(names, " "))

	// Each store's first watch-list (all objects), cold.
	var cold, warm []wlCase
	for _, tg := range targets {
		cold = append(cold, wlCases(tg, "all")...)
		warm = append(warm, wlCases(tg, "all", "rv0", "label", "field", "namespace")...)
	}
	phase := time.Now()
	how := wlReport(t, "cold", wlRun(ctx, k, cold, 4))
	t.Logf("cold: %d watch-lists (each store's first) in %v: %v", len(cold), time.Since(phase).Round(time.Millisecond), how)
	if t.Failed() {
		return
	}
	phase = time.Now()
	k.enforceTime = true
	verdicts := wlRun(ctx, k, warm, 4)
	how = wlReport(t, "warm", verdicts)
	t.Logf("warm: %d watch-lists in %v: %v", len(warm), time.Since(phase).Round(time.Millisecond), how)
	logWatchListEnds(t, verdicts)
	logPassedThrough(t, lp)
	if t.Failed() {
		return
	}

	t.Run("relist", func(t *testing.T) {
		checkWatchListsAcrossRelist(ctx, t, cp)
	})
	t.Logf("%v in all", time.Since(begin).Round(time.Millisecond))
}

// logWatchListEnds logs, per representation, how listproxy answered and
// the slowest served watch-list relative to the apiserver's.
func logWatchListEnds(t *testing.T, verdicts []wlVerdict) {
	t.Helper()
	type stats struct {
		how     map[string]int
		retried int
		worst   *wlVerdict
	}
	per := map[string]*stats{}
	for i, v := range verdicts {
		s := per[v.c.rep.name]
		if s == nil {
			s = &stats{how: map[string]int{}}
			per[v.c.rep.name] = s
		}
		s.how[v.how]++
		if v.attempts > 1 {
			s.retried++
		}
		if v.how == "snapshot" && (s.worst == nil || v.lpTime-v.apiTime > s.worst.lpTime-s.worst.apiTime) {
			s.worst = &verdicts[i]
		}
	}
	for _, rep := range wlReps {
		s := per[rep.name]
		if s == nil {
			continue
		}
		worst := "none served"
		if s.worst != nil {
			worst = fmt.Sprintf("%v through listproxy, %v directly (%s, %s)", s.worst.lpTime.Round(time.Millisecond),
				s.worst.apiTime.Round(time.Millisecond), s.worst.c.target.name, s.worst.c.sel)
		}
		t.Logf("%-13s %v; sent again when slow: %d; most behind the apiserver: %s", rep.name, s.how, s.retried, worst)
	}
}

// logPassedThrough logs why listproxy passed watches through, from its
// listproxy_watch_passed_through_total: reason, then resources.
func logPassedThrough(t *testing.T, lp *framework.Listproxy) {
	t.Helper()
	byReason := map[string][]string{}
	for _, s := range framework.Scrape(t, nil, lp.URL+"/metrics")["listproxy_watch_passed_through_total"] {
		if s.Value > 0 {
			r := s.Labels["reason"]
			byReason[r] = append(byReason[r], fmt.Sprintf("%s %v", s.Labels["resource"], s.Value))
		}
	}
	for r, res := range byReason {
		sort.Strings(res)
		t.Logf("passed through (%s): %s", r, strings.Join(res, ", "))
	}
}

// seedWatchListEnds creates wlEndsNS with a few objects of several
// resources (pods on nodes, configmaps, secrets, events, widgets) and
// nodes, some of them app=b, which wlEndsLabelSelector leaves out.
func seedWatchListEnds(ctx context.Context, t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	const ns = wlEndsNS
	createNamespaceWithPods(ctx, t, cp, ns, 6)
	cs := cp.Clientset(framework.UserAdmin)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	for i := range 3 {
		app := map[string]string{"app": []string{"a", "b", "c"}[i]}
		name := fmt.Sprintf("wl-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: app}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: app}, Data: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: app}, StringData: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := createWatchListEvent(ctx, cp, name, app); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, newWidget(ns, fmt.Sprintf("widget-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createWatchListEvent creates a core/v1 event in wlEndsNS about pod-0.
func createWatchListEvent(ctx context.Context, cp *framework.ControlPlane, name string, labels map[string]string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Labels: labels},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: wlEndsNS, Name: "pod-0", APIVersion: "v1"},
		Reason:         "Testing", Message: "a watch-list must end", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "listproxy-e2e"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := cp.Clientset(framework.UserAdmin).CoreV1().Events(wlEndsNS).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// checkWatchListsAcrossRelist watch-lists events through a listproxy
// whose upstream connections go through a TCP balancer, in a loop, while
// etcd is compacted past the events stores' resourceVersion and the
// balancer drops every connection: each store's watch resumes from a
// compacted revision (events have no watch cache: their watches read
// etcd), gets 410 and the store relists. The loop runs before, during and
// for one whole round after every store relisted.
func checkWatchListsAcrossRelist(ctx context.Context, t *testing.T, cp *framework.ControlPlane) {
	probe, err := framework.APIServerReadyProbe(cp)
	if err != nil {
		t.Fatal(err)
	}
	bal, err := framework.StartBalancerProbing([]string{strings.TrimPrefix(cp.APIServerURL, "https://")}, probe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bal.Close() })
	lp := framework.StartListproxyAt(t, cp, "https://"+bal.Addr, "--serve-watches", "--resources=events", "--etcd-servers="+cp.EtcdEndpoint)
	k := wlChecker{lpc: newRawClient(t, lp.Config()), apic: newRawClient(t, cp.AdminConfig), watchList: watchListServedBy(t, cp)}
	events := wlTarget{name: "events", path: "/api/v1/events", namespaced: true, fieldSelector: "metadata.namespace=" + wlEndsNS}
	cases := wlCases(events, "all", "rv0", "label", "field", "namespace")
	wlReport(t, "relist, cold", wlRun(ctx, k, wlCases(events, "all"), 2))
	if t.Failed() {
		return
	}
	var formats []string
	for _, rep := range wlReps {
		formats = append(formats, rep.format.String())
	}
	relists := func() map[string]float64 {
		m := framework.Scrape(t, nil, lp.URL+"/metrics")
		out := map[string]float64{}
		for _, f := range formats {
			out[f] = m.Sum("listproxy_snapshot_relists_total", `resource="events"`, `format="`+f+`"`)
		}
		return out
	}
	before := relists()

	k.enforceTime = true
	var (
		mu       sync.Mutex
		verdicts []wlVerdict
		rounds   int
		relisted atomic.Bool
	)
	firstRound, loopDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(loopDone)
		for round := 0; ctx.Err() == nil; round++ {
			after := relisted.Load()
			vs := wlRun(ctx, k, cases, 2)
			mu.Lock()
			verdicts = append(verdicts, vs...)
			rounds++
			mu.Unlock()
			if round == 0 {
				close(firstRound)
			}
			if after {
				return
			}
		}
	}()
	select {
	case <-firstRound:
	case <-ctx.Done():
		t.Fatal("the first round of watch-lists did not finish")
	}

	// Two writes to another resource put etcd's revision at least two past
	// the events stores' last resourceVersion; compacted there, a watch
	// resumed from it must relist.
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 2 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bump-%d", i)}}
		if _, err := cs.CoreV1().ConfigMaps(wlEndsNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := framework.CompactEtcd(ctx, []string{cp.EtcdEndpoint}, true)
	if err != nil {
		t.Fatal(err)
	}
	dropAt := time.Now()
	dropped := bal.DropConnections()
	t.Logf("etcd compacted at revision %d; the balancer dropped %d connections", rev, dropped)
	var last map[string]float64
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = relists()
		for _, f := range formats {
			if last[f] <= before[f] {
				return false, nil
			}
		}
		return true, nil
	})
	relisted.Store(true)
	relistedAt := time.Now()
	if err != nil {
		t.Errorf("the events stores did not all relist: relists before %v, now %v", before, last)
	}
	select {
	case <-loopDone:
	case <-ctx.Done():
		t.Fatal("the watch-list loop did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	how := wlReport(t, "relist", verdicts)
	lastRound := verdicts[len(verdicts)-len(cases):]
	served, inFlight, during := 0, 0, 0
	for _, v := range lastRound {
		if v.how == "snapshot" {
			served++
		}
	}
	for _, v := range verdicts {
		switch {
		case v.start.Before(dropAt) && v.end.After(dropAt):
			inFlight++
		case !v.start.Before(dropAt) && v.start.Before(relistedAt):
			during++
		}
	}
	restarts := map[string]float64{}
	for _, s := range framework.Scrape(t, nil, lp.URL+"/metrics")["listproxy_snapshot_watch_restarts_total"] {
		if s.Labels["resource"] == "events" && s.Value > 0 {
			restarts[s.Labels["reason"]] += s.Value
		}
	}
	t.Logf("relist: %d watch-lists of events in %d rounds across the relists (relists per format %v before, %v after; the stores' watch restarts by reason %v): %v; "+
		"%d in flight at the drop, %d started between the drop and the relists (%v); the round after them served %d of %d from snapshots",
		len(verdicts), rounds, before, last, restarts, how, inFlight, during, relistedAt.Sub(dropAt).Round(time.Millisecond), served, len(lastRound))
	if served == 0 {
		t.Errorf("no watch-list of events was served from a snapshot after the stores relisted")
	}
}
