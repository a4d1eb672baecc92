package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/consistency"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot/snapshottest"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// Cache consistency checks: listproxy compares each snapshot
// with the apiserver at the snapshot's resourceVersion, and a resource whose
// snapshot differs is dropped and resynced. The tests corrupt a snapshot
// (pkg/snapshot/snapshottest), as a lost watch event would.

const consistencyPath = "/debug/listproxy/consistency"

var consistencyPodsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// checkNow runs a consistency check through the debug endpoint.
func checkNow(t *testing.T, cfg *rest.Config) consistency.Report {
	t.Helper()
	got := authDo(t, cfg, http.MethodPost, consistencyPath, nil, "")
	if got.code != http.StatusOK {
		t.Fatalf("POST %s = %v", consistencyPath, got)
	}
	var report consistency.Report
	if err := json.Unmarshal(got.body, &report); err != nil {
		t.Fatalf("report %s: %v", got.body, err)
	}
	return report
}

// resultsByFormat returns the pods results of a report by format.
func resultsByFormat(t *testing.T, report consistency.Report) map[string]consistency.Result {
	t.Helper()
	out := map[string]consistency.Result{}
	for _, r := range report.Results {
		if r.Group != "" || r.Resource != "pods" {
			t.Errorf("unexpected store checked: %+v", r)
			continue
		}
		out[r.Format] = r
	}
	return out
}

// warmPods lists pods in formats until snapshots answer.
func warmPods(ctx context.Context, t *testing.T, lpc rawClient, formats ...wire.Format) {
	t.Helper()
	for _, f := range formats {
		awaitSnapshot(ctx, t, lpc, "/api/v1/pods", formatAccept[f])
	}
}

// awaitSnapshot polls a LIST of path at resourceVersion 0 until a snapshot
// answers it.
func awaitSnapshot(ctx context.Context, t *testing.T, c rawClient, path, accept string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, hdr, _, err := c.get(ctx, path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}}, accept)
		return err == nil && hdr.Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot, nil
	})
	if err != nil {
		t.Fatalf("%s (%s) never served from a snapshot: %v", path, accept, err)
	}
}

// corruptPods drops one pod from listproxy's JSON pods snapshot and moves
// another to a later resourceVersion, without a watch event. It returns
// the expected diff.
func corruptPods(t *testing.T, lp *framework.Listproxy, drop, change string) *consistency.KeyDiff {
	t.Helper()
	store := lp.Stores().Store(consistencyPodsGVR, wire.JSON)
	if store == nil {
		t.Fatal("no JSON pods store")
	}
	snap, _, err := store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := snap.Get(change)
	if !ok {
		t.Fatalf("%s not in the snapshot", change)
	}
	if err := snapshottest.Corrupt(store, []string{drop}, map[string]uint64{change: e.RV + 1000}); err != nil {
		t.Fatal(err)
	}
	return &consistency.KeyDiff{
		Missing: []string{drop}, MissingCount: 1,
		Different: []consistency.RVDifference{{Key: change, Snapshot: e.RV + 1000, APIServer: e.RV}}, DifferentCount: 1,
	}
}

