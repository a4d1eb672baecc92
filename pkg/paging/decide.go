package paging

import (
	"math"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Request holds the query parameters of a cacheable LIST that Decide needs.
type Request struct {
	// ResourceVersion is the raw resourceVersion query value; "" if absent.
	ResourceVersion string
	// ResourceVersionMatch is the raw resourceVersionMatch query value.
	ResourceVersionMatch string
	// Limit is the parsed limit; 0 if absent. Values ≤ 0 mean no limit, as
	// in the apiserver. (A non-numeric limit is the apiserver's to reject:
	// the caller passes such requests through without calling Decide.)
	Limit int64
	// Continue is the raw continue query value.
	Continue string
	// ShardSelectorErr is why the request's shardSelector (KEP-5866) did
	// not parse; nil without one or when it parsed. Decide reports it where
	// the apiserver with its ShardedListAndWatch gate does, after option
	// validation and before the continue token, with or without a token
	// of ours.
	ShardSelectorErr error
	// ContinueIsOurs is IsListproxyToken(Continue).
	ContinueIsOurs bool
	// ContinueErr is the error from opening our token (Keyring.Open, then
	// Token.Matches); nil if it opened and matches. Decide reports it where
	// the apiserver would report an undecodable continue token, after
	// option validation and before the resourceVersion check. Ignored unless
	// ContinueIsOurs.
	ContinueErr error
}

// Action says how listproxy answers a LIST.
type Action int

const (
	// PassThrough sends the request to the apiserver unchanged.
	PassThrough Action = iota
	// ServeLatest serves the latest snapshot without waiting
	// (resourceVersion="0": any resourceVersion).
	ServeLatest
	// ServeConsistent serves the latest snapshot once its freshness is
	// proven (resourceVersion unset: a consistent read).
	ServeConsistent
	// ServeNotOlderThan serves the latest snapshot once its RV ≥
	// Decision.RV, or fails with TooLargeResourceVersionError.
	ServeNotOlderThan
	// ServeExact serves the retained snapshot at exactly Decision.RV.
	ServeExact
	// ServeContinue continues the list described by our continue token.
	ServeContinue
	// Reject answers with Decision.Err, exactly as the apiserver would.
	Reject
)

var actionNames = [...]string{
	PassThrough:       "PassThrough",
	ServeLatest:       "ServeLatest",
	ServeConsistent:   "ServeConsistent",
	ServeNotOlderThan: "ServeNotOlderThan",
	ServeExact:        "ServeExact",
	ServeContinue:     "ServeContinue",
	Reject:            "Reject",
}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Decision is Decide's verdict.
type Decision struct {
	Action Action
	// RV is the minimum resourceVersion for ServeNotOlderThan and the exact
	// one for ServeExact; 0 otherwise.
	RV uint64
	// Reason is a short, fixed label for metrics and logs.
	Reason string
	// Err is set only for Reject: an *apierrors.StatusError equal to the
	// apiserver's answer to the same request.
	Err error
}

// Decision reasons: a fixed set, safe as metric label values.
const (
	reasonConsistent      = "consistent"
	reasonLatest          = "latest"
	reasonNotOlderThan    = "not_older_than"
	reasonExact           = "exact"
	reasonLegacyExact     = "legacy_exact" // RV=N with limit and no match
	reasonContinue        = "continue"
	reasonForeignContinue = "foreign_continue"
	reasonInvalidOptions  = "invalid_options"          // ListOptions validation (422)
	reasonInvalidRV       = "invalid_resource_version" // not a uint64 (400)
	reasonNoncanonicalRV  = "noncanonical_resource_version"
	reasonTooLargeRV      = "resource_version_too_large" // beyond etcd's int64 revisions
	reasonInvalidContinue = "invalid_continue"
	reasonRVWithContinue  = "resource_version_with_continue"
	reasonInvalidShard    = "invalid_shard_selector" // 500, as the apiserver
)

// listOptionsKind is how the apiserver's LIST handler names ListOptions in
// validation errors (k8s.io/apiserver/pkg/endpoints/handlers/get.go listOpts).
var listOptionsKind = schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}

