package lists

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	shardparser "k8s.io/apiserver/pkg/sharding"

	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// Shard selectors as a sharded client spells them; the apiserver echoes the
// canonical form (spaces after the commas).
const (
	shardLow     = "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')"
	shardLowEcho = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	shardHigh    = "shardRange(object.metadata.uid,'0x8000000000000000','0x10000000000000000')"
)

// shardPod is a pod entry with a uid of its own, random-looking as the
// apiserver's (uids that differ in their last bytes only hash close
// together).
func shardPod(ns, name string, rv uint64) *snapshot.Entry {
	h := sha256.Sum256([]byte(ns + "/" + name))
	uid := fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	raw := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":"%d"}}`, name, ns, uid, rv)
	return snapshot.NewEntry(ns, name, rv, nil, nil, nil, []byte(raw))
}

// inShard lists the names of entries whose object sel selects, as the
// apiserver's selector decides on the object.
func inShard(t *testing.T, sel string, entries []*snapshot.Entry) []string {
	t.Helper()
	s, err := shardparser.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(e.Raw, &obj); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Matches(&obj); err != nil {
			t.Fatal(err)
		} else if ok {
			names = append(names, e.Key)
		}
	}
	return names
}

// itemKeys are the namespace/name keys of a JSON list's items.
func itemKeys(t *testing.T, list testList) []string {
	t.Helper()
	var keys []string
	for _, raw := range list.Items {
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Namespace+"/"+obj.Name)
	}
	return keys
}

// A LIST with a shard selector is served from the snapshot with the items
// of its shard, metadata.shardInfo echoing the selector's canonical form,
// and, as any selective list, no remainingItemCount; a walk in pages of 7
// returns each item of the shard once, its continue tokens binding the
// selector (an equivalent spelling continues it); and the two halves of
// the hash space are the whole list.
func TestServeShardSelector(t *testing.T) {
	var entries []*snapshot.Entry
	for _, ns := range []string{"a", "b", "c"} {
		for i := range 20 {
			entries = append(entries, shardPod(ns, fmt.Sprintf("p%02d", i), uint64(len(entries)+1)))
		}
	}
	l, _ := newServeTestLists(t, DefaultConfig(), entries, 100)

	var union []string
	for _, sel := range []string{shardLow, shardHigh} {
		want := inShard(t, sel, entries)
		if len(want) == 0 || len(want) == len(entries) {
			t.Fatalf("%s selects %d of %d pods: not a test", sel, len(want), len(entries))
		}
		// The whole shard in one page.
		served, rec, _ := serveTest(l, "/api/v1/pods", url.Values{"shardSelector": {sel}, "resourceVersion": {"0"}}, nil)
		var list testList
		if !served || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &list) != nil {
			t.Fatalf("%s: served %v, HTTP %d: %s", sel, served, rec.Code, rec.Body.String())
		}
		if got := itemKeys(t, list); !slices.Equal(got, want) {
			t.Errorf("%s: items %v, want %v", sel, got, want)
		}
		echo, _ := shardparser.Parse(sel)
		if list.Metadata.ShardInfo == nil || list.Metadata.ShardInfo.Selector != echo.String() {
			t.Errorf("%s: shardInfo %+v, want selector %q", sel, list.Metadata.ShardInfo, echo.String())
		}

		// A walk in pages of 7, continued with the selector spelled as
		// the apiserver echoes it.
		var walked []string
		q := url.Values{"shardSelector": {sel}, "limit": {"7"}, "resourceVersion": {"100"}, "resourceVersionMatch": {"Exact"}}
		for page := 0; ; page++ {
			served, rec, _ := serveTest(l, "/api/v1/pods", q, nil)
			var list testList
			if !served || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &list) != nil {
				t.Fatalf("%s page %d: served %v, HTTP %d: %s", sel, page, served, rec.Code, rec.Body.String())
			}
			if list.Metadata.RemainingItemCount != nil {
				t.Errorf("%s page %d: remainingItemCount %d, want none", sel, page, *list.Metadata.RemainingItemCount)
			}
			if list.Metadata.ShardInfo == nil {
				t.Errorf("%s page %d: no shardInfo", sel, page)
			}
			walked = append(walked, itemKeys(t, list)...)
			if list.Metadata.Continue == "" {
				break
			}
			q = url.Values{"shardSelector": {echo.String()}, "limit": {"7"}, "continue": {list.Metadata.Continue}}
		}
		if !slices.Equal(walked, want) {
			t.Errorf("%s: walk returned %v, want %v", sel, walked, want)
		}
		union = append(union, walked...)
	}
	slices.Sort(union)
	var all []string
	for _, e := range entries {
		all = append(all, e.Key)
	}
	if !slices.Equal(union, all) {
		t.Errorf("the two halves hold %v, want every pod once: %v", union, all)
	}
}

