package paging

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewKeyring(t *testing.T) {
	tests := []struct {
		name    string
		keys    [][]byte
		wantErr string
	}{
		{name: "one_key", keys: [][]byte{testKey(1)}},
		{name: "two_keys", keys: [][]byte{testKey(1), testKey(2)}},
		{name: "no_keys", keys: nil, wantErr: "at least one key"},
		{name: "short_key", keys: [][]byte{testKey(1), make([]byte, 16)}, wantErr: "key 1: key is 16 bytes, want 32"},
		{name: "long_key", keys: [][]byte{make([]byte, 33)}, wantErr: "key 0: key is 33 bytes, want 32"},
		{name: "duplicate_key", keys: [][]byte{testKey(1), testKey(1)}, wantErr: "key 1: duplicate key id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewKeyring(tc.keys)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewKeyring() = %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewKeyring() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewRandomKeyring(t *testing.T) {
	a, err := NewRandomKeyring()
	if err != nil {
		t.Fatalf("NewRandomKeyring: %v", err)
	}
	b, err := NewRandomKeyring()
	if err != nil {
		t.Fatalf("NewRandomKeyring: %v", err)
	}
	s := mustSeal(t, a, sampleToken())
	if _, err := a.Open(s); err != nil {
		t.Errorf("Open with sealing keyring: %v", err)
	}
	if _, err := b.Open(s); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Open with another random keyring = %v, want %v", err, ErrUnknownKey)
	}
}

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func TestLoadKeyringFile(t *testing.T) {
	k1, k2 := b64(testKey(1)), b64(testKey(2))
	tests := []struct {
		name     string
		content  string
		wantErr  string
		sealedBy byte // key that must open what the loaded keyring seals
		opens    []byte
	}{
		{name: "one_key", content: k1 + "\n", sealedBy: 1, opens: []byte{1}},
		{name: "no_trailing_newline", content: k1, sealedBy: 1, opens: []byte{1}},
		{name: "comments_blanks_crlf", content: "# rotated 2026-03-01\r\n\r\n  " + k2 + "  \r\n# old\r\n" + k1 + "\r\n", sealedBy: 2, opens: []byte{1, 2}},
		{name: "empty", content: "", wantErr: "no keys"},
		{name: "only_comments", content: "# nothing\n\n", wantErr: "no keys"},
		{name: "bad_base64", content: k1 + "\n\nnot-base64!\n", wantErr: "line 3: decode base64"},
		{name: "url_alphabet", content: strings.NewReplacer("+", "-", "/", "_").Replace(b64([]byte(strings.Repeat("\xfb\xff", 16)))), wantErr: "line 1: decode base64"},
		{name: "short_key", content: "# c\n" + b64(make([]byte, 16)), wantErr: "line 2: key is 16 bytes, want 32"},
		{name: "duplicate", content: k1 + "\n" + k1, wantErr: "duplicate key id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			k, err := LoadKeyringFile(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("LoadKeyringFile() = %v, want error naming %s and containing %q", err, path, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadKeyringFile() = %v", err)
			}
			s := mustSeal(t, k, sampleToken())
			if _, err := mustKeyring(t, tc.sealedBy).Open(s); err != nil {
				t.Errorf("token not sealed by key %d: %v", tc.sealedBy, err)
			}
			for _, n := range tc.opens {
				if _, err := k.Open(mustSeal(t, mustKeyring(t, n), sampleToken())); err != nil {
					t.Errorf("loaded keyring does not open tokens of key %d: %v", n, err)
				}
			}
		})
	}
}

