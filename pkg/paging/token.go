package paging

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Every error returned by Keyring.Open and Token.Matches
// wraps ErrInvalidToken, so the HTTP edge needs only
// errors.Is(err, ErrInvalidToken) to answer with InvalidContinueError.
var (
	// ErrInvalidToken is wrapped by every error that rejects a continue token.
	// Its text is the apiserver's storage.ErrGenericInvalidKey, so
	// InvalidContinueError reads like the apiserver's own rejection.
	ErrInvalidToken = errors.New("continue key is not valid")
	// ErrMalformedToken: not a listproxy token, bad base64, truncated, too
	// long, or an undecodable payload.
	ErrMalformedToken = fmt.Errorf("%w: malformed token", ErrInvalidToken)
	// ErrUnknownKey: the token names a key id that no key in the keyring has
	// (rotated out, or sealed by a different deployment).
	ErrUnknownKey = fmt.Errorf("%w: unknown key", ErrInvalidToken)
	// ErrTokenTampered: authentication failed; the token was altered.
	ErrTokenTampered = fmt.Errorf("%w: authentication failed", ErrInvalidToken)
	// ErrTokenMismatch: the token opened but belongs to another list (a
	// different resource, namespace or selector).
	ErrTokenMismatch = fmt.Errorf("%w: token does not match the request", ErrInvalidToken)

	// ErrTokenTooLarge is returned by Seal when the sealed token would exceed
	// MaxTokenLength (Open would refuse it).
	ErrTokenTooLarge = errors.New("continue token too large")
)

const (
	// TokenPrefix starts every listproxy continue token. The '.' can never
	// occur in the apiserver's native tokens (base64url has no '.'), so the
	// prefix alone tells the two apart.
	TokenPrefix = "lp1."

	// MaxTokenLength is the longest token string Open will decode. The
	// largest real token (63-byte namespace, 253-byte name, CRD group)
	// seals to 663 bytes; a typical pods token to about 170.
	MaxTokenLength = 4096
)

// Token is what a listproxy continue token carries. It is sealed by
// Keyring.Seal: opaque (the start key is a resource name, KEP-365 "Security
// implications") and tamper-evident.
type Token struct {
	// Group and Resource name the listed resource, e.g. "", "pods".
	Group, Resource string
	// Namespace is the list's namespace scope; "" for cluster-wide lists.
	Namespace string
	// RV is the resourceVersion of the list that all pages share.
	RV uint64
	// StartKey is the key ("namespace/name" or "name") of the last item
	// returned; the next page starts strictly after it.
	StartKey string
	// SelectorDigest is SelectorDigest(labelSelector, fieldSelector,
	// shardSelector) of the list's request.
	SelectorDigest [32]byte
	// Returned counts items returned over all earlier pages.
	Returned int64
	// Total is the number of items in the list at RV, or -1 if unknown; it
	// feeds remainingItemCount.
	Total int64
	// IssuedAt is when the token was sealed. It survives Open with
	// nanosecond precision, in UTC.
	IssuedAt time.Time
}

// SelectorDigest returns the SHA-256 digest binding a token to its request's
// selectors. Callers pass the canonical String() forms of the parsed label,
// field and shard selectors, so that equivalent spellings digest equally.
// Without a shard selector ("") the digest is that of the label and field
// selectors alone, as tokens sealed before shard selectors were served
// carry it.
func SelectorDigest(labelSelector, fieldSelector, shardSelector string) [32]byte {
	h := sha256.New()
	// Length-prefix each part so ("a", "bc") and ("ab", "c") differ.
	var n [binary.MaxVarintLen64]byte
	parts := []string{labelSelector, fieldSelector}
	if shardSelector != "" {
		parts = append(parts, shardSelector)
	}
	for _, part := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Matches reports whether t continues the list identified by group,
// resource, namespace and selector digest. The error wraps ErrTokenMismatch
// (and so ErrInvalidToken) and names the first field that differs.
func (t Token) Matches(group, resource, namespace string, selectorDigest [32]byte) error {
	switch {
	case t.Group != group || t.Resource != resource:
		return fmt.Errorf("%w: resource", ErrTokenMismatch)
	case t.Namespace != namespace:
		return fmt.Errorf("%w: namespace", ErrTokenMismatch)
	case t.SelectorDigest != selectorDigest:
		return fmt.Errorf("%w: selector", ErrTokenMismatch)
	}
	return nil
}

// IsListproxyToken reports whether s is syntactically a listproxy token (it
// carries TokenPrefix). It does not open s; it is false for "" and for every
// apiserver-native token.
func IsListproxyToken(s string) bool {
	return len(s) > len(TokenPrefix) && strings.HasPrefix(s, TokenPrefix)
}

// marshalPayload encodes t compactly: varint lengths and integers, fixed
// 32-byte digest. Field order is part of the lp1 format.
func marshalPayload(t Token) []byte {
	b := make([]byte, 0, 64+len(t.Group)+len(t.Resource)+len(t.Namespace)+len(t.StartKey))
	b = appendString(b, t.Group)
	b = appendString(b, t.Resource)
	b = appendString(b, t.Namespace)
	b = binary.AppendUvarint(b, t.RV)
	b = appendString(b, t.StartKey)
	b = append(b, t.SelectorDigest[:]...)
	b = binary.AppendVarint(b, t.Returned)
	b = binary.AppendVarint(b, t.Total)
	b = binary.AppendVarint(b, t.IssuedAt.Unix())
	b = binary.AppendUvarint(b, uint64(t.IssuedAt.Nanosecond()))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// unmarshalPayload is the inverse of marshalPayload. It rejects truncated
// input and trailing bytes.
func unmarshalPayload(b []byte) (Token, error) {
	d := payloadDecoder{b: b}
	var t Token
	t.Group = d.string()
	t.Resource = d.string()
	t.Namespace = d.string()
	t.RV = d.uvarint()
	t.StartKey = d.string()
	copy(t.SelectorDigest[:], d.bytes(len(t.SelectorDigest)))
	t.Returned = d.varint()
	t.Total = d.varint()
	sec := d.varint()
	nsec := d.uvarint()
	if d.err == nil && nsec >= uint64(time.Second) {
		d.err = errors.New("nanoseconds out of range")
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Token{}, fmt.Errorf("%w: payload: %w", ErrMalformedToken, d.err)
	}
	t.IssuedAt = time.Unix(sec, int64(nsec)).UTC()
	return t, nil
}

// payloadDecoder reads varint-framed fields, remembering the first error.
type payloadDecoder struct {
	b   []byte
	err error
}

func (d *payloadDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *payloadDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *payloadDecoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = errors.New("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *payloadDecoder) string() string {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errors.New("truncated")
		return ""
	}
	return string(d.bytes(int(n)))
}