// A continue token belongs to its shard selector as to its label and field
// selectors: continued with another shard selector, or with none, or a
// token of an unsharded list continued with one, gets the apiserver's 400
// for a continue key that does not belong to the list (listproxy_lists_total
// reason invalid_continue).
func TestShardSelectorContinueMismatch(t *testing.T) {
	var entries []*snapshot.Entry
	for i := range 40 {
		entries = append(entries, shardPod("a", fmt.Sprintf("p%02d", i), uint64(i+1)))
	}
	metrics, reg := newTestListMetrics(t)
	l, _ := newServeTestLists(t, Config{ServeShardSelectors: true, Metrics: metrics}, entries, 100)
	firstToken := func(q url.Values) string {
		q.Set("limit", "3")
		q.Set("resourceVersion", "100")
		q.Set("resourceVersionMatch", "Exact")
		served, rec, _ := serveTest(l, "/api/v1/pods", q, nil)
		var list testList
		if !served || json.Unmarshal(rec.Body.Bytes(), &list) != nil || !paging.IsListproxyToken(list.Metadata.Continue) {
			t.Fatalf("first page of %v: served %v, HTTP %d: %s", q, served, rec.Code, rec.Body.String())
		}
		return list.Metadata.Continue
	}
	low := firstToken(url.Values{"shardSelector": {shardLow}})
	whole := firstToken(url.Values{})
	for _, tc := range []struct {
		name, token, shard string
		wantCode           int
	}{
		{name: "same_shard", token: low, shard: shardLow, wantCode: http.StatusOK},
		{name: "same_shard_canonical", token: low, shard: shardLowEcho, wantCode: http.StatusOK},
		{name: "other_shard", token: low, shard: shardHigh, wantCode: http.StatusBadRequest},
		{name: "no_shard", token: low, wantCode: http.StatusBadRequest},
		{name: "shard_on_whole_list", token: whole, shard: shardLow, wantCode: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{"limit": {"3"}, "continue": {tc.token}}
			if tc.shard != "" {
				q.Set("shardSelector", tc.shard)
			}
			served, rec, _ := serveTest(l, "/api/v1/pods", q, nil)
			if !served || rec.Code != tc.wantCode {
				t.Fatalf("served %v, HTTP %d, want %d: %s", served, rec.Code, tc.wantCode, rec.Body.String())
			}
			if tc.wantCode != http.StatusBadRequest {
				return
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatal(err)
			}
			const want = "invalid continue token: continue key is not valid: token does not match the request: selector"
			if status.Reason != metav1.StatusReasonBadRequest || status.Message != want {
				t.Errorf("Status %s %q, want BadRequest %q", status.Reason, status.Message, want)
			}
		})
	}
	if n := counterValue(t, reg, "listproxy_lists_total", map[string]string{"resource": "pods", "source": "snapshot", "reason": "invalid_continue"}); n != 3 {
		t.Errorf("listproxy_lists_total{source=snapshot,reason=invalid_continue} = %v, want 3", n)
	}
}

