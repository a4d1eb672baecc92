package paging

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Continue parameter kinds in the decision table.
type continueKind string

const (
	none        continueKind = "none"         // no continue parameter
	native      continueKind = "native"       // an apiserver token
	ours        continueKind = "ours"         // a listproxy token that opens
	oursInvalid continueKind = "ours_invalid" // a listproxy token that fails to open
)

// continueParams returns the Request fields for a continue kind, with real
// tokens.
func continueParams(t *testing.T, kind continueKind) (token string, openErr error) {
	t.Helper()
	k := mustKeyring(t, 1)
	switch kind {
	case native:
		return NativeContinue(12, "default/web-0"), nil
	case ours, oursInvalid:
		s := mustSeal(t, k, sampleToken())
		if kind == oursInvalid {
			s = encodeRaw(flipByte(rawToken(t, s), len(rawToken(t, s))-1))
		}
		_, err := k.Open(s)
		return s, err
	}
	return "", nil
}

func pass(reason string) Decision { return Decision{Action: PassThrough, Reason: reason} }

func serve(a Action, rv uint64, reason string) Decision {
	return Decision{Action: a, RV: rv, Reason: reason}
}

func badRequest(reason, msg string) Decision {
	return Decision{Action: Reject, Reason: reason, Err: apierrors.NewBadRequest(msg)}
}

// invalid is the apiserver's 422 for ListOptions that fail validation.
func invalid(errs ...*field.Error) Decision {
	return Decision{Action: Reject, Reason: "invalid_options", Err: apierrors.NewInvalid(listOptionsKind, "", errs)}
}

