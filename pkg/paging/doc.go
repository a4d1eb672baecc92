// Package paging owns listproxy's continue tokens and LIST request semantics:
//
//   - Keyring and Reloader seal and open listproxy's own continue tokens
//     (AES-256-GCM, rotating keys shared by all replicas);
//   - NativeContinue mints the apiserver's own continue token, so a list
//     begun from a snapshot can be finished by the apiserver;
//   - Decide maps a LIST's resourceVersion, resourceVersionMatch, limit and
//     continue parameters onto how listproxy answers it, and the …Error
//     helpers build the apiserver's exact Status errors;
//   - RemainingItemCount fills list metadata for a page.
//
// The semantics are the apiserver's:
// https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list,
// https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks,
// KEP-365 (paginated lists) and KEP-2523 (consistent resourceVersion semantics).
//
// It imports nothing of listproxy's: pkg/lists and any other server build
// on it.
package paging