// A shard selector that does not parse gets the apiserver's 500 from
// listproxy, whether or not the request carries a token of ours (an
// apiserver without the gate would ignore it), after the apiserver's
// earlier checks: invalid options without a token of ours pass through for
// the apiserver's 422. With serving shard selectors off, every LIST with
// one passes through (reason shard_selector), a valid one or not.
func TestShardSelectorRejectedOrPassedThrough(t *testing.T) {
	entries := []*snapshot.Entry{shardPod("a", "p0", 1), shardPod("a", "p1", 2)}
	metrics, reg := newTestListMetrics(t)
	l, _ := newServeTestLists(t, Config{ServeShardSelectors: true, Metrics: metrics}, entries, 100)
	token := func() string {
		served, rec, _ := serveTest(l, "/api/v1/pods", url.Values{"limit": {"1"}, "resourceVersion": {"100"}, "resourceVersionMatch": {"Exact"}}, nil)
		var list testList
		if !served || json.Unmarshal(rec.Body.Bytes(), &list) != nil || list.Metadata.Continue == "" {
			t.Fatalf("first page: served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
		}
		return list.Metadata.Continue
	}()
	const bad = "shardRange(object.metadata.name,'0x0000000000000000','0x8000000000000000')"
	_, parseErr := shardparser.Parse(bad)
	wantMessage := "invalid shard selector: " + parseErr.Error()
	for _, tc := range []struct {
		name string
		q    url.Values
	}{
		{name: "first_page", q: url.Values{"shardSelector": {bad}}},
		{name: "blank", q: url.Values{"shardSelector": {"  "}}},
		{name: "our_token", q: url.Values{"shardSelector": {bad}, "continue": {token}}},
		{name: "our_broken_token", q: url.Values{"shardSelector": {bad}, "continue": {token + "x"}}},
		{name: "exact_read", q: url.Values{"shardSelector": {bad}, "resourceVersion": {"100"}, "resourceVersionMatch": {"Exact"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served, rec, _ := serveTest(l, "/api/v1/pods", tc.q, nil)
			if !served || rec.Code != http.StatusInternalServerError {
				t.Fatalf("served %v, HTTP %d, want 500: %s", served, rec.Code, rec.Body.String())
			}
			var status map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatal(err)
			}
			if _, ok := status["reason"]; ok || status["code"] != float64(500) || status["status"] != "Failure" {
				t.Errorf("Status %s, want code 500 without a reason", rec.Body.String())
			}
			if msg, _ := status["message"].(string); tc.name != "blank" && msg != wantMessage || !strings.HasPrefix(msg, "invalid shard selector: ") {
				t.Errorf("message %q, want %q", msg, wantMessage)
			}
		})
	}
	if n := counterValue(t, reg, "listproxy_lists_total", map[string]string{"resource": "pods", "source": "snapshot", "reason": "invalid_shard_selector"}); n != 5 {
		t.Errorf("listproxy_lists_total{source=snapshot,reason=invalid_shard_selector} = %v, want 5", n)
	}
	// The apiserver's 422 comes first.
	if served, rec, _ := serveTest(l, "/api/v1/pods", url.Values{"shardSelector": {bad}, "resourceVersionMatch": {"Exact"}}, nil); served {
		t.Errorf("invalid options with an invalid shard selector: served HTTP %d, want passed through", rec.Code)
	}

	off, _ := newServeTestLists(t, Config{ServeShardSelectors: false, Metrics: metrics}, entries, 100)
	for _, sel := range []string{shardLow, bad} {
		r := url.Values{"shardSelector": {sel}, "resourceVersion": {"0"}}
		if served, rec, _ := serveTest(off, "/api/v1/pods", r, nil); served {
			t.Errorf("serving shard selectors off, %s: served HTTP %d", sel, rec.Code)
		}
	}
	if n := counterValue(t, reg, "listproxy_lists_total", map[string]string{"source": "apiserver", "reason": "shard_selector"}); n != 2 {
		t.Errorf("listproxy_lists_total{source=apiserver,reason=shard_selector} = %v, want 2", n)
	}
	if served, rec, _ := serveTest(off, "/api/v1/pods", url.Values{"resourceVersion": {"0"}, "shardSelector": {""}}, nil); !served || rec.Code != http.StatusOK {
		t.Errorf("serving shard selectors off, an empty shardSelector (none): served %v, HTTP %d", served, rec.Code)
	}
}

// newTestListMetrics returns list metrics registered with a registry of
// their own.
func newTestListMetrics(t *testing.T) (*ListMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewListMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// A token of a sharded walk that passes through (serving shard selectors
// turned off between its pages, or another replica with it off) is
// handed to the apiserver as its own token for the same position, with
// the shard selector still bound: under another shard selector it becomes
// a token the apiserver refuses, and without one listproxy refuses it.
func TestTranslateShardedContinue(t *testing.T) {
	var entries []*snapshot.Entry
	for i := range 20 {
		entries = append(entries, shardPod("a", fmt.Sprintf("p%02d", i), uint64(i+1)))
	}
	keys, err := paging.NewRandomKeyring()
	if err != nil {
		t.Fatal(err)
	}
	on, _ := newServeTestLists(t, Config{ServeShardSelectors: true, Keys: keys}, entries, 100)
	off, _ := newServeTestLists(t, Config{ServeShardSelectors: false, Keys: keys}, entries, 100)
	q := url.Values{"shardSelector": {shardLow}, "limit": {"2"}, "resourceVersion": {"100"}, "resourceVersionMatch": {"Exact"}}
	served, rec, _ := serveTest(on, "/api/v1/pods", q, nil)
	var list testList
	if !served || json.Unmarshal(rec.Body.Bytes(), &list) != nil || list.Metadata.Continue == "" {
		t.Fatalf("first page: served %v, HTTP %d: %s", served, rec.Code, rec.Body.String())
	}
	last := itemKeys(t, list)[1]
	for _, tc := range []struct {
		shard, want string
	}{
		{shardLowEcho, paging.NativeContinue(100, last)},
		{shardHigh, paging.UndecodableContinue},
	} {
		q := url.Values{"limit": {"2"}, "continue": {list.Metadata.Continue}, "shardSelector": {tc.shard}}
		served, _, r := serveTest(off, "/api/v1/pods", q, nil)
		if served {
			t.Fatalf("shard selector %q with serving them off: served", tc.shard)
		}
		if got := r.URL.Query().Get("continue"); got != tc.want {
			t.Errorf("shard selector %q: continue %q, want %q", tc.shard, got, tc.want)
		}
	}
	// Without a shard selector the list is listproxy's to continue, and
	// the token is another list's.
	if served, rec, _ := serveTest(off, "/api/v1/pods", url.Values{"limit": {"2"}, "continue": {list.Metadata.Continue}}, nil); !served || rec.Code != http.StatusBadRequest {
		t.Errorf("without a shard selector: served %v, HTTP %d; want the apiserver's 400", served, rec.Code)
	}
}
