package paging

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher/delegator"
)

// apiserverList runs a LIST's options through the apiserver's own checks, in
// its order: the handler's ListOptions validation
// (k8s.io/apiserver/pkg/endpoints/handlers/get.go listOpts), then storage's
// (k8s.io/apiserver/pkg/storage/interfaces.go ValidateListOptions, used by
// both the watch cache delegator and the etcd3 store). On success it returns
// how the watch cache would serve the list, from its delegator decision
// (k8s.io/apiserver/pkg/storage/cacher/delegator).
func apiserverList(t *testing.T, rv, match string, limit int64, cont string) (Decision, error) {
	t.Helper()
	opts := internalversion.ListOptions{
		ResourceVersion:      rv,
		ResourceVersionMatch: metav1.ResourceVersionMatch(match),
		Limit:                limit,
		Continue:             cont,
	}
	for _, watchList := range []bool{false, true} {
		internalversion.SetListOptionsDefaults(&opts, watchList)
		if errs := validation.ValidateListOptions(&opts, watchList); len(errs) > 0 {
			return Decision{}, apierrors.NewInvalid(listOptionsKind, "", errs)
		}
	}
	sopts := storage.ListOptions{
		ResourceVersion:      rv,
		ResourceVersionMatch: metav1.ResourceVersionMatch(match),
		Predicate:            storage.SelectionPredicate{Limit: limit, Continue: cont},
		Recursive:            true,
	}
	if _, _, err := storage.ValidateListOptions("/registry/pods/", storage.APIObjectVersioner{}, sopts); err != nil {
		return Decision{}, err
	}
	h := &recordingHelper{}
	res, err := delegator.ShouldDelegateList(sopts, h)
	if err != nil {
		t.Fatalf("ShouldDelegateList: %v", err)
	}
	switch {
	case h.called != 0:
		return Decision{Action: h.called, RV: h.rv}, nil
	case res.ShouldDelegate:
		t.Fatalf("ShouldDelegateList delegated without asking the cache")
	case rv == "0":
		return Decision{Action: ServeLatest}, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("apiserver accepted resourceVersion %q", rv)
	}
	return Decision{Action: ServeNotOlderThan, RV: n}, nil
}

// recordingHelper records which way the apiserver's delegator went.
type recordingHelper struct {
	called Action
	rv     uint64
}

var _ delegator.Helper = (*recordingHelper)(nil)

func (h *recordingHelper) ShouldDelegateExactRV(rv string, _ bool) (delegator.Result, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return delegator.Result{}, err
	}
	h.called, h.rv = ServeExact, n
	return delegator.Result{}, nil
}

func (h *recordingHelper) ShouldDelegateContinue(string, bool) (delegator.Result, error) {
	h.called = ServeContinue
	return delegator.Result{}, nil
}

func (h *recordingHelper) ShouldDelegateConsistentRead() (delegator.Result, error) {
	h.called = ServeConsistent
	return delegator.Result{ConsistentRead: true}, nil
}

// TestDecideAgreesWithAPIServer replays every row of decideTable through the
// apiserver's code. Our token stands in as a native token the apiserver can
// read (a valid one for ours, an undecodable one for ours_invalid): a request
// the apiserver refuses must be refused by Decide with the same Status (our
// tokens) or passed through (no token); a request it accepts must be served
// the same way.
func TestDecideAgreesWithAPIServer(t *testing.T) {
	stand := map[continueKind]string{
		none:        "",
		ours:        NativeContinue(12, "default/web-0"),
		oursInvalid: "bm90IGpzb24", // base64url("not json")
	}
	for _, tc := range decideTable {
		if tc.cont == native {
			continue // always passed through: the apiserver answers itself
		}
		t.Run(tc.name(), func(t *testing.T) {
			got := Decide(tc.request(t))
			want, apiErr := apiserverList(t, tc.rv, tc.match, tc.limit, stand[tc.cont])

			switch {
			case apiErr == nil:
				if diff := cmp.Diff(want, got, cmpIgnoreReason); diff != "" {
					t.Errorf("apiserver serves this; Decide() (-want +got):\n%s", diff)
				}
			case tc.cont == none:
				if got.Action != PassThrough {
					t.Errorf("apiserver refuses this (%v); Decide() = %v, want PassThrough", apiErr, got.Action)
				}
			case tc.cont == oursInvalid && strings.HasPrefix(apiErr.Error(), "invalid continue token: continue key is not valid"):
				// The detail after the generic wording is the decoder's own.
				if got.Action != Reject || !strings.HasPrefix(got.Err.Error(), "invalid continue token: continue key is not valid") ||
					apierrors.ReasonForError(got.Err) != apierrors.ReasonForError(apiErr) {
					t.Errorf("apiserver: %v; Decide() = %+v", apiErr, got)
				}
			default:
				if got.Action != Reject {
					t.Fatalf("apiserver refuses this (%v); Decide() = %v, want Reject", apiErr, got.Action)
				}
				if diff := cmp.Diff(apiErr, got.Err); diff != "" {
					t.Errorf("Reject error (-apiserver +Decide):\n%s", diff)
				}
			}
		})
	}
}

var cmpIgnoreReason = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Reason" }, cmp.Ignore())
