package paging

// RemainingItemCount returns the apiserver's list metadata
// remainingItemCount for a page: the number of items after this page, that
// is total - returnedBefore - thisPage. It is nil, as upstream, when the list
// is complete (no more pages), when a label or field selector is set (the
// count would include non-matching items), or when total is unknown (< 0).
// See k8s.io/apiserver/pkg/storage/continue.go PrepareContinueToken.
func RemainingItemCount(total, returnedBefore, thisPage int64, hasMore, selectorSet bool) *int64 {
	if !hasMore || selectorSet || total < 0 {
		return nil
	}
	n := total - returnedBefore - thisPage
	if n <= 0 {
		// hasMore promises at least one more item: total disagrees.
		return nil
	}
	return &n
}
