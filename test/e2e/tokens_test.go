package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// Continue tokens across replicas and restarts, and the answers to tokens
// listproxy must refuse (docs/design.md "Continue tokens"; KEP-365).

const headerServedFrom = "X-Listproxy-Served-From"

// writeKeyFile writes a continue-token key file with one fresh key, in the
// format --continue-token-keys-file reads.
func writeKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "continue-token-keys")
	if err := framework.WriteContinueTokenKeyFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// listPage is one LIST answer: who served it, its list metadata and the
// keys ("namespace/name") and bytes of its items.
type listPage struct {
	servedFrom string
	meta       wire.ListMeta
	keys       []string
	items      [][]byte
}

// getList sends a JSON LIST and decodes a 200 answer.
func getList(ctx context.Context, c rawClient, path string, q url.Values) (listPage, error) {
	code, hdr, body, err := c.get(ctx, path, q, acceptJSON)
	if err != nil {
		return listPage{}, err
	}
	if code != http.StatusOK {
		return listPage{}, fmt.Errorf("GET %s?%s: HTTP %d (served from %q): %.400s", path, q.Encode(), code, hdr.Get(headerServedFrom), body)
	}
	p, err := decodePage(wire.JSON, body)
	if err != nil {
		return listPage{}, fmt.Errorf("GET %s?%s: %w", path, q.Encode(), err)
	}
	out := listPage{servedFrom: hdr.Get(headerServedFrom), meta: p.env.ListMeta, items: p.items}
	for _, raw := range p.items {
		var obj struct {
			Metadata struct{ Namespace, Name string }
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return listPage{}, fmt.Errorf("decode item: %w", err)
		}
		key := obj.Metadata.Name
		if obj.Metadata.Namespace != "" {
			key = obj.Metadata.Namespace + "/" + key
		}
		out.keys = append(out.keys, key)
	}
	return out, nil
}

// waitServed polls until listproxy answers q on path from a snapshot.
func waitServed(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := getList(ctx, c, path, q)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "served from " + p.servedFrom
		return p.servedFrom == "snapshot", nil
	})
	if err != nil {
		t.Fatalf("%s?%s never served from a snapshot (last: %s): %v", path, q.Encode(), last, err)
	}
}

// exactList is the apiserver's full list of path at exactly rv, no limit.
func exactList(ctx context.Context, t *testing.T, apic rawClient, path, rv string) listPage {
	t.Helper()
	p, err := getList(ctx, apic, path, url.Values{"resourceVersion": {rv}, "resourceVersionMatch": {"Exact"}})
	if err != nil {
		t.Fatalf("apiserver exact list at %s: %v", rv, err)
	}
	return p
}

// diffItems compares items by key and then byte for byte.
func diffItems(want, got listPage) string {
	if d := cmp.Diff(want.keys, got.keys); d != "" {
		return "keys (-want +got):\n" + d
	}
	for i := range want.items {
		if string(want.items[i]) != string(got.items[i]) {
			return fmt.Sprintf("item %s differs:\n  want %.300s\n  got  %.300s", want.keys[i], want.items[i], got.items[i])
		}
	}
	return ""
}

