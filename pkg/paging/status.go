package paging

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Messages of the apiserver's 410 for a compacted RV,
// k8s.io/apiserver/pkg/storage/etcd3/errors.go.
const (
	expiredMessage = "The resourceVersion for the provided list is too old."

	continueExpiredMessage = "The provided continue parameter is too old " +
		"to display a consistent list result. You can start a new list without " +
		"the continue parameter."
	inconsistentContinueMessage = "The provided continue parameter is too old " +
		"to display a consistent list result. You can start a new list without " +
		"the continue parameter, or use the continue token in this response to " +
		"retrieve the remainder of the results. Continuing with the provided " +
		"token results in an inconsistent list - objects that were created, " +
		"modified, or deleted between the time the first chunk was returned " +
		"and now may show up in the list."
)

// tooLargeRVRetrySeconds is the Retry-After the apiserver's watch cache
// sends when a NotOlderThan read times out
// (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go
// resourceVersionTooHighRetrySeconds).
const tooLargeRVRetrySeconds = 1

// InvalidContinueError is the apiserver's 400 BadRequest for a continue token
// it cannot use: "invalid continue token: continue key is not valid: …"
// (k8s.io/apiserver/pkg/storage/interfaces.go ValidateListOptions). err is
// the reason, normally from Keyring.Open or Token.Matches; nil gives the
// generic message.
func InvalidContinueError(err error) *apierrors.StatusError {
	switch {
	case err == nil:
		err = ErrInvalidToken
	case !errors.Is(err, ErrInvalidToken):
		err = fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
}

// InvalidShardSelectorError is the apiserver's answer to a shardSelector
// (KEP-5866) it cannot parse, with its ShardedListAndWatch gate on: its
// registry fails the LIST or WATCH with a plain error, "invalid shard
// selector: " and the parser's (k8s.io/apiserver/pkg/registry/generic/
// registry/store.go ListPredicate and Watch), which its handler answers as
// a 500 without a reason (responsewriters.ErrorToAPIStatus). err is the
// parser's error (k8s.io/apiserver/pkg/sharding.Parse).
func InvalidShardSelectorError(err error) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonUnknown,
		Message: fmt.Sprintf("invalid shard selector: %v", err),
	}}
}

// ExpiredContinueError is the apiserver's 410 Expired for a continue token
// whose resourceVersion etcd has compacted. newToken, when not empty, goes
// into Status.metadata.continue and lets the client continue inconsistently
// from the same key at the latest resourceVersion (the apiserver mints
// NativeContinueLatest for this); an empty newToken gives the apiserver's
// message for when it cannot mint one.
func ExpiredContinueError(newToken string) *apierrors.StatusError {
	if newToken == "" {
		return apierrors.NewResourceExpired(continueExpiredMessage)
	}
	err := apierrors.NewResourceExpired(inconsistentContinueMessage)
	err.ErrStatus.Continue = newToken // Status.metadata.continue
	return err
}

// ExpiredResourceVersionError is the apiserver's 410 Expired for a list at
// an exact resourceVersion that etcd has compacted (interpretListError in
// k8s.io/apiserver/pkg/storage/etcd3/errors.go).
func ExpiredResourceVersionError() *apierrors.StatusError {
	return apierrors.NewResourceExpired(expiredMessage)
}

// TooLargeResourceVersionError is the apiserver's 504 Timeout for a read
// that asked for a resourceVersion (minRV) newer than any available in time
// (currentRV), with Retry-After 1 second as the watch cache sends
// (k8s.io/apiserver/pkg/storage/errors.go NewTooLargeResourceVersionError).
// Clients recognize it by its ResourceVersionTooLarge cause.
func TooLargeResourceVersionError(minRV, currentRV uint64) *apierrors.StatusError {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", minRV, currentRV), tooLargeRVRetrySeconds)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}