// Decide maps a cacheable LIST's parameters onto an Action, following the
// apiserver's semantics for get and list
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list,
// KEP-2523) and docs/design.md "Semantics table". It is pure: it neither opens tokens nor
// looks at snapshots.
//
// Requests the apiserver would refuse pass through, so the apiserver gives
// its own answer; with our continue token (which the apiserver cannot read)
// they are rejected instead, with the apiserver's error, in the apiserver's
// order of checks: ListOptions validation (422), then the shard selector
// (500), then the continue token (400), then resourceVersion with continue
// (400). A shard selector that does not parse is rejected with or without
// a token of ours: an apiserver without the ShardedListAndWatch gate
// ignores the parameter, and listproxy answers as one with it.
func Decide(req Request) Decision {
	ours := req.ContinueIsOurs && req.Continue != ""
	if req.Continue != "" && !ours {
		return Decision{Action: PassThrough, Reason: reasonForeignContinue}
	}

	opts := internalversion.ListOptions{
		ResourceVersion:      req.ResourceVersion,
		ResourceVersionMatch: metav1.ResourceVersionMatch(req.ResourceVersionMatch),
		Limit:                req.Limit,
		Continue:             req.Continue,
	}
	// The watch-list gate only affects watch requests.
	if errs := validation.ValidateListOptions(&opts, false); len(errs) > 0 {
		if !ours {
			return Decision{Action: PassThrough, Reason: reasonInvalidOptions}
		}
		return Decision{Action: Reject, Reason: reasonInvalidOptions, Err: apierrors.NewInvalid(listOptionsKind, "", errs)}
	}
	if req.ShardSelectorErr != nil {
		// The registry parses the shard selector before storage reads
		// the continue token.
		return Decision{Action: Reject, Reason: reasonInvalidShard, Err: InvalidShardSelectorError(req.ShardSelectorErr)}
	}

	if ours {
		// Order as in k8s.io/apiserver/pkg/storage/interfaces.go
		// ValidateListOptions: decode the token, then refuse any RV but "0"
		// (which is ignored: the token's RV wins).
		if req.ContinueErr != nil {
			return Decision{Action: Reject, Reason: reasonInvalidContinue, Err: InvalidContinueError(req.ContinueErr)}
		}
		if req.ResourceVersion != "" && req.ResourceVersion != "0" {
			return Decision{Action: Reject, Reason: reasonRVWithContinue, Err: apierrors.NewBadRequest("specifying resource version is not allowed when using continue")}
		}
		return Decision{Action: ServeContinue, Reason: reasonContinue}
	}

	// Validation guarantees: no match without an RV, no Exact with "0", and
	// match is "", Exact or NotOlderThan.
	switch req.ResourceVersion {
	case "":
		return Decision{Action: ServeConsistent, Reason: reasonConsistent}
	case "0":
		return Decision{Action: ServeLatest, Reason: reasonLatest}
	}
	rv, err := strconv.ParseUint(req.ResourceVersion, 10, 64)
	if err != nil {
		return Decision{Action: PassThrough, Reason: reasonInvalidRV}
	}
	if strconv.FormatUint(rv, 10) != req.ResourceVersion {
		// "00", "012": the apiserver's cache and etcd paths disagree on
		// these; let it answer.
		return Decision{Action: PassThrough, Reason: reasonNoncanonicalRV}
	}
	if rv > math.MaxInt64 {
		// No etcd revision: the apiserver answers 504 "Too large resource
		// version" after its own wait.
		return Decision{Action: PassThrough, Reason: reasonTooLargeRV}
	}
	switch metav1.ResourceVersionMatch(req.ResourceVersionMatch) {
	case metav1.ResourceVersionMatchExact:
		return Decision{Action: ServeExact, RV: rv, Reason: reasonExact}
	case metav1.ResourceVersionMatchNotOlderThan:
		return Decision{Action: ServeNotOlderThan, RV: rv, Reason: reasonNotOlderThan}
	}
	if req.Limit > 0 {
		// Legacy: a limit with RV=N and no match reads exactly at N.
		return Decision{Action: ServeExact, RV: rv, Reason: reasonLegacyExact}
	}
	return Decision{Action: ServeNotOlderThan, RV: rv, Reason: reasonNotOlderThan}
}