// The apiserver's ListOptions validation errors
// (k8s.io/apimachinery/pkg/apis/meta/internalversion/validation).
var (
	matchPath         = field.NewPath("resourceVersionMatch")
	matchWithoutRV    = field.Forbidden(matchPath, "resourceVersionMatch is forbidden unless resourceVersion is provided")
	matchWithContinue = field.Forbidden(matchPath, "resourceVersionMatch is forbidden when continue is provided")
	exactWithRV0      = field.Forbidden(matchPath, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`)
	matchUnsupported  = func(v string) *field.Error {
		return field.NotSupported(matchPath, v, []string{"Exact", "NotOlderThan", ""})
	}
	msgRVWithContinue = "specifying resource version is not allowed when using continue"
	msgTampered       = "invalid continue token: continue key is not valid: authentication failed"
)

type decideCase struct {
	rv    string
	match string
	limit int64
	cont  continueKind
	want  Decision
}

func (tc decideCase) name() string {
	return fmt.Sprintf("rv=%q/match=%q/limit=%d/continue=%s", tc.rv, tc.match, tc.limit, tc.cont)
}

func (tc decideCase) request(t *testing.T) Request {
	tok, openErr := continueParams(t, tc.cont)
	return Request{
		ResourceVersion:      tc.rv,
		ResourceVersionMatch: tc.match,
		Limit:                tc.limit,
		Continue:             tok,
		ContinueIsOurs:       IsListproxyToken(tok),
		ContinueErr:          openErr,
	}
}

// decideTable is the specification: every combination of resourceVersion ×
// resourceVersionMatch × limit × continue. See
// https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list
// and docs/design.md "Semantics table". TestDecideAgreesWithAPIServer checks it
// against the apiserver's own code.
var decideTable = []decideCase{
	// {resourceVersion, resourceVersionMatch, limit, continue, want}

	// continue: none
	{"", "", 0, none, serve(ServeConsistent, 0, "consistent")},
	{"", "", 5, none, serve(ServeConsistent, 0, "consistent")},
	{"", "NotOlderThan", 0, none, pass("invalid_options")},
	{"", "NotOlderThan", 5, none, pass("invalid_options")},
	{"", "Exact", 0, none, pass("invalid_options")},
	{"", "Exact", 5, none, pass("invalid_options")},
	{"", "Bogus", 0, none, pass("invalid_options")},
	{"", "Bogus", 5, none, pass("invalid_options")},
	{"0", "", 0, none, serve(ServeLatest, 0, "latest")},
	{"0", "", 5, none, serve(ServeLatest, 0, "latest")},
	{"0", "NotOlderThan", 0, none, serve(ServeLatest, 0, "latest")},
	{"0", "NotOlderThan", 5, none, serve(ServeLatest, 0, "latest")},
	{"0", "Exact", 0, none, pass("invalid_options")},
	{"0", "Exact", 5, none, pass("invalid_options")},
	{"0", "Bogus", 0, none, pass("invalid_options")},
	{"0", "Bogus", 5, none, pass("invalid_options")},
	{"12", "", 0, none, serve(ServeNotOlderThan, 12, "not_older_than")},
	{"12", "", 5, none, serve(ServeExact, 12, "legacy_exact")},
	{"12", "NotOlderThan", 0, none, serve(ServeNotOlderThan, 12, "not_older_than")},
	{"12", "NotOlderThan", 5, none, serve(ServeNotOlderThan, 12, "not_older_than")},
	{"12", "Exact", 0, none, serve(ServeExact, 12, "exact")},
	{"12", "Exact", 5, none, serve(ServeExact, 12, "exact")},
	{"12", "Bogus", 0, none, pass("invalid_options")},
	{"12", "Bogus", 5, none, pass("invalid_options")},
	{"abc", "", 0, none, pass("invalid_resource_version")},
	{"abc", "", 5, none, pass("invalid_resource_version")},
	{"abc", "NotOlderThan", 0, none, pass("invalid_resource_version")},
	{"abc", "NotOlderThan", 5, none, pass("invalid_resource_version")},
	{"abc", "Exact", 0, none, pass("invalid_resource_version")},
	{"abc", "Exact", 5, none, pass("invalid_resource_version")},
	{"abc", "Bogus", 0, none, pass("invalid_options")},
	{"abc", "Bogus", 5, none, pass("invalid_options")},
	{"-1", "", 0, none, pass("invalid_resource_version")},
	{"-1", "", 5, none, pass("invalid_resource_version")},
	{"-1", "NotOlderThan", 0, none, pass("invalid_resource_version")},
	{"-1", "NotOlderThan", 5, none, pass("invalid_resource_version")},
	{"-1", "Exact", 0, none, pass("invalid_resource_version")},
	{"-1", "Exact", 5, none, pass("invalid_resource_version")},
	{"-1", "Bogus", 0, none, pass("invalid_options")},
	{"-1", "Bogus", 5, none, pass("invalid_options")},

	// continue: native
	{"", "", 0, native, pass("foreign_continue")},
	{"", "", 5, native, pass("foreign_continue")},
	{"", "NotOlderThan", 0, native, pass("foreign_continue")},
	{"", "NotOlderThan", 5, native, pass("foreign_continue")},
	{"", "Exact", 0, native, pass("foreign_continue")},
	{"", "Exact", 5, native, pass("foreign_continue")},
	{"", "Bogus", 0, native, pass("foreign_continue")},
	{"", "Bogus", 5, native, pass("foreign_continue")},
	{"0", "", 0, native, pass("foreign_continue")},
	{"0", "", 5, native, pass("foreign_continue")},
	{"0", "NotOlderThan", 0, native, pass("foreign_continue")},
	{"0", "NotOlderThan", 5, native, pass("foreign_continue")},
	{"0", "Exact", 0, native, pass("foreign_continue")},
	{"0", "Exact", 5, native, pass("foreign_continue")},
	{"0", "Bogus", 0, native, pass("foreign_continue")},
	{"0", "Bogus", 5, native, pass("foreign_continue")},
	{"12", "", 0, native, pass("foreign_continue")},
	{"12", "", 5, native, pass("foreign_continue")},
	{"12", "NotOlderThan", 0, native, pass("foreign_continue")},
	{"12", "NotOlderThan", 5, native, pass("foreign_continue")},
	{"12", "Exact", 0, native, pass("foreign_continue")},
	{"12", "Exact", 5, native, pass("foreign_continue")},
	{"12", "Bogus", 0, native, pass("foreign_continue")},
	{"12", "Bogus", 5, native, pass("foreign_continue")},
	{"abc", "", 0, native, pass("foreign_continue")},
	{"abc", "", 5, native, pass("foreign_continue")},
	{"abc", "NotOlderThan", 0, native, pass("foreign_continue")},
	{"abc", "NotOlderThan", 5, native, pass("foreign_continue")},
	{"abc", "Exact", 0, native, pass("foreign_continue")},
	{"abc", "Exact", 5, native, pass("foreign_continue")},
	{"abc", "Bogus", 0, native, pass("foreign_continue")},
	{"abc", "Bogus", 5, native, pass("foreign_continue")},
	{"-1", "", 0, native, pass("foreign_continue")},
	{"-1", "", 5, native, pass("foreign_continue")},
	{"-1", "NotOlderThan", 0, native, pass("foreign_continue")},
	{"-1", "NotOlderThan", 5, native, pass("foreign_continue")},
	{"-1", "Exact", 0, native, pass("foreign_continue")},
	{"-1", "Exact", 5, native, pass("foreign_continue")},
	{"-1", "Bogus", 0, native, pass("foreign_continue")},
	{"-1", "Bogus", 5, native, pass("foreign_continue")},

	// continue: ours
	{"", "", 0, ours, serve(ServeContinue, 0, "continue")},
	{"", "", 5, ours, serve(ServeContinue, 0, "continue")},
	{"", "NotOlderThan", 0, ours, invalid(matchWithoutRV, matchWithContinue)},
	{"", "NotOlderThan", 5, ours, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Exact", 0, ours, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Exact", 5, ours, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Bogus", 0, ours, invalid(matchWithoutRV, matchWithContinue, matchUnsupported("Bogus"))},
	{"", "Bogus", 5, ours, invalid(matchWithoutRV, matchWithContinue, matchUnsupported("Bogus"))},
	{"0", "", 0, ours, serve(ServeContinue, 0, "continue")},
	{"0", "", 5, ours, serve(ServeContinue, 0, "continue")},
	{"0", "NotOlderThan", 0, ours, invalid(matchWithContinue)},
	{"0", "NotOlderThan", 5, ours, invalid(matchWithContinue)},
	{"0", "Exact", 0, ours, invalid(matchWithContinue, exactWithRV0)},
	{"0", "Exact", 5, ours, invalid(matchWithContinue, exactWithRV0)},
	{"0", "Bogus", 0, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"0", "Bogus", 5, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"12", "", 0, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"12", "", 5, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"12", "NotOlderThan", 0, ours, invalid(matchWithContinue)},
	{"12", "NotOlderThan", 5, ours, invalid(matchWithContinue)},
	{"12", "Exact", 0, ours, invalid(matchWithContinue)},
	{"12", "Exact", 5, ours, invalid(matchWithContinue)},
	{"12", "Bogus", 0, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"12", "Bogus", 5, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"abc", "", 0, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"abc", "", 5, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"abc", "NotOlderThan", 0, ours, invalid(matchWithContinue)},
	{"abc", "NotOlderThan", 5, ours, invalid(matchWithContinue)},
	{"abc", "Exact", 0, ours, invalid(matchWithContinue)},
	{"abc", "Exact", 5, ours, invalid(matchWithContinue)},
	{"abc", "Bogus", 0, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"abc", "Bogus", 5, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"-1", "", 0, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"-1", "", 5, ours, badRequest("resource_version_with_continue", msgRVWithContinue)},
	{"-1", "NotOlderThan", 0, ours, invalid(matchWithContinue)},
	{"-1", "NotOlderThan", 5, ours, invalid(matchWithContinue)},
	{"-1", "Exact", 0, ours, invalid(matchWithContinue)},
	{"-1", "Exact", 5, ours, invalid(matchWithContinue)},
	{"-1", "Bogus", 0, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"-1", "Bogus", 5, ours, invalid(matchWithContinue, matchUnsupported("Bogus"))},

	// continue: ours_invalid
	{"", "", 0, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"", "", 5, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"", "NotOlderThan", 0, oursInvalid, invalid(matchWithoutRV, matchWithContinue)},
	{"", "NotOlderThan", 5, oursInvalid, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Exact", 0, oursInvalid, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Exact", 5, oursInvalid, invalid(matchWithoutRV, matchWithContinue)},
	{"", "Bogus", 0, oursInvalid, invalid(matchWithoutRV, matchWithContinue, matchUnsupported("Bogus"))},
	{"", "Bogus", 5, oursInvalid, invalid(matchWithoutRV, matchWithContinue, matchUnsupported("Bogus"))},
	{"0", "", 0, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"0", "", 5, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"0", "NotOlderThan", 0, oursInvalid, invalid(matchWithContinue)},
	{"0", "NotOlderThan", 5, oursInvalid, invalid(matchWithContinue)},
	{"0", "Exact", 0, oursInvalid, invalid(matchWithContinue, exactWithRV0)},
	{"0", "Exact", 5, oursInvalid, invalid(matchWithContinue, exactWithRV0)},
	{"0", "Bogus", 0, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"0", "Bogus", 5, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"12", "", 0, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"12", "", 5, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"12", "NotOlderThan", 0, oursInvalid, invalid(matchWithContinue)},
	{"12", "NotOlderThan", 5, oursInvalid, invalid(matchWithContinue)},
	{"12", "Exact", 0, oursInvalid, invalid(matchWithContinue)},
	{"12", "Exact", 5, oursInvalid, invalid(matchWithContinue)},
	{"12", "Bogus", 0, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"12", "Bogus", 5, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"abc", "", 0, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"abc", "", 5, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"abc", "NotOlderThan", 0, oursInvalid, invalid(matchWithContinue)},
	{"abc", "NotOlderThan", 5, oursInvalid, invalid(matchWithContinue)},
	{"abc", "Exact", 0, oursInvalid, invalid(matchWithContinue)},
	{"abc", "Exact", 5, oursInvalid, invalid(matchWithContinue)},
	{"abc", "Bogus", 0, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"abc", "Bogus", 5, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"-1", "", 0, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"-1", "", 5, oursInvalid, badRequest("invalid_continue", msgTampered)},
	{"-1", "NotOlderThan", 0, oursInvalid, invalid(matchWithContinue)},
	{"-1", "NotOlderThan", 5, oursInvalid, invalid(matchWithContinue)},
	{"-1", "Exact", 0, oursInvalid, invalid(matchWithContinue)},
	{"-1", "Exact", 5, oursInvalid, invalid(matchWithContinue)},
	{"-1", "Bogus", 0, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
	{"-1", "Bogus", 5, oursInvalid, invalid(matchWithContinue, matchUnsupported("Bogus"))},
}

func TestDecide(t *testing.T) {
	if got, want := len(decideTable), 5*4*2*4; got != want {
		t.Fatalf("decideTable has %d rows, want %d (every combination)", got, want)
	}
	seen := map[string]bool{}
	for _, tc := range decideTable {
		if seen[tc.name()] {
			t.Fatalf("duplicate row %s", tc.name())
		}
		seen[tc.name()] = true
		t.Run(tc.name(), func(t *testing.T) {
			got := Decide(tc.request(t))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideEdges covers inputs outside the main table.
func TestDecideEdges(t *testing.T) {
	k := mustKeyring(t, 1)
	tok := mustSeal(t, k, sampleToken())
	tests := []struct {
		name string
		req  Request
		want Decision
	}{
		{name: "rv_leading_zero", req: Request{ResourceVersion: "012"}, want: pass("noncanonical_resource_version")},
		{name: "rv_double_zero_with_limit", req: Request{ResourceVersion: "00", Limit: 5}, want: pass("noncanonical_resource_version")},
		{name: "rv_plus_sign", req: Request{ResourceVersion: "+12"}, want: pass("invalid_resource_version")},
		{name: "rv_overflows_uint64", req: Request{ResourceVersion: "18446744073709551616"}, want: pass("invalid_resource_version")},
		// etcd's revisions are int64: past them the apiserver's answer
		// (its 504 after its wait) is the only exact one.
		{name: "rv_max_int64", req: Request{ResourceVersion: "9223372036854775807", ResourceVersionMatch: "Exact"}, want: serve(ServeExact, 1<<63-1, "exact")},
		{name: "rv_2^63", req: Request{ResourceVersion: "9223372036854775808"}, want: pass("resource_version_too_large")},
		{name: "rv_2^63_with_limit", req: Request{ResourceVersion: "9223372036854775808", Limit: 5}, want: pass("resource_version_too_large")},
		{name: "rv_max_uint64", req: Request{ResourceVersion: "18446744073709551615", ResourceVersionMatch: "Exact"}, want: pass("resource_version_too_large")},
		{name: "rv_max_uint64_not_older_than", req: Request{ResourceVersion: "18446744073709551615", ResourceVersionMatch: "NotOlderThan"}, want: pass("resource_version_too_large")},
		{name: "negative_limit_is_no_limit", req: Request{ResourceVersion: "12", Limit: -1}, want: serve(ServeNotOlderThan, 12, "not_older_than")},
		{name: "match_is_case_sensitive", req: Request{ResourceVersion: "12", ResourceVersionMatch: "exact"}, want: pass("invalid_options")},
		{name: "ours_flag_without_token", req: Request{ContinueIsOurs: true, ContinueErr: ErrTokenTampered}, want: serve(ServeConsistent, 0, "consistent")},
		{name: "ours_rv_double_zero", req: Request{ResourceVersion: "00", Continue: tok, ContinueIsOurs: true}, want: badRequest("resource_version_with_continue", msgRVWithContinue)},
		{name: "ours_limit_zero_serves_rest", req: Request{Continue: tok, ContinueIsOurs: true}, want: serve(ServeContinue, 0, "continue")},
		{name: "ours_mismatch", req: Request{Continue: tok, ContinueIsOurs: true, ContinueErr: fmt.Errorf("%w: namespace", ErrTokenMismatch)}, want: badRequest("invalid_continue", "invalid continue token: continue key is not valid: token does not match the request: namespace")},
		{name: "foreign_ignores_open_error", req: Request{Continue: "abc", ContinueErr: ErrTokenTampered}, want: pass("foreign_continue")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Decide(tc.req)); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    Action
		want string
	}{
		{PassThrough, "PassThrough"},
		{ServeContinue, "ServeContinue"},
		{Reject, "Reject"},
		{Action(42), "Action(42)"},
		{Action(-1), "Action(-1)"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.a.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}
