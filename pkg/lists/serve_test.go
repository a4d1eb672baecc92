package lists

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// testPod is a pod entry in namespace ns with label app=name's parity.
func testPod(ns, name string, rv uint64) *snapshot.Entry {
	app := "even"
	if rv%2 == 1 {
		app = "odd"
	}
	raw := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"resourceVersion":"%d","labels":{"app":%q}}}`, name, ns, rv, app)
	return snapshot.NewEntry(ns, name, rv, map[string]string{"app": app}, nil, nil, []byte(raw))
}

// testListsOptions set up newTestLists.
type testListsOptions struct {
	// cfg is the LIST server's config; Keys is a fresh random keyring when
	// nil, and Stores the registry below.
	cfg Config
	// stores is the registry's config.
	stores stores.Config
	// store is the registry's one store.
	store stores.StaticStore
	// more are resources the registry knows without stores.
	more []*catalog.Resource
}

// newTestLists returns a LIST server over a static registry of o.store,
// without an apiserver: requests it does not answer are left to the
// caller. The registry ends with the test.
func newTestLists(t testing.TB, o testListsOptions) *Lists {
	t.Helper()
	cfg := o.cfg
	if cfg.Keys == nil {
		keys, err := paging.NewRandomKeyring()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Keys = keys
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := stores.NewStatic(ctx, o.stores, o.more, o.store)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Stores = reg
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newServeTestLists returns a Lists serving pods from a synced JSON store
// holding entries at rv (newTestLists).
func newServeTestLists(t testing.TB, cfg Config, entries []*snapshot.Entry, rv uint64) (*Lists, *snapshot.Store) {
	t.Helper()
	return newServeTestListsWith(t, cfg, stores.Config{}, 0, entries, rv)
}

// newServeTestListsWith is newServeTestLists with the registry's config
// scfg, the JSON store's published bytes, and more resources known to the
// registry (without stores). An entries of nil leaves the store unsynced.
func newServeTestListsWith(t testing.TB, cfg Config, scfg stores.Config, storeBytes int64, entries []*snapshot.Entry, rv uint64, more ...*catalog.Resource) (*Lists, *snapshot.Store) {
	t.Helper()
	store := snapshot.NewStore(snapshot.StoreConfig{})
	if entries != nil {
		store.Replace(entries, rv)
	}
	l := newTestLists(t, testListsOptions{cfg: cfg, stores: scfg, more: more, store: stores.StaticStore{
		Resource: catalog.NewResource(podsGVR, "Pod", true, false), Format: wire.JSON, Store: store, Bytes: storeBytes,
		Envelope: wire.ListEnvelope{APIVersion: "v1", Kind: "PodList"},
	}})
	return l, store
}

// testList is a decoded JSON list response.
type testList struct {
	Metadata metav1.ListMeta   `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// serveTest sends a LIST of pods with query q to l and returns whether l
// answered it, the recorder and the request (as l may have rewritten it).
func serveTest(l *Lists, path string, q url.Values, header http.Header) (bool, *httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodGet, path+"?"+q.Encode(), nil)
	for k, vs := range header {
		r.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	return l.ServeList(rec, r), rec, r
}

