package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/test/framework"
)

// The bad input catalogue: malformed requests sent to
// listproxy get a Kubernetes Status with the right code, the same answer the
// apiserver gives to the same request (the oracle), and nothing breaks.

// badAnswer is one answer to a raw request.
type badAnswer struct {
	code        int
	servedFrom  string
	contentType string
	body        []byte
	status      *metav1.Status // the body, when it is a JSON Status
}

func (a badAnswer) String() string {
	if a.status != nil {
		return fmt.Sprintf("%d %s (%s) %.160q", a.code, a.status.Reason, a.servedFrom, a.status.Message)
	}
	return fmt.Sprintf("%d (%s) %s %.80q", a.code, a.servedFrom, a.contentType, a.body)
}

// rawGetter sends GET requests with an already-escaped path and query, and
// does not follow redirects, so that every answer is seen as sent.
type rawGetter struct {
	base   string
	client *http.Client
}

func newRawGetter(t *testing.T, c rawClient) rawGetter {
	t.Helper()
	hc := *c.client
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return rawGetter{base: c.base, client: &hc}
}

func (g rawGetter) get(ctx context.Context, t *testing.T, path, rawQuery, accept string) badAnswer {
	t.Helper()
	u := g.base + path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatalf("request %.200s: %v", u, err)
	}
	if accept == "" {
		accept = acceptJSON
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "listproxy-e2e")
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("GET %.200s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %.200s: read body: %v", u, err)
	}
	a := badAnswer{code: resp.StatusCode, servedFrom: resp.Header.Get(headerServedFrom), contentType: resp.Header.Get("Content-Type"), body: body}
	if resp.StatusCode != http.StatusOK && strings.HasPrefix(a.contentType, "application/json") {
		var s metav1.Status
		if err := json.Unmarshal(body, &s); err == nil && s.Kind == "Status" {
			a.status = &s
		}
	}
	return a
}

// oracle says which request the apiserver's answer is taken from.
type oracle int

const (
	// sameRequest: the apiserver gets the request listproxy got.
	sameRequest oracle = iota
	// nativeRequest: the request carries a listproxy continue token; the
	// apiserver gets apiQuery instead, the same request with a native
	// token of the same kind of damage.
	nativeRequest
	// noOracle: the apiserver has no equivalent request.
	noOracle
)

// releaseAnswer is an apiserver release's own answer to a bad input where
// it differs from the default release's (TestBadInputCatalogue's on).
type releaseAnswer struct {
	code    int
	reason  metav1.StatusReason
	from    string
	message string // "" keeps the case's wantMessage
	// apiNotStatus: the apiserver's answer is not a Status (its timeout
	// filter's text); only the codes are compared.
	apiNotStatus bool
}

// rvParse500 is 1.31's answer to a resourceVersion that is not a number: a
// Status with code 500 and no reason (later releases: 400 BadRequest).
var rvParse500 = releaseAnswer{code: http.StatusInternalServerError, from: "apiserver"}

// apiserverRelease returns cp's apiserver's "major.minor".
func apiserverRelease(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	v, err := cp.Clientset(framework.UserAdmin).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+")
}

