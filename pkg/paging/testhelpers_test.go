package paging

import (
	"bytes"
	"testing"
	"time"
)

// testKey returns a fixed 32-byte key; distinct n give distinct keys.
func testKey(n byte) []byte { return bytes.Repeat([]byte{n}, KeySize) }

// mustKeyring builds a keyring from testKey(n) for each n; the first seals.
func mustKeyring(t testing.TB, ns ...byte) *Keyring {
	t.Helper()
	keys := make([][]byte, len(ns))
	for i, n := range ns {
		keys[i] = testKey(n)
	}
	k, err := NewKeyring(keys)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func mustSeal(t testing.TB, k *Keyring, tok Token) string {
	t.Helper()
	s, err := k.Seal(tok)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return s
}

// sampleToken is a realistic token for a cluster-wide pods list.
func sampleToken() Token {
	return Token{
		Group:          "",
		Resource:       "pods",
		Namespace:      "",
		RV:             123456,
		StartKey:       "kube-system/coredns-5d78c9869d-abcde",
		SelectorDigest: SelectorDigest("app=web", "spec.nodeName=node-1", ""),
		Returned:       500,
		Total:          30000,
		IssuedAt:       time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC),
	}
}