// An unlimited LIST is never cut short, whatever --list-scan-budget says:
// the apiserver never paginates a list without a limit. The budget only
// shortens pages of limited, selective lists.
func TestServeUnlimitedListIgnoresScanBudget(t *testing.T) {
	const n = 150000
	entries := make([]*snapshot.Entry, n)
	for i := range entries {
		entries[i] = testPod(fmt.Sprintf("ns-%03d", i%300), fmt.Sprintf("pod-%06d", i), uint64(i+1))
	}
	l, _ := newServeTestLists(t, Config{ScanBudget: 100000, LimitForRV0: true}, entries, n+1)
	tests := []struct {
		name         string
		q            url.Values
		wantItems    int
		wantContinue bool
	}{
		{name: "unlimited", q: url.Values{"resourceVersion": {"0"}}, wantItems: n},
		{name: "unlimited_selective", q: url.Values{"resourceVersion": {"0"}, "labelSelector": {"app=odd"}}, wantItems: n / 2},
		{name: "unlimited_selective_exact", q: url.Values{"resourceVersion": {fmt.Sprint(n + 1)}, "resourceVersionMatch": {"Exact"}, "labelSelector": {"app=odd"}}, wantItems: n / 2},
		{name: "limited_unselective", q: url.Values{"resourceVersion": {"0"}, "limit": {"120000"}}, wantItems: 120000, wantContinue: true},
		// A selector nothing matches: the budget ends the page early.
		{name: "limited_selective_budget", q: url.Values{"resourceVersion": {"0"}, "limit": {"10"}, "labelSelector": {"app=none"}}, wantItems: 0, wantContinue: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served, rec, _ := serveTest(l, "/api/v1/pods", tc.q, nil)
			if !served || rec.Code != http.StatusOK {
				t.Fatalf("served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
			}
			var list testList
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != tc.wantItems || (list.Metadata.Continue != "") != tc.wantContinue {
				t.Errorf("%d items, continue %q, remainingItemCount %v; want %d items, continue %v",
					len(list.Items), list.Metadata.Continue, list.Metadata.RemainingItemCount, tc.wantItems, tc.wantContinue)
			}
		})
	}
}

// TranslateContinue, which the edge calls for every request it does not
// offer to ServeList (impersonation, a denied or failed review), hands a
// listproxy continue token to the apiserver as its own token for the same
// position, or as a value it rejects as an invalid token.
func TestTranslateContinue(t *testing.T) {
	var entries []*snapshot.Entry
	for _, ns := range []string{"a", "b"} {
		for i := range 3 {
			entries = append(entries, testPod(ns, fmt.Sprintf("p%d", i), uint64(len(entries)+1)))
		}
	}
	const rv = 100
	l, _ := newServeTestLists(t, Config{}, entries, rv)
	// firstPage returns the continue token of the first page of path?q.
	firstPage := func(path string, q url.Values) string {
		q = maps.Clone(q)
		q.Set("limit", "1")
		q.Set("resourceVersion", fmt.Sprint(rv))
		q.Set("resourceVersionMatch", "NotOlderThan")
		_, rec, _ := serveTest(l, path, q, nil)
		var list testList
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || !paging.IsListproxyToken(list.Metadata.Continue) {
			t.Fatalf("first page of %s?%s: HTTP %d, continue %q, %v", path, q.Encode(), rec.Code, list.Metadata.Continue, err)
		}
		return list.Metadata.Continue
	}
	selector := url.Values{"fieldSelector": {"metadata.name=p1"}}
	nsToken := firstPage("/api/v1/namespaces/a/pods", url.Values{})
	selToken := firstPage("/api/v1/pods", selector)
	tests := []struct {
		name  string
		path  string
		q     url.Values
		token string
		want  string
	}{
		{name: "namespaced", path: "/api/v1/namespaces/a/pods", token: nsToken, want: paging.NativeContinue(rv, "p0")},
		{name: "selector", path: "/api/v1/pods", q: selector, token: selToken, want: paging.NativeContinue(rv, "a/p1")},
		{name: "other_namespace", path: "/api/v1/namespaces/b/pods", token: nsToken, want: paging.UndecodableContinue},
		{name: "other_selector", path: "/api/v1/pods", token: selToken, want: paging.UndecodableContinue},
		{name: "not_a_collection", path: "/api/v1/namespaces/a/pods/p0", token: nsToken, want: paging.UndecodableContinue},
		{name: "foreign_token_untouched", path: "/api/v1/pods", token: "native", want: "native"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := maps.Clone(tc.q)
			if q == nil {
				q = url.Values{}
			}
			q.Set("continue", tc.token)
			r := httptest.NewRequest(http.MethodGet, tc.path+"?"+q.Encode(), nil)
			l.TranslateContinue(r)
			if got := r.URL.Query().Get("continue"); got != tc.want {
				t.Errorf("continue %q, want %q", got, tc.want)
			}
		})
	}
}

