package paging

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
)

func TestInvalidContinueError(t *testing.T) {
	k := mustKeyring(t, 1)
	_, openErr := k.Open("lp1.!!")
	tests := []struct {
		name    string
		err     error
		wantMsg string
	}{
		{name: "nil", err: nil, wantMsg: "invalid continue token: continue key is not valid"},
		{name: "tampered", err: ErrTokenTampered, wantMsg: "invalid continue token: continue key is not valid: authentication failed"},
		{name: "unknown_key", err: ErrUnknownKey, wantMsg: "invalid continue token: continue key is not valid: unknown key"},
		{name: "open_error", err: openErr, wantMsg: "invalid continue token: continue key is not valid: malformed token: illegal base64 data at input byte 0"},
		{name: "foreign_error", err: errors.New("boom"), wantMsg: "invalid continue token: continue key is not valid: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusBadRequest,
				Reason:  metav1.StatusReasonBadRequest,
				Message: tc.wantMsg,
			}}
			if diff := cmp.Diff(want, InvalidContinueError(tc.err)); diff != "" {
				t.Errorf("InvalidContinueError() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpiredContinueError(t *testing.T) {
	// Wording of k8s.io/apiserver/pkg/storage/etcd3/errors.go.
	const (
		withToken = "The provided continue parameter is too old to display a consistent list result. " +
			"You can start a new list without the continue parameter, or use the continue token in this response " +
			"to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent " +
			"list - objects that were created, modified, or deleted between the time the first chunk was returned " +
			"and now may show up in the list."
		withoutToken = "The provided continue parameter is too old to display a consistent list result. " +
			"You can start a new list without the continue parameter."
	)
	next := NativeContinueLatest("default/web-0")
	tests := []struct {
		name     string
		newToken string
		want     metav1.Status
	}{
		{
			name:     "with_token",
			newToken: next,
			want: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
				Message: withToken, ListMeta: metav1.ListMeta{Continue: next},
			},
		},
		{
			name: "without_token",
			want: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
				Message: withoutToken,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ExpiredContinueError(tc.newToken)
			if diff := cmp.Diff(tc.want, got.ErrStatus); diff != "" {
				t.Errorf("ExpiredContinueError() (-want +got):\n%s", diff)
			}
			if !apierrors.IsResourceExpired(got) {
				t.Errorf("IsResourceExpired(%v) = false", got)
			}
		})
	}
}

func TestTooLargeResourceVersionError(t *testing.T) {
	tests := []struct {
		name      string
		minRV     uint64
		currentRV uint64
		wantMsg   string
	}{
		{name: "ahead", minRV: 120, currentRV: 100, wantMsg: "Timeout: Too large resource version: 120, current: 100"},
		{name: "no_current", minRV: 5, currentRV: 0, wantMsg: "Timeout: Too large resource version: 5, current: 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TooLargeResourceVersionError(tc.minRV, tc.currentRV)
			// The watch cache's error: Retry-After 1 second.
			want := storage.NewTooLargeResourceVersionError(tc.minRV, tc.currentRV, 1)
			if diff := cmp.Diff(want, error(got)); diff != "" {
				t.Errorf("TooLargeResourceVersionError() (-apiserver +got):\n%s", diff)
			}
			if got.ErrStatus.Message != tc.wantMsg || got.ErrStatus.Code != http.StatusGatewayTimeout || got.ErrStatus.Details.RetryAfterSeconds != 1 {
				t.Errorf("status = %+v", got.ErrStatus)
			}
			if !storage.IsTooLargeResourceVersion(got) {
				t.Errorf("storage.IsTooLargeResourceVersion(%v) = false", got)
			}
		})
	}
}
