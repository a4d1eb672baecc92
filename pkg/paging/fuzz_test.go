package paging

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzOpen checks that Open never panics and rejects only with
// ErrInvalidToken, that whatever opens re-seals to the same token, and that
// a token built from the other inputs survives Seal then Open. Seeds live in
// testdata/fuzz/FuzzOpen (tokens sealed with testKey(1)).
func FuzzOpen(f *testing.F) {
	k := mustKeyring(f, 1, 2)
	f.Fuzz(func(t *testing.T, s, group, resource, namespace, startKey string, rv uint64, returned, total, issuedNano int64) {
		if got, err := k.Open(s); err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("Open(%q) = %v, does not wrap ErrInvalidToken", s, err)
			}
		} else {
			again, err := k.Open(mustSeal(t, k, got))
			if err != nil {
				t.Fatalf("Open(Seal(Open(%q))): %v", s, err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Fatalf("re-seal (-want +got):\n%s", diff)
			}
		}

		tok := Token{
			Group: group, Resource: resource, Namespace: namespace, StartKey: startKey,
			RV: rv, SelectorDigest: SelectorDigest(group, startKey, ""),
			Returned: returned, Total: total, IssuedAt: time.Unix(0, issuedNano).UTC(),
		}
		sealed, err := k.Seal(tok)
		if errors.Is(err, ErrTokenTooLarge) {
			return
		}
		if err != nil {
			t.Fatalf("Seal: %v", err)
		}
		if len(sealed) > MaxTokenLength {
			t.Fatalf("Seal returned %d bytes, limit %d", len(sealed), MaxTokenLength)
		}
		got, err := k.Open(sealed)
		if err != nil {
			t.Fatalf("Open(Seal(%+v)): %v", tok, err)
		}
		if diff := cmp.Diff(tok, got); diff != "" {
			t.Fatalf("Open(Seal(t)) (-want +got):\n%s", diff)
		}
	})
}