func TestTokenSharedAcrossReplicas(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 3, 100, 0, 0)
	keys := writeKeyFile(t)
	args := []string{"--continue-token-keys-file=" + keys, "--etcd-servers=" + cp.EtcdEndpoint, "--resources=pods"}
	lpA := framework.StartListproxy(t, cp, args...)
	lpB := framework.StartListproxy(t, cp, args...)
	a, b := newRawClient(t, lpA.Config()), newRawClient(t, lpB.Config())
	apic := newRawClient(t, cp.AdminConfig)
	ctx := context.Background()
	const path = "/api/v1/pods"
	const limit = "50"
	for _, c := range []rawClient{a, b} {
		waitServed(ctx, t, c, path, url.Values{"resourceVersion": {"0"}, "limit": {"1"}})
		waitServed(ctx, t, c, path, url.Values{"limit": {"1"}})
	}

	// firstTokens keeps, per mode, the continue token of A's first page
	// and that page, for the restart below.
	type issued struct {
		token string
		page  listPage
	}
	var fromA []issued
	for _, mode := range []struct {
		name  string
		rv    string // "" for a consistent read
		match string
		// unrelatedWrite moves etcd's revision past the pods' last change
		// before page 1, as other resources' writes do in a real cluster.
		unrelatedWrite bool
	}{
		// Latest: resourceVersion=0 ignores limit (as the apiserver), so
		// a paginated latest read asks NotOlderThan.
		{name: "latest", rv: "1", match: "NotOlderThan"},
		{name: "consistent", rv: ""},
		{name: "consistent_after_unrelated_write", rv: "", unrelatedWrite: true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.unrelatedWrite {
				if err := cp.CreateNamespace(ctx, "unrelated", nil); err != nil {
					t.Fatal(err)
				}
			}
			q := url.Values{"limit": {limit}}
			if mode.rv != "" {
				q.Set("resourceVersion", mode.rv)
			}
			if mode.match != "" {
				q.Set("resourceVersionMatch", mode.match)
			}
			first, err := getList(ctx, a, path, q)
			if err != nil {
				t.Fatalf("page 1 from A: %v", err)
			}
			if first.servedFrom != "snapshot" {
				t.Fatalf("page 1 from A served from %q, want snapshot", first.servedFrom)
			}
			if first.meta.Continue == "" || !strings.HasPrefix(first.meta.Continue, "lp1.") {
				t.Fatalf("page 1 from A: continue %q, want a listproxy token", first.meta.Continue)
			}
			fromA = append(fromA, issued{token: first.meta.Continue, page: first})
			union := listPage{keys: first.keys, items: first.items}
			served := map[string]int{}
			next := first.meta.Continue
			for n := 2; next != ""; n++ {
				p, err := getList(ctx, b, path, url.Values{"limit": {limit}, "continue": {next}})
				if err != nil {
					t.Fatalf("page %d from B: %v", n, err)
				}
				served[p.servedFrom]++
				// B holds the same data: a token shared across replicas
				// is one B opens and serves from its own snapshot. A
				// hand-off to the apiserver would be correct but would
				// prove nothing about sharing.
				if p.servedFrom != "snapshot" {
					t.Errorf("page %d from B: %s = %q, want snapshot", n, headerServedFrom, p.servedFrom)
				}
				if p.meta.ResourceVersion != first.meta.ResourceVersion {
					t.Errorf("page %d from B at resourceVersion %s, page 1 at %s", n, p.meta.ResourceVersion, first.meta.ResourceVersion)
				}
				union.keys = append(union.keys, p.keys...)
				union.items = append(union.items, p.items...)
				next = p.meta.Continue
			}
			t.Logf("walk at resourceVersion %s: page 1 from A's snapshot, pages 2.. from B: %v", first.meta.ResourceVersion, served)
			want := exactList(ctx, t, apic, path, first.meta.ResourceVersion)
			if len(want.keys) != 300 {
				t.Errorf("apiserver lists %d pods, want 300", len(want.keys))
			}
			if d := diffItems(want, union); d != "" {
				t.Errorf("pages from A then B differ from the apiserver's list at %s: %s", first.meta.ResourceVersion, d)
			}
		})
	}
	if t.Failed() {
		return
	}

	// A restarts as A' with the same keys: the snapshots behind A's tokens
	// are gone, so A' hands the rest of the list to the apiserver at the
	// token's resourceVersion.
	if err := lpA.Stop(); err != nil {
		t.Fatalf("stop A: %v", err)
	}
	lpA2 := framework.StartListproxy(t, cp, args...)
	a2 := newRawClient(t, lpA2.Config())
	for i, is := range fromA {
		first := is.page
		lastKey := first.keys[len(first.keys)-1]
		union := listPage{keys: first.keys, items: first.items}
		next := is.token
		for n := 2; next != ""; n++ {
			p, err := getList(ctx, a2, path, url.Values{"limit": {limit}, "continue": {next}})
			if err != nil {
				t.Fatalf("token %d, page %d from A': %v", i, n, err)
			}
			if n == 2 {
				t.Logf("token %d (resourceVersion %s) continued by A' from %q", i, first.meta.ResourceVersion, p.servedFrom)
				if p.servedFrom != "snapshot" && p.servedFrom != "apiserver" {
					t.Errorf("token %d: %s = %q", i, headerServedFrom, p.servedFrom)
				}
				if len(p.keys) == 0 || p.keys[0] <= lastKey {
					t.Errorf("token %d: A' continued with %v, want items strictly after %q", i, p.keys[:min(3, len(p.keys))], lastKey)
				}
			}
			if p.meta.ResourceVersion != first.meta.ResourceVersion {
				t.Errorf("token %d, page %d from A' at resourceVersion %s, want the token's %s", i, n, p.meta.ResourceVersion, first.meta.ResourceVersion)
			}
			union.keys = append(union.keys, p.keys...)
			union.items = append(union.items, p.items...)
			next = p.meta.Continue
		}
		want := exactList(ctx, t, apic, path, first.meta.ResourceVersion)
		if d := diffItems(want, union); d != "" {
			t.Errorf("token %d: page 1 from A then A' differ from the apiserver's list at %s: %s", i, first.meta.ResourceVersion, d)
		}
	}
}

