package paging

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

const (
	// KeySize is the length of every keyring key: AES-256.
	KeySize = 32

	keyIDSize = 4
	nonceSize = 12 // GCM standard nonce
	tagSize   = 16 // GCM tag
)

// tokenEncoding encodes the sealed bytes after TokenPrefix. Strict rejects
// non-zero padding bits, so each token has exactly one spelling.
var tokenEncoding = base64.RawURLEncoding.Strict()

// keyID names a key inside a token: the first bytes of SHA-256(key). It is
// not secret (it reveals only which key sealed the token).
type keyID [keyIDSize]byte

func (id keyID) String() string { return hex.EncodeToString(id[:]) }

type sealKey struct {
	id   keyID
	aead cipher.AEAD // GCM over AES-256; safe for concurrent use
}

// Keyring seals and opens continue tokens with AES-256-GCM. The first key
// seals; every key opens, selected by the key id the token carries, so keys
// rotate by prepending a new key and later dropping the old one. A Keyring
// is immutable and safe for concurrent use.
//
// Sealed format: TokenPrefix + base64url-no-padding(keyID[4] | nonce[12] |
// ciphertext+tag), where the additional authenticated data is TokenPrefix +
// keyID.
type Keyring struct {
	primary *sealKey
	byID    map[keyID]*sealKey
}

// NewKeyring builds a keyring from keys, each exactly KeySize bytes; keys[0]
// seals. It fails on no keys, a wrong size, or two keys with the same id.
func NewKeyring(keys [][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("keyring needs at least one key")
	}
	k := &Keyring{byID: make(map[keyID]*sealKey, len(keys))}
	for i, key := range keys {
		sk, err := newSealKey(key)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if _, dup := k.byID[sk.id]; dup {
			return nil, fmt.Errorf("key %d: duplicate key id %s", i, sk.id)
		}
		k.byID[sk.id] = sk
		if i == 0 {
			k.primary = sk
		}
	}
	return k, nil
}

func newSealKey(key []byte) (*sealKey, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	sum := sha256.Sum256(key)
	sk := &sealKey{aead: aead}
	copy(sk.id[:], sum[:keyIDSize])
	return sk, nil
}

// NewRandomKeyring returns a keyring with one fresh random key. Its tokens
// open only in this process: use it for a single replica without a key file.
func NewRandomKeyring() (*Keyring, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("random key: %w", err)
	}
	return NewKeyring([][]byte{key})
}

// LoadKeyringFile reads a keyring from path: one key per line, the standard
// base64 encoding of KeySize random bytes (e.g. `head -c32 /dev/urandom |
// base64`). Blank lines and lines starting with '#' are ignored; the first
// key seals. Errors name the file and line.
func LoadKeyringFile(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	k, err := parseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}

func parseKeyring(data []byte) (*Keyring, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: decode base64: %w", line, err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("line %d: key is %d bytes, want %d", line, len(key), KeySize)
		}
		keys = append(keys, key)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	k, err := NewKeyring(keys)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// primaryID is the id of the sealing key, for logs.
func (k *Keyring) primaryID() string { return k.primary.id.String() }

// additionalData binds the version prefix and key id into the GCM tag.
func additionalData(id keyID) []byte {
	ad := make([]byte, 0, len(TokenPrefix)+keyIDSize)
	ad = append(ad, TokenPrefix...)
	return append(ad, id[:]...)
}

// Seal encrypts and authenticates t with the keyring's first key and returns
// the token string. It fails with ErrTokenTooLarge if the result would be
// longer than MaxTokenLength.
func (k *Keyring) Seal(t Token) (string, error) {
	sk := k.primary
	payload := marshalPayload(t)
	if n := len(TokenPrefix) + tokenEncoding.EncodedLen(keyIDSize+nonceSize+len(payload)+tagSize); n > MaxTokenLength {
		return "", fmt.Errorf("%w: %d bytes, limit %d", ErrTokenTooLarge, n, MaxTokenLength)
	}
	raw := make([]byte, keyIDSize+nonceSize, keyIDSize+nonceSize+len(payload)+tagSize)
	copy(raw, sk.id[:])
	nonce := raw[keyIDSize:]
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	raw = sk.aead.Seal(raw, nonce, payload, additionalData(sk.id))
	return TokenPrefix + tokenEncoding.EncodeToString(raw), nil
}

// Open authenticates and decrypts a token made by Seal with any key of the
// keyring. Every error wraps ErrInvalidToken, and one of ErrMalformedToken,
// ErrUnknownKey or ErrTokenTampered. Open checks the length before decoding.
func (k *Keyring) Open(s string) (Token, error) {
	if len(s) > MaxTokenLength {
		return Token{}, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformedToken, len(s), MaxTokenLength)
	}
	if !IsListproxyToken(s) {
		return Token{}, fmt.Errorf("%w: missing %q prefix", ErrMalformedToken, TokenPrefix)
	}
	raw, err := tokenEncoding.DecodeString(s[len(TokenPrefix):])
	if err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrMalformedToken, err)
	}
	if len(raw) < keyIDSize+nonceSize+tagSize {
		return Token{}, fmt.Errorf("%w: truncated", ErrMalformedToken)
	}
	var id keyID
	copy(id[:], raw)
	sk, ok := k.byID[id]
	if !ok {
		return Token{}, fmt.Errorf("%w: key id %s", ErrUnknownKey, id)
	}
	nonce := raw[keyIDSize : keyIDSize+nonceSize]
	payload, err := sk.aead.Open(nil, nonce, raw[keyIDSize+nonceSize:], additionalData(id))
	if err != nil {
		return Token{}, ErrTokenTampered
	}
	return unmarshalPayload(payload)
}