// As the apiserver, a resourceVersion=0 list ignores limit unless
// --limit-for-resource-version-0 asks otherwise: a paginated answer turns
// client-go's reflector to exact relists.
func TestServeRV0Limit(t *testing.T) {
	var entries []*snapshot.Entry
	for i := range 20 {
		entries = append(entries, testPod("a", fmt.Sprintf("p%02d", i), uint64(i+1)))
	}
	tests := []struct {
		name         string
		limitForRV0  bool
		q            url.Values
		wantItems    int
		wantContinue bool
	}{
		{name: "default_ignores_limit", q: url.Values{"resourceVersion": {"0"}, "limit": {"5"}}, wantItems: 20},
		{name: "opt_in_paginates", limitForRV0: true, q: url.Values{"resourceVersion": {"0"}, "limit": {"5"}}, wantItems: 5, wantContinue: true},
		{name: "not_older_than_paginates", q: url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"5"}}, wantItems: 5, wantContinue: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newServeTestLists(t, Config{LimitForRV0: tc.limitForRV0}, entries, 30)
			served, rec, _ := serveTest(l, "/api/v1/pods", tc.q, nil)
			if !served || rec.Code != http.StatusOK {
				t.Fatalf("served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
			}
			var list testList
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != tc.wantItems || (list.Metadata.Continue != "") != tc.wantContinue {
				t.Errorf("%d items, continue %q; want %d items, continue %v", len(list.Items), list.Metadata.Continue, tc.wantItems, tc.wantContinue)
			}
		})
	}
}

// Answers from a snapshot carry the apiserver's Audit-Id (the caller's, or a
// new one) and deprecation warnings; a request that passes through carries
// neither from listproxy (the apiserver's answer has its own).
func TestServeAPIServerHeaders(t *testing.T) {
	l, _ := newServeTestLists(t, Config{}, []*snapshot.Entry{testPod("a", "p", 1)}, 10)
	pods, _ := l.stores.Lookup(podsGVR)
	pods.Warnings = []string{`v1 Pod is "deprecated"`}
	tests := []struct {
		name        string
		q           url.Values
		auditID     string
		wantServed  bool
		wantAuditID string // "*": any non-empty value
	}{
		{name: "served_echoes_audit_id", q: url.Values{"resourceVersion": {"0"}}, auditID: "caller-id", wantServed: true, wantAuditID: "caller-id"},
		{name: "served_mints_audit_id", q: url.Values{"resourceVersion": {"0"}}, wantServed: true, wantAuditID: "*"},
		{name: "status_from_snapshot", q: url.Values{"resourceVersion": {"99"}, "resourceVersionMatch": {"Exact"}, "continue": {"lp1.x"}}, wantServed: true, wantAuditID: "*"},
		{name: "pass_through", q: url.Values{"resourceVersion": {"5"}, "resourceVersionMatch": {"Exact"}}, auditID: "caller-id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.auditID != "" {
				h.Set("Audit-Id", tc.auditID)
			}
			served, rec, _ := serveTest(l, "/api/v1/pods", tc.q, h)
			if served != tc.wantServed {
				t.Fatalf("served %v, want %v (HTTP %d %s)", served, tc.wantServed, rec.Code, rec.Body.String())
			}
			gotID, gotWarnings := rec.Header().Get("Audit-Id"), rec.Header().Values("Warning")
			if !served {
				if gotID != "" || len(gotWarnings) != 0 {
					t.Errorf("pass-through left Audit-Id %q and Warning %q", gotID, gotWarnings)
				}
				return
			}
			if (tc.wantAuditID == "*" && gotID == "") || (tc.wantAuditID != "*" && gotID != tc.wantAuditID) {
				t.Errorf("Audit-Id %q, want %q", gotID, tc.wantAuditID)
			}
			if want := []string{`299 - "v1 Pod is \"deprecated\""`}; !slices.Equal(gotWarnings, want) {
				t.Errorf("Warning %q, want %q", gotWarnings, want)
			}
		})
	}
}