// statusAnswer is an error answer: HTTP code, who sent it, and its Status.
type statusAnswer struct {
	code        int
	servedFrom  string
	contentType string
	status      metav1.Status
	raw         string
}

func getStatus(ctx context.Context, t *testing.T, c rawClient, path string, q url.Values) statusAnswer {
	t.Helper()
	code, hdr, body, err := c.get(ctx, path, q, acceptJSON)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	a := statusAnswer{code: code, servedFrom: hdr.Get(headerServedFrom), contentType: hdr.Get("Content-Type"), raw: string(body)}
	if code != http.StatusOK {
		if err := json.Unmarshal(body, &a.status); err != nil {
			t.Errorf("GET %s: HTTP %d body is not a Status: %v: %.300s", path, code, err, body)
		}
	}
	return a
}

// corrupt returns token with the character in its middle replaced by
// another base64url character, so the token still decodes but fails
// authentication (or, for a native token, JSON decoding).
func corrupt(token string) string {
	i := len(token) / 2
	c := byte('A')
	if token[i] == 'A' {
		c = 'B'
	}
	return token[:i] + string(c) + token[i+1:]
}

func TestBadContinueTokens(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 40, 0, 0)
	ctx := context.Background()
	args := []string{"--continue-token-keys-file=" + writeKeyFile(t), "--resources=pods,services,configmaps"}
	lp := framework.StartListproxy(t, cp, args...)
	// other seals with a different key.
	other := framework.StartListproxy(t, cp, "--continue-token-keys-file="+writeKeyFile(t), "--resources=pods")
	lpc, otherc := newRawClient(t, lp.Config()), newRawClient(t, other.Config())
	apic := newRawClient(t, cp.AdminConfig)

	const (
		allPods = "/api/v1/pods"
		ns0Pods = "/api/v1/namespaces/ns-0/pods"
	)
	// latest is a limited read of the latest snapshot (NotOlderThan: the
	// apiserver ignores limit at resourceVersion=0, and so does listproxy
	// by default).
	latest := func(extra ...string) url.Values {
		q := url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"10"}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return q
	}
	for _, c := range []rawClient{lpc, otherc} {
		waitServed(ctx, t, c, allPods, latest())
	}
	waitServed(ctx, t, lpc, "/api/v1/services", latest())
	// token returns the continue token of a first page.
	token := func(c rawClient, path string, q url.Values) string {
		t.Helper()
		p, err := getList(ctx, c, path, q)
		if err != nil {
			t.Fatal(err)
		}
		if p.servedFrom != "snapshot" || !strings.HasPrefix(p.meta.Continue, "lp1.") {
			t.Fatalf("%s?%s: served from %q with continue %q, want a listproxy token from a snapshot", path, q.Encode(), p.servedFrom, p.meta.Continue)
		}
		return p.meta.Continue
	}
	// A native token from the apiserver, for the apiserver's own answers.
	native := func(path string, q url.Values) string {
		t.Helper()
		q = url.Values{"limit": q["limit"], "labelSelector": q["labelSelector"]}
		p, err := getList(ctx, apic, path, q)
		if err != nil || p.meta.Continue == "" {
			t.Fatalf("apiserver first page of %s: continue %q, %v", path, p.meta.Continue, err)
		}
		return p.meta.Continue
	}

	good := token(lpc, allPods, latest())
	goodNative := native(allPods, latest())
	nsToken := token(lpc, ns0Pods, latest())
	selToken := token(lpc, allPods, latest("labelSelector", "app=a"))
	selNative := native(allPods, latest("labelSelector", "app=a"))
	fieldToken := token(lpc, allPods, latest("fieldSelector", "spec.nodeName=node-1", "limit", "3"))
	foreign := token(otherc, allPods, latest())
	huge := "lp1." + strings.Repeat("A", 5000)

	with := func(tok string, extra ...string) url.Values {
		q := url.Values{"limit": {"10"}, "continue": {tok}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return q
	}
	const invalidToken = "invalid continue token: continue key is not valid"
	tests := []struct {
		name     string
		path     string
		query    url.Values
		wantCode int
		// wantReason and wantMessage (a substring) describe listproxy's Status.
		wantReason  metav1.StatusReason
		wantMessage string
		// apiPath and apiQuery, when set, are the equivalent native request;
		// the apiserver's Status must then equal listproxy's, except that
		// messages need only share wantMessage when matchPrefix is set.
		apiPath     string
		apiQuery    url.Values
		matchPrefix bool
		// passesThrough: listproxy does not serve this request itself.
		passesThrough bool
	}{
		{
			name: "tampered", path: allPods, query: with(corrupt(good)),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
			apiPath: allPods, apiQuery: with(corrupt(goodNative)), matchPrefix: true,
		},
		{
			name: "truncated", path: allPods, query: with(good[:len(good)/2]),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
			apiPath: allPods, apiQuery: with(goodNative[:len(goodNative)/2]), matchPrefix: true,
		},
		{
			name: "garbage", path: allPods, query: with("lp1.!!!"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
			apiPath: allPods, apiQuery: with("!!!"), matchPrefix: true,
		},
		{
			name: "sealed_with_another_key", path: allPods, query: with(foreign),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "huge", path: allPods, query: with(huge),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
			apiPath: allPods, apiQuery: with(strings.Repeat("A", 5000)), matchPrefix: true,
		},
		{
			name: "another_label_selector", path: allPods, query: with(selToken, "labelSelector", "app=b"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "label_selector_dropped", path: allPods, query: with(selToken),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "another_field_selector", path: allPods, query: with(fieldToken, "fieldSelector", "spec.nodeName=node-2"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "another_namespace", path: "/api/v1/namespaces/ns-1/pods", query: with(nsToken),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "namespaced_token_cluster_wide", path: allPods, query: with(nsToken),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "another_resource", path: "/api/v1/services", query: with(good),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		{
			name: "another_resource_not_yet_synced", path: "/api/v1/namespaces/ns-0/configmaps", query: with(nsToken),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken,
		},
		// The same mismatches on requests listproxy does not serve itself
		// (an extra query parameter, a resource not cached): the token is
		// handed to the apiserver only if it belongs to the request.
		{
			name: "another_resource_passed_through", path: "/api/v1/namespaces/ns-0/secrets", query: with(nsToken),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken, passesThrough: true,
		},
		{
			name: "another_namespace_passed_through", path: "/api/v1/namespaces/ns-1/pods", query: with(nsToken, "pretty", "true"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken, passesThrough: true,
		},
		{
			name: "another_label_selector_passed_through", path: allPods, query: with(selToken, "labelSelector", "app=b", "pretty", "true"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: invalidToken, passesThrough: true,
		},
		{
			name: "resource_version_set", path: allPods, query: with(good, "resourceVersion", "5"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: "specifying resource version is not allowed when using continue",
			apiPath: allPods, apiQuery: with(goodNative, "resourceVersion", "5"),
		},
		{
			name: "resource_version_match_set", path: allPods, query: with(good, "resourceVersionMatch", "NotOlderThan"),
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantMessage: "resourceVersionMatch is forbidden when continue is provided",
			apiPath: allPods, apiQuery: with(goodNative, "resourceVersionMatch", "NotOlderThan"),
		},
		{
			name: "resource_version_and_match_set", path: allPods, query: with(good, "resourceVersion", "5", "resourceVersionMatch", "Exact"),
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantMessage: "resourceVersionMatch is forbidden when continue is provided",
			apiPath: allPods, apiQuery: with(goodNative, "resourceVersion", "5", "resourceVersionMatch", "Exact"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := getStatus(ctx, t, lpc, tc.path, tc.query)
			if got.code != tc.wantCode {
				t.Fatalf("HTTP %d (served from %q), want %d: %.400s", got.code, got.servedFrom, tc.wantCode, got.raw)
			}
			if got.status.Kind != "Status" || got.status.Status != metav1.StatusFailure || got.status.Code != int32(tc.wantCode) || got.status.Reason != tc.wantReason {
				t.Errorf("Status kind %q status %q code %d reason %q, want Status Failure %d %q", got.status.Kind, got.status.Status, got.status.Code, got.status.Reason, tc.wantCode, tc.wantReason)
			}
			// The apiserver cannot read listproxy tokens: listproxy answers,
			// or, for a request it does not serve itself, hands the apiserver a
			// token it rejects in its own order of checks.
			wantFrom := "snapshot"
			if tc.passesThrough {
				wantFrom = "apiserver"
			}
			if got.servedFrom != wantFrom {
				t.Errorf("%s = %q, want %s", headerServedFrom, got.servedFrom, wantFrom)
			}
			if !strings.Contains(got.status.Message, tc.wantMessage) {
				t.Errorf("message %q, want it to contain %q", got.status.Message, tc.wantMessage)
			}
			if tc.apiPath == "" {
				return
			}
			want := getStatus(ctx, t, apic, tc.apiPath, tc.apiQuery)
			opts := []cmp.Option{}
			if tc.matchPrefix {
				opts = append(opts, cmpopts.IgnoreFields(metav1.Status{}, "Message"))
				if !strings.Contains(want.status.Message, tc.wantMessage) {
					t.Errorf("apiserver's message %q does not contain %q", want.status.Message, tc.wantMessage)
				}
			}
			if diff := cmp.Diff(want.status, got.status, opts...); diff != "" {
				t.Errorf("Status differs from the apiserver's (-apiserver +listproxy):\n%s", diff)
			}
			if want.code != got.code || want.contentType != got.contentType {
				t.Errorf("HTTP %d %q, apiserver %d %q", got.code, got.contentType, want.code, want.contentType)
			}
			t.Logf("listproxy: %s\napiserver: %s", got.status.Message, want.status.Message)
		})
	}

	// Equivalent spellings of a selector are the same list.
	t.Run("equivalent_label_selector", func(t *testing.T) {
		tok := token(lpc, allPods, latest("labelSelector", "app=a,tier=x"))
		p, err := getList(ctx, lpc, allPods, with(tok, "labelSelector", "tier=x,app=a"))
		if err != nil {
			t.Fatalf("continue with the selector's terms reordered: %v", err)
		}
		if p.servedFrom != "snapshot" {
			t.Errorf("served from %q, want snapshot", p.servedFrom)
		}
	})
	// The apiserver's own token passes through; with selectors it continues.
	t.Run("native_token_passes_through", func(t *testing.T) {
		p, err := getList(ctx, lpc, allPods, with(selNative, "labelSelector", "app=a"))
		if err != nil {
			t.Fatal(err)
		}
		if p.servedFrom != "apiserver" {
			t.Errorf("served from %q, want apiserver", p.servedFrom)
		}
	})

	// Nothing broke: a full walk is still served from the snapshot and
	// equals the apiserver's list at its resourceVersion.
	t.Run("still_serving", func(t *testing.T) {
		first, err := getList(ctx, lpc, allPods, url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"25"}})
		if err != nil {
			t.Fatal(err)
		}
		union := listPage{keys: first.keys, items: first.items}
		for next, n := first.meta.Continue, 2; next != ""; n++ {
			p, err := getList(ctx, lpc, allPods, url.Values{"limit": {"25"}, "continue": {next}})
			if err != nil {
				t.Fatalf("page %d: %v", n, err)
			}
			if p.servedFrom != "snapshot" {
				t.Errorf("page %d served from %q, want snapshot", n, p.servedFrom)
			}
			union.keys = append(union.keys, p.keys...)
			union.items = append(union.items, p.items...)
			next = p.meta.Continue
		}
		if first.servedFrom != "snapshot" {
			t.Errorf("page 1 served from %q, want snapshot", first.servedFrom)
		}
		if d := diffItems(exactList(ctx, t, apic, allPods, first.meta.ResourceVersion), union); d != "" {
			t.Errorf("walk differs from the apiserver at %s: %s", first.meta.ResourceVersion, d)
		}
		if _, err := strconv.ParseUint(first.meta.ResourceVersion, 10, 64); err != nil {
			t.Errorf("resourceVersion %q", first.meta.ResourceVersion)
		}
	})
}