// TestConsistencyCheck corrupts the JSON pods snapshot and checks through
// the debug endpoint: the mismatch is reported with its diff and counted,
// every pods store is dropped, the next LIST waits for a fresh one, and the fresh
// snapshot equals the apiserver again.
func TestConsistencyCheck(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 20, 0, 0)
	lp := framework.StartListproxy(t, cp) // periodic checks every 10m: none during the test
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	ctx := context.Background()
	allFormats := []wire.Format{wire.JSON, wire.Protobuf, wire.MetaJSON, wire.MetaProtobuf}

	if got := authDo(t, lp.Config(), http.MethodGet, consistencyPath, nil, ""); got.code != http.StatusNotFound {
		t.Errorf("GET %s before any check = %v, want 404", consistencyPath, got)
	}
	warmPods(ctx, t, lpc, allFormats...)

	t.Log("every snapshot matches")
	results := resultsByFormat(t, checkNow(t, lp.Config()))
	for _, f := range allFormats {
		r, ok := results[f.String()]
		switch {
		case !ok:
			t.Errorf("%v: not checked", f)
		case r.Result != consistency.Match || r.Dropped || r.Objects != 40 || r.APIServerObjects != 40 || r.SnapshotHash != r.APIServerHash:
			t.Errorf("%v: %+v, want a match of 40 objects", f, r)
		}
	}
	if got := authDo(t, lp.Config(), http.MethodGet, consistencyPath, nil, ""); got.code != http.StatusOK || !strings.Contains(string(got.body), `"result": "match"`) {
		t.Errorf("GET %s = %v, want the last report", consistencyPath, got)
	}

	t.Log("a corrupted snapshot is found, counted and dropped")
	wantDiff := corruptPods(t, lp, "ns-0/pod-3", "ns-1/pod-5")
	results = resultsByFormat(t, checkNow(t, lp.Config()))
	jr := results["json"]
	if jr.Result != consistency.Mismatch || !jr.Dropped || jr.Objects != 39 || jr.APIServerObjects != 40 {
		t.Errorf("json: %+v, want a dropped mismatch of 39 objects against 40", jr)
	}
	if diff := cmp.Diff(wantDiff, jr.Diff); diff != "" {
		t.Errorf("json diff (-want +got):\n%s", diff)
	}
	for _, f := range allFormats[1:] {
		if r := results[f.String()]; r.Result != consistency.Match || !r.Dropped || r.ResourceVersion == "" {
			t.Errorf("%v: %+v, want a match, dropped with the resource", f, r)
		}
	}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_consistency_checks_total", `resource="pods"`, `format="json"`, `result="mismatch"`); got != 1 {
		t.Errorf("listproxy_consistency_checks_total{format=json,result=mismatch} = %v, want 1", got)
	}
	if got := m.Sum("listproxy_consistency_checks_total", `resource="pods"`, `result="match"`); got != 7 {
		t.Errorf("listproxy_consistency_checks_total{result=match} = %v, want 4 + 3", got)
	}
	for _, f := range allFormats {
		if lp.Stores().Store(consistencyPodsGVR, f) != nil {
			t.Errorf("%v pods store not dropped", f)
		}
	}

	t.Log("the next LIST waits for a fresh snapshot (--cold-store-wait), which equals the apiserver")
	_, hdr, _, err := lpc.get(ctx, "/api/v1/pods", url.Values{"resourceVersion": {"0"}}, acceptJSON)
	if err != nil || hdr.Get(httpapi.HeaderServedFrom) != httpapi.SourceSnapshot {
		t.Errorf("first LIST after the drop: %s=%q, %v; want it served from the new store once synced", httpapi.HeaderServedFrom, hdr.Get(httpapi.HeaderServedFrom), err)
	}
	var body []byte
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		_, hdr, body, err = lpc.get(ctx, "/api/v1/pods", url.Values{"resourceVersion": {"0"}}, acceptJSON)
		return err == nil && hdr.Get(httpapi.HeaderServedFrom) == httpapi.SourceSnapshot, nil
	})
	if err != nil {
		t.Fatalf("pods never served from a fresh snapshot: %v", err)
	}
	lpPage, err := decodePage(wire.JSON, body)
	if err != nil {
		t.Fatal(err)
	}
	rv := lpPage.env.ListMeta.ResourceVersion
	code, _, apiBody, err := apic.get(ctx, "/api/v1/pods", url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}}, acceptJSON)
	if err != nil || code != http.StatusOK {
		t.Fatalf("apiserver LIST at %s: %d, %v", rv, code, err)
	}
	apiPage, err := decodePage(wire.JSON, apiBody)
	if err != nil {
		t.Fatal(err)
	}
	if d := comparePages(lpPage, apiPage, false); d != "" {
		t.Errorf("fresh snapshot at %s differs from the apiserver: %s", rv, d)
	}
	if n := len(lpPage.items); n != 40 {
		t.Errorf("fresh snapshot has %d pods, want 40", n)
	}

	t.Log("checked again, every snapshot matches")
	warmPods(ctx, t, lpc, allFormats...)
	results = resultsByFormat(t, checkNow(t, lp.Config()))
	for _, f := range allFormats {
		if r := results[f.String()]; r.Result != consistency.Match || r.Dropped {
			t.Errorf("%v after the resync: %+v, want a match", f, r)
		}
	}
	if lp.Stores().Store(consistencyPodsGVR, wire.JSON) == nil {
		t.Error("JSON pods store dropped after a match")
	}
}

// TestConsistencyCheckPeriodic runs the periodic check (and the endpoint's
// authorization) in service mode: a corrupted snapshot is found and dropped
// without anyone asking.
func TestConsistencyCheckPeriodic(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 1, 10, 0, 0)
	lp := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile, "--consistency-check-interval=1s")
	admin := lp.UserConfig(framework.UserAdmin)
	ctx := context.Background()

	t.Run("endpoint_authorized", func(t *testing.T) {
		if got := authDo(t, lp.Config(), http.MethodPost, consistencyPath, nil, ""); got.code != http.StatusUnauthorized {
			t.Errorf("POST %s without credentials = %v, want 401", consistencyPath, got)
		}
		got := authDo(t, lp.UserConfig(framework.UserAlice), http.MethodPost, consistencyPath, nil, "")
		if got.code != http.StatusForbidden || !strings.Contains(string(got.body), `User \"alice\" cannot post path \"/debug/listproxy/consistency\"`) {
			t.Errorf("POST %s as alice = %v, want 403", consistencyPath, got)
		}
		if got := authDo(t, admin, http.MethodGet, "/debug/listproxy/other", nil, ""); got.code != http.StatusNotFound || !strings.Contains(string(got.body), `"kind":"Status"`) {
			t.Errorf("GET /debug/listproxy/other as admin = %v, want a 404 Status", got)
		}
	})

	warmPods(ctx, t, newRawClient(t, admin), wire.JSON)
	corruptPods(t, lp, "ns-0/pod-1", "ns-0/pod-2")
	adminClient, err := rest.HTTPClientFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	mismatches := func() float64 {
		return framework.Scrape(t, adminClient, lp.URL+"/metrics").Sum("listproxy_consistency_checks_total", `format="json"`, `result="mismatch"`)
	}
	took := authWaitFor(t, "a periodic check to count the mismatch and drop the store", 30*time.Second, func() bool {
		return mismatches() == 1 && lp.Stores().Store(consistencyPodsGVR, wire.JSON) == nil
	})
	t.Logf("found and dropped after %v", took.Round(time.Millisecond))
	got := authDo(t, admin, http.MethodGet, consistencyPath, nil, "")
	if got.code != http.StatusOK {
		t.Fatalf("GET %s = %v", consistencyPath, got)
	}
}