func TestLoadKeyringFileMissing(t *testing.T) {
	_, err := LoadKeyringFile(filepath.Join(t.TempDir(), "absent"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyringFile() = %v, want %v", err, os.ErrNotExist)
	}
}

func TestSealOpenRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tok  Token
	}{
		{name: "sample", tok: sampleToken()},
		{name: "zero", tok: Token{}},
		{name: "crd_namespaced", tok: Token{Group: "demo.listproxy.io", Resource: "widgets", Namespace: "team-a", RV: 42, StartKey: "team-a/w-7", Total: -1}},
		{name: "longest_key", tok: Token{Resource: "configmaps", StartKey: strings.Repeat("n", 63) + "/" + strings.Repeat("m", 253), RV: 1 << 40}},
	}
	k := mustKeyring(t, 1)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSeal(t, k, tc.tok)
			if !IsListproxyToken(s) {
				t.Errorf("IsListproxyToken(%q) = false", s)
			}
			if strings.Contains(s, "/") || strings.Contains(s, "+") || strings.Contains(s, "=") {
				t.Errorf("token %q is not URL-safe", s)
			}
			if tc.tok.StartKey != "" && strings.Contains(s, tc.tok.StartKey) {
				t.Errorf("token %q shows its start key", s)
			}
			got, err := k.Open(s)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if diff := cmp.Diff(tc.tok, got); diff != "" {
				t.Errorf("Open(Seal(t)) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSealDistinctNonces(t *testing.T) {
	k := mustKeyring(t, 1)
	a, b := mustSeal(t, k, sampleToken()), mustSeal(t, k, sampleToken())
	if a == b {
		t.Errorf("two seals of one token are equal: %q", a)
	}
}

func TestSealTooLarge(t *testing.T) {
	_, err := mustKeyring(t, 1).Seal(Token{StartKey: strings.Repeat("x", MaxTokenLength)})
	if !errors.Is(err, ErrTokenTooLarge) {
		t.Errorf("Seal() = %v, want %v", err, ErrTokenTooLarge)
	}
}

func TestKeyRotation(t *testing.T) {
	old := mustKeyring(t, 1)
	rotated := mustKeyring(t, 2, 1) // new key first, old key still opens
	retired := mustKeyring(t, 2)
	oldTok := mustSeal(t, old, sampleToken())
	newTok := mustSeal(t, rotated, sampleToken())

	tests := []struct {
		name    string
		k       *Keyring
		tok     string
		wantErr error
	}{
		{name: "rotated_opens_old", k: rotated, tok: oldTok},
		{name: "rotated_opens_new", k: rotated, tok: newTok},
		{name: "retired_rejects_old", k: retired, tok: oldTok, wantErr: ErrUnknownKey},
		{name: "retired_opens_new", k: retired, tok: newTok},
		{name: "old_rejects_new", k: old, tok: newTok, wantErr: ErrUnknownKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.k.Open(tc.tok)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Open() = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// rawToken returns the decoded bytes of a sealed token.
func rawToken(t *testing.T, s string) []byte {
	t.Helper()
	raw, err := tokenEncoding.DecodeString(strings.TrimPrefix(s, TokenPrefix))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func encodeRaw(raw []byte) string { return TokenPrefix + tokenEncoding.EncodeToString(raw) }

func flipByte(raw []byte, i int) []byte {
	out := append([]byte{}, raw...)
	out[i] ^= 0x01
	return out
}

func TestOpenErrors(t *testing.T) {
	k := mustKeyring(t, 1)
	good := mustSeal(t, k, sampleToken())
	raw := rawToken(t, good)
	sk := k.primary

	// Sealed with the right key but without the version prefix in the
	// additional data: must not open, so a token cannot move between versions.
	nonce := make([]byte, nonceSize)
	wrongAD := append(append(append([]byte{}, sk.id[:]...), nonce...), sk.aead.Seal(nil, nonce, marshalPayload(sampleToken()), sk.id[:])...)
	// Authentic, but a payload that does not decode.
	badPayload := append(append(append([]byte{}, sk.id[:]...), nonce...), sk.aead.Seal(nil, nonce, []byte{0x01}, additionalData(sk.id))...)

	tests := []struct {
		name    string
		in      string
		wantErr error
	}{
		{name: "empty", in: "", wantErr: ErrMalformedToken},
		{name: "native_token", in: NativeContinue(123, "ns/name"), wantErr: ErrMalformedToken},
		{name: "other_version", in: "lp2." + good[len(TokenPrefix):], wantErr: ErrMalformedToken},
		{name: "bad_base64", in: TokenPrefix + "!!!!", wantErr: ErrMalformedToken},
		{name: "std_base64_padding", in: TokenPrefix + base64.StdEncoding.EncodeToString(raw), wantErr: ErrMalformedToken},
		{name: "truncated_header", in: encodeRaw(raw[:keyIDSize+nonceSize]), wantErr: ErrMalformedToken},
		{name: "truncated_ciphertext", in: encodeRaw(raw[:len(raw)-1]), wantErr: ErrTokenTampered},
		{name: "too_long", in: good + strings.Repeat("A", MaxTokenLength), wantErr: ErrMalformedToken},
		{name: "unknown_key", in: mustSeal(t, mustKeyring(t, 9), sampleToken()), wantErr: ErrUnknownKey},
		{name: "flipped_key_id", in: encodeRaw(flipByte(raw, 0)), wantErr: ErrUnknownKey},
		{name: "flipped_nonce", in: encodeRaw(flipByte(raw, keyIDSize)), wantErr: ErrTokenTampered},
		{name: "flipped_ciphertext", in: encodeRaw(flipByte(raw, keyIDSize+nonceSize+3)), wantErr: ErrTokenTampered},
		{name: "flipped_tag", in: encodeRaw(flipByte(raw, len(raw)-1)), wantErr: ErrTokenTampered},
		{name: "ad_without_prefix", in: encodeRaw(wrongAD), wantErr: ErrTokenTampered},
		{name: "authentic_bad_payload", in: encodeRaw(badPayload), wantErr: ErrMalformedToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Open(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open() = %v, want %v", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidToken) {
				t.Errorf("Open() = %v, does not wrap ErrInvalidToken", err)
			}
		})
	}
}
