package paging

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// nativeToken mirrors the apiserver's continueToken
// (k8s.io/apiserver/pkg/storage/continue.go), a public API that cannot change.
type nativeToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

// NativeContinue mints the apiserver's own continue token for a list at rv
// that continues strictly after lastKey, exactly as the apiserver's
// storage.PrepareContinueToken would. lastKey is relative to the list's key
// prefix (see RelativeKey). rv must be a real resourceVersion, 0 < rv ≤
// MaxInt64; the apiserver rejects rv 0 ("incorrect encoded start
// resourceVersion").
//
// With this token a LIST is served by the apiserver at rv, from the key after
// lastKey (KEP-365). The result is byte-identical to the etcd3 store's
// tokens; the watch cache's carry a leading "/" in start, which the
// apiserver decodes to the same key.
func NativeContinue(rv uint64, lastKey string) string {
	return encodeNative(int64(rv), lastKey)
}

// NativeContinueLatest mints the token the apiserver puts into a 410
// Expired for a compacted continue: rv -1, which continues after lastKey at
// the latest resourceVersion (an inconsistent continuation). See
// k8s.io/apiserver/pkg/storage/etcd3/errors.go handleCompactedErrorForPaging.
func NativeContinueLatest(lastKey string) string {
	return encodeNative(-1, lastKey)
}

func encodeNative(rv int64, lastKey string) string {
	// The apiserver appends "\x00" to the last key: the smallest key after it.
	out, err := json.Marshal(nativeToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rv, StartKey: lastKey + "\x00"})
	if err != nil {
		// Marshaling a struct of strings and an int cannot fail.
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(out)
}

// RelativeKey turns a listproxy key ("namespace/name", or "name" for
// cluster-scoped resources) into the key relative to the apiserver's key
// prefix for a list scoped to namespace: "name" for a namespaced list,
// unchanged for a cluster-wide list ("ns/name") or a cluster-scoped resource
// ("name").
//
// namespace is the request path's namespace ("" for /api/v1/pods). A
// `metadata.namespace=NS` field selector does not count: the apiserver
// narrows its key prefix to NS only for requests without a continue token
// (k8s.io/apiserver/pkg/storage/selection_predicate.go MatchesSingleNamespace),
// and a native token minted here is always sent with one. key must lie in
// namespace; a key that does not is returned unchanged.
func RelativeKey(namespace, key string) string {
	if namespace == "" {
		return key
	}
	if rest, ok := strings.CutPrefix(key, namespace+"/"); ok {
		return rest
	}
	return key
}

// UndecodableContinue replaces a listproxy continue token that cannot be
// handed to the apiserver: it is not base64url, so the apiserver rejects it
// as an invalid continue token, after its own earlier checks.
const UndecodableContinue = "!"