func TestBadInputCatalogue(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 30, 0, 0)
	ctx := context.Background()
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	lpc := newRawClient(t, lp.Config())
	// The apiserver over HTTP/1.1, as clients reach listproxy, so that
	// transport limits (header sizes) are the same on both sides.
	apiCfg := *cp.AdminConfig
	apiCfg.NextProtos = []string{"http/1.1"}
	apic := newRawClient(t, &apiCfg)
	lpg, apig := newRawGetter(t, lpc), newRawGetter(t, apic)

	const (
		allPods  = "/api/v1/pods"
		ns0Pods  = "/api/v1/namespaces/ns-0/pods"
		services = "/api/v1/services"
	)
	warmUp(ctx, t, lpc, []target{{name: "pods", path: allPods}})
	waitServed(ctx, t, lpc, allPods, url.Values{"limit": {"1"}})

	// Tokens: listproxy's own, and the apiserver's for the same list.
	first, err := getList(ctx, lpc, allPods, url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"5"}})
	if err != nil || first.servedFrom != "snapshot" || !strings.HasPrefix(first.meta.Continue, "lp1.") {
		t.Fatalf("first page from listproxy: served from %q, continue %q, %v", first.servedFrom, first.meta.Continue, err)
	}
	lpToken := first.meta.Continue
	nativePage, err := getList(ctx, apic, allPods, url.Values{"limit": {"5"}})
	if err != nil || nativePage.meta.Continue == "" {
		t.Fatalf("first page from the apiserver: continue %q, %v", nativePage.meta.Continue, err)
	}
	nativeToken := nativePage.meta.Continue
	rv, err := strconv.ParseUint(nativePage.meta.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", nativePage.meta.ResourceVersion, err)
	}
	randomB64 := func(n int) string {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	forged := randomB64(96)
	big := strings.Repeat("A", 100<<10)   // under net/http's 1 MiB header limit
	huge := strings.Repeat("A", 1100<<10) // over it
	segment10K := strings.Repeat("a", 10<<10)
	cont := func(token string, extra ...string) string {
		q := url.Values{"limit": {"10"}, "continue": {token}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return q.Encode()
	}
	qs := func(kv ...string) string {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q.Encode()
	}

	const (
		fromAPI   = "apiserver"
		fromLP    = "snapshot" // listproxy's own answer
		fromNoOne = ""         // net/http refused it before any handler
		anyFrom   = "*"        // not checked
	)
	tests := []struct {
		name   string
		path   string // escaped
		query  string // encoded
		accept string // "" is application/json
		// wantCode, wantReason and wantFrom describe listproxy's answer. An
		// answer other than 200 must be a JSON Status with wantCode and
		// wantReason, unless notStatus: then the apiserver does not send a
		// Status either.
		wantCode   int
		wantReason metav1.StatusReason
		notStatus  bool
		wantFrom   string
		oracle     oracle
		apiQuery   string // for nativeRequest
		// messageDiffers, when set, says why the Status messages legitimately
		// differ; they must then both contain wantMessage.
		messageDiffers string
		wantMessage    string
		// on holds, per apiserver release ("1.31"), its own answer where it
		// differs from the default release's; listproxy must give that one.
		on map[string]releaseAnswer
	}{
		// Malformed and oversized paths. listproxy serves only regular
		// collection paths; everything else is the apiserver's to answer,
		// including its plain-text 404 and its 500 for "..".
		{name: "path_segment_10KB_namespace", path: "/api/v1/namespaces/" + segment10K + "/pods", wantCode: http.StatusOK, wantFrom: fromAPI},
		{name: "path_segment_10KB_resource", path: "/api/v1/" + segment10K, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "path_double_slash", path: "/api/v1//pods", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "path_leading_double_slash", path: "//api/v1/pods", wantCode: http.StatusNotFound, notStatus: true, wantFrom: fromAPI},
		{name: "path_trailing_slash", path: "/api/v1/pods/", wantCode: http.StatusOK, wantFrom: fromAPI},
		// A namespace named NUL has no pods; listproxy says so from its
		// snapshot, as the apiserver does from its storage.
		{name: "path_nul_namespace", path: "/api/v1/namespaces/%00/pods", wantCode: http.StatusOK, wantFrom: fromLP},
		{name: "path_nul_resource", path: "/api/v1/pods%00", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		// 1.31 lists a namespace named ".." (it has no pods).
		{name: "path_dot_dot_namespace", path: "/api/v1/namespaces/../pods", wantCode: http.StatusInternalServerError, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": {code: http.StatusOK, from: fromAPI}}},
		{name: "path_dot_dot_escaped", path: "/api/v1/namespaces/%2e%2e/pods", wantCode: http.StatusInternalServerError, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": {code: http.StatusOK, from: fromAPI}}},
		{name: "path_traversal", path: "/api/v1/../../../etc/passwd", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},

		// Unknown groups, versions and resources.
		{name: "unknown_group", path: "/apis/bogus.example.com/v1/widgets", wantCode: http.StatusNotFound, notStatus: true, wantFrom: fromAPI},
		{name: "unknown_group_version", path: "/apis/apps/v9/deployments", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "unknown_core_version", path: "/api/v2/pods", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "unknown_resource", path: "/api/v1/bogus", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "unknown_resource_namespaced", path: "/api/v1/namespaces/ns-0/bogus", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},
		{name: "cluster_scoped_under_namespace", path: "/api/v1/namespaces/ns-0/nodes", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound, wantFrom: fromAPI},

		// limit.
		{name: "limit_negative", path: allPods, query: qs("limit", "-1"), wantCode: http.StatusOK, wantFrom: fromAPI},
		{name: "limit_max_int64", path: allPods, query: qs("limit", "9223372036854775807"), wantCode: http.StatusOK, wantFrom: fromLP},
		{name: "limit_overflow", path: allPods, query: qs("limit", "99999999999999999999"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "limit_non_numeric", path: allPods, query: qs("limit", "abc"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "limit_fraction", path: allPods, query: qs("limit", "1.5"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "limit_repeated", path: allPods, query: "limit=1&limit=2", wantCode: http.StatusOK, wantFrom: fromAPI},

		// resourceVersion and resourceVersionMatch.
		{name: "rv_non_numeric", path: allPods, query: qs("resourceVersion", "abc"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": rvParse500}},
		{name: "rv_negative", path: allPods, query: qs("resourceVersion", "-1"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": rvParse500}},
		{name: "rv_exponent", path: allPods, query: qs("resourceVersion", "1e3"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": rvParse500}},
		{name: "rv_overflow", path: allPods, query: qs("resourceVersion", "99999999999999999999"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI,
			on: map[string]releaseAnswer{"1.31": rvParse500}},
		{name: "rv_non_numeric_with_limit", path: allPods, query: qs("resourceVersion", "abc", "limit", "5"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "match_exact_rv_0", path: allPods, query: qs("resourceVersion", "0", "resourceVersionMatch", "Exact"), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantFrom: fromAPI},
		{name: "match_without_rv", path: allPods, query: qs("resourceVersionMatch", "NotOlderThan"), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantFrom: fromAPI},
		{name: "match_bogus", path: allPods, query: qs("resourceVersion", "1", "resourceVersionMatch", "Bogus"), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantFrom: fromAPI},
		{name: "match_exact_rv_non_numeric", path: allPods, query: qs("resourceVersion", "abc", "resourceVersionMatch", "Exact"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "match_exact_rv_future", path: allPods, query: qs("resourceVersion", strconv.FormatUint(rv+1_000_000, 10), "resourceVersionMatch", "Exact", "limit", "1"), wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout, wantFrom: fromAPI,
			messageDiffers: "the message names the apiserver's current resourceVersion, which its own lease writes move between the two requests", wantMessage: "Too large resource version",
			// 1.31 reads an exact resourceVersion from etcd, which refuses a future revision.
			on: map[string]releaseAnswer{"1.31": {code: http.StatusInternalServerError, from: fromAPI, message: "required revision is a future revision"}}},
		{name: "match_not_older_than_rv_future", path: allPods, query: qs("resourceVersion", strconv.FormatUint(rv+1_000_000, 10), "resourceVersionMatch", "NotOlderThan"), wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout, wantFrom: fromLP,
			messageDiffers: "the message names the current resourceVersion, listproxy's snapshot's and the apiserver's cache's", wantMessage: "Too large resource version",
			// 1.31 holds the request until its request timeout (60s) ends it
			// with the timeout filter's plain-text 504; listproxy answers the
			// same code after its own wait, as a Status a client can read.
			on: map[string]releaseAnswer{"1.31": {code: http.StatusGatewayTimeout, reason: metav1.StatusReasonTimeout, from: fromLP, message: "Too large resource version", apiNotStatus: true}}},

		// Selectors.
		{name: "label_selector_unclosed_in", path: allPods, query: qs("labelSelector", "app in ("), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "label_selector_double_operator", path: allPods, query: qs("labelSelector", "a==b==c"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "field_selector_double_operator", path: allPods, query: qs("fieldSelector", "spec.nodeName==x==y"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "field_selector_unsupported_field", path: allPods, query: qs("fieldSelector", "spec.foo=1"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "field_selector_no_operator", path: allPods, query: qs("fieldSelector", "spec.nodeName"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},

		// Continue tokens that are not listproxy's pass through.
		{name: "continue_garbage", path: allPods, query: cont("!!!"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "continue_native_truncated", path: allPods, query: cont(nativeToken[:len(nativeToken)/2]), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "continue_native_other_resource", path: services, query: cont(nativeToken), wantCode: http.StatusOK, wantFrom: fromAPI},
		{name: "continue_native_100KB", path: allPods, query: cont(big), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		// net/http's 1 MiB header limit answers before any handler, on both.
		{name: "continue_native_over_1MB", path: allPods, query: cont(huge), wantCode: http.StatusRequestHeaderFieldsTooLarge, notStatus: true, wantFrom: fromNoOne},

		// listproxy's own tokens: listproxy answers, as the apiserver answers
		// the same damage to its own tokens.
		{name: "lp_token_garbage", path: allPods, query: cont("lp1.!!!"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont("!!!"), messageDiffers: "the reason after the common prefix names each server's decoding error", wantMessage: "invalid continue token: continue key is not valid"},
		{name: "lp_token_truncated", path: allPods, query: cont(lpToken[:len(lpToken)/2]), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont(nativeToken[:len(nativeToken)/2]), messageDiffers: "the reason after the common prefix names each server's decoding error", wantMessage: "invalid continue token: continue key is not valid"},
		{name: "lp_token_forged", path: allPods, query: cont("lp1." + forged), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont(forged), messageDiffers: "the reason after the common prefix names each server's decoding error", wantMessage: "invalid continue token: continue key is not valid"},
		{name: "lp_token_path_traversal", path: allPods, query: cont("lp1.../../etc"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont("../../etc"), messageDiffers: "the reason after the common prefix names each server's decoding error", wantMessage: "invalid continue token: continue key is not valid"},
		{name: "lp_token_100KB", path: allPods, query: cont("lp1." + big), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont(big), messageDiffers: "the reason after the common prefix names each server's decoding error", wantMessage: "invalid continue token: continue key is not valid"},
		{name: "lp_token_over_1MB", path: allPods, query: cont("lp1." + huge), wantCode: http.StatusRequestHeaderFieldsTooLarge, notStatus: true, wantFrom: fromNoOne,
			oracle: nativeRequest, apiQuery: cont(huge)},
		{name: "lp_token_other_resource", path: services, query: cont(lpToken), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			// The apiserver's native token does not name its resource and
			// continues any list from its key; listproxy's is bound to its
			// list (docs/design.md "Continue tokens").
			oracle: noOracle, wantMessage: "invalid continue token: continue key is not valid"},
		// The apiserver rejects a selector it cannot parse or does not
		// support before it looks at the continue token, even a token it
		// cannot decode at all (the oracle below); listproxy must give that
		// answer too. Today it reports
		// "token does not match the request: selector" instead (same code
		// and reason, another message): Lists.ServeList hands every
		// unparsable request with a listproxy token to handOff, which checks
		// the token's selector digest against the raw selector first. These
		// two cases assert the apiserver's answer and fail until that is
		// fixed.
		{name: "lp_token_malformed_label_selector", path: allPods, query: cont(lpToken, "labelSelector", "app in ("), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: anyFrom,
			oracle: nativeRequest, apiQuery: cont("!!!", "labelSelector", "app in ("), wantMessage: "unable to parse requirement"},
		{name: "lp_token_unsupported_field_selector", path: allPods, query: cont(lpToken, "fieldSelector", "spec.foo=1"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: anyFrom,
			oracle: nativeRequest, apiQuery: cont("!!!", "fieldSelector", "spec.foo=1"), wantMessage: "field label not supported: spec.foo"},
		{name: "lp_token_limit_non_numeric", path: allPods, query: cont(lpToken, "limit", "abc"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI,
			oracle: nativeRequest, apiQuery: cont(nativeToken, "limit", "abc")},
		{name: "lp_token_rv_non_numeric", path: allPods, query: cont(lpToken, "resourceVersion", "abc"), wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont(nativeToken, "resourceVersion", "abc")},
		{name: "lp_token_match_bogus", path: allPods, query: cont(lpToken, "resourceVersionMatch", "Bogus"), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid, wantFrom: fromLP,
			oracle: nativeRequest, apiQuery: cont(nativeToken, "resourceVersionMatch", "Bogus")},
		{name: "lp_token_bogus_accept", path: allPods, query: cont(lpToken), accept: "application/x-bogus", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI,
			oracle: nativeRequest, apiQuery: cont(nativeToken)},

		// Accept headers.
		// A Table is served from the pods' Table store (TestTableDifferential
		// compares it); one of whole objects or in protobuf is not.
		{name: "accept_table", path: allPods, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusOK, wantFrom: fromLP},
		{name: "accept_table_include_object", path: allPods, query: qs("includeObject", "Object"), accept: "application/json;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusOK, wantFrom: fromAPI},
		{name: "accept_table_include_bogus", path: allPods, query: qs("includeObject", "Bogus"), accept: "application/json;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest, wantFrom: fromAPI},
		{name: "accept_table_protobuf", path: allPods, accept: "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
		{name: "accept_bogus_type", path: allPods, accept: "application/x-bogus", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
		{name: "accept_semicolons", path: allPods, accept: ";;;", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
		{name: "accept_meta_unknown_version", path: allPods, accept: "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v9", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
		{name: "accept_meta_unknown_kind", path: allPods, accept: "application/json;as=Bogus;g=meta.k8s.io;v=v1", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
		{name: "accept_type_without_subtype", path: allPods, accept: "application/", wantCode: http.StatusNotAcceptable, wantReason: metav1.StatusReasonNotAcceptable, wantFrom: fromAPI},
	}

	release := apiserverRelease(t, cp)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			apiNotStatus := false
			if a, ok := tc.on[release]; ok {
				t.Logf("apiserver %s answers differently from the default release: %+v", release, a)
				tc.wantCode, tc.wantReason, tc.wantFrom, apiNotStatus = a.code, a.reason, a.from, a.apiNotStatus
				if a.message != "" {
					tc.wantMessage = a.message
				}
			}
			got := lpg.get(ctx, t, tc.path, tc.query, tc.accept)
			var want badAnswer
			switch tc.oracle {
			case sameRequest:
				want = apig.get(ctx, t, tc.path, tc.query, tc.accept)
			case nativeRequest:
				want = apig.get(ctx, t, tc.path, tc.apiQuery, tc.accept)
			}
			t.Logf("listproxy: %v", got)
			if tc.oracle != noOracle {
				t.Logf("apiserver: %v", want)
			}

			if got.code != tc.wantCode {
				t.Errorf("listproxy: HTTP %d, want %d: %.300s", got.code, tc.wantCode, got.body)
			}
			if tc.wantFrom != anyFrom && got.servedFrom != tc.wantFrom {
				t.Errorf("listproxy: %s = %q, want %q", headerServedFrom, got.servedFrom, tc.wantFrom)
			}
			if tc.wantCode != http.StatusOK && !tc.notStatus {
				switch s := got.status; {
				case s == nil:
					t.Errorf("listproxy: body is not a JSON Status: %s %.300s", got.contentType, got.body)
				case s.Status != metav1.StatusFailure || s.Code != int32(tc.wantCode) || s.Reason != tc.wantReason:
					t.Errorf("listproxy: Status %q code %d reason %q, want Failure %d %q", s.Status, s.Code, s.Reason, tc.wantCode, tc.wantReason)
				}
			}
			if tc.wantMessage != "" && (got.status == nil || !strings.Contains(got.status.Message, tc.wantMessage)) {
				t.Errorf("listproxy: message does not contain %q: %.300s", tc.wantMessage, got.body)
			}
			if tc.oracle == noOracle {
				return
			}

			// The oracle.
			if want.code != got.code {
				t.Errorf("HTTP %d, apiserver %d", got.code, want.code)
			}
			switch {
			case want.code == http.StatusOK && got.code == http.StatusOK:
				// Lists may be at different resourceVersions; their items
				// are the same (nothing changes while the table runs).
				if d := cmp.Diff(itemKeys(t, want.body), itemKeys(t, got.body)); d != "" {
					t.Errorf("items differ from the apiserver's (-apiserver +listproxy):\n%s", d)
				}
			case want.status == nil && got.status == nil:
				if string(want.body) != string(got.body) {
					t.Errorf("body differs from the apiserver's:\n  apiserver %.300q\n  listproxy %.300q", want.body, got.body)
				}
			case apiNotStatus && want.status == nil && got.status != nil:
				// The codes agree (above); listproxy's Status is the
				// readable form of the apiserver's plain-text answer.
			case want.status == nil || got.status == nil:
				t.Errorf("only one answer is a Status:\n  apiserver %s %.300s\n  listproxy %s %.300s", want.contentType, want.body, got.contentType, got.body)
			default:
				var opts []cmp.Option
				if tc.messageDiffers != "" {
					opts = append(opts, cmpopts.IgnoreFields(metav1.Status{}, "Message"))
					if !strings.Contains(want.status.Message, tc.wantMessage) {
						t.Errorf("apiserver's message %q does not contain %q", want.status.Message, tc.wantMessage)
					}
				}
				if diff := cmp.Diff(want.status, got.status, opts...); diff != "" {
					t.Errorf("Status differs from the apiserver's (-apiserver +listproxy):\n%s", diff)
				}
			}
		})
	}

	// Nothing broke: a LIST is still served from the snapshot, and listproxy
	// is healthy.
	t.Run("still_serving", func(t *testing.T) {
		p, err := getList(ctx, lpc, allPods, url.Values{"resourceVersion": {"0"}})
		if err != nil {
			t.Fatal(err)
		}
		if p.servedFrom != "snapshot" {
			t.Errorf("served from %q, want snapshot", p.servedFrom)
		}
		if d := diffItems(exactList(ctx, t, apic, allPods, p.meta.ResourceVersion), p); d != "" {
			t.Errorf("list differs from the apiserver's at %s: %s", p.meta.ResourceVersion, d)
		}
		if got := len(p.keys); got != 60 {
			t.Errorf("%d pods, want 60", got)
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for _, path := range []string{"/healthz", "/readyz"} {
			code, _, body, err := lpc.get(ctx, path, nil, "*/*")
			if err != nil || code != http.StatusOK {
				t.Errorf("GET %s: HTTP %d %v: %.200s", path, code, err, body)
			}
		}
	})
}

// itemKeys returns "namespace/name" of each item of a JSON list (none for
// other JSON, such as a Table).
func itemKeys(t *testing.T, body []byte) []string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Namespace, Name string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Errorf("decode list: %v: %.200s", err, body)
		return nil
	}
	keys := []string{}
	for _, it := range list.Items {
		keys = append(keys, it.Metadata.Namespace+"/"+it.Metadata.Name)
	}
	return keys
}
