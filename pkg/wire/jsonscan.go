package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// This file holds a small structural JSON scanner. It finds the extent of a
// value (matching brackets and braces, strings with escapes) without building
// it, so that list items and watch objects can be cut out of a stream and
// metadata read out of an object without unmarshaling the rest. It checks
// structure (balance, string termination, nesting depth), not the full JSON
// grammar: the bytes come from the apiserver, whose encoder produced valid
// JSON, and are forwarded unchanged.

const (
	// maxDepth bounds nesting, as encoding/json does.
	maxDepth = 10000
	// maxValueSize bounds one streamed value (a list item, a watch event).
	// Objects are limited by etcd's request size (1.5 MiB by default); this is
	// a guard against unbounded buffering on garbage, not a tuned limit.
	maxValueSize = 64 << 20
	// streamBufSize is the initial read buffer of a jsonStream. Not measured;
	// grows geometrically to the largest item.
	streamBufSize = 32 << 10
)

type scanState uint8

const (
	stStart scanState = iota
	stContainer
	stString
	stEscape
	stScalar
)

// valueScanner finds where one JSON value ends. It is incremental: scan may
// be called with successive chunks of input.
type valueScanner struct {
	stack []byte // open '{' and '['
	state scanState
}

func (s *valueScanner) reset() {
	s.stack = s.stack[:0]
	s.state = stStart
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// scan consumes b, which continues the value. It returns how many bytes of b
// belong to the value and whether the value is complete. A scalar at top
// level is complete only when a delimiter follows; see endsAtEOF.
func (s *valueScanner) scan(b []byte) (int, bool, error) {
	i := 0
	for i < len(b) {
		c := b[i]
		switch s.state {
		case stStart:
			switch {
			case c == '{' || c == '[':
				s.stack = append(s.stack, c)
				s.state = stContainer
			case c == '"':
				s.state = stString
			case isScalarByte(c):
				s.state = stScalar
			default:
				return i, false, malformed("unexpected byte %q at start of value", c)
			}
			i++
		case stString:
			// Fast path: skip ordinary string bytes.
			for i < len(b) && b[i] != '"' && b[i] != '\\' {
				i++
			}
			if i == len(b) {
				return i, false, nil
			}
			switch {
			case b[i] == '\\':
				s.state = stEscape
			case len(s.stack) == 0: // closing quote of a top-level string
				return i + 1, true, nil
			default:
				s.state = stContainer
			}
			i++
		case stEscape:
			s.state = stString
			i++
		case stScalar:
			if isScalarByte(c) {
				i++
				continue
			}
			if len(s.stack) == 0 {
				return i, true, nil
			}
			s.state = stContainer // reprocess c
		case stContainer:
			switch {
			case c == '"':
				s.state = stString
			case c == '{' || c == '[':
				if len(s.stack) >= maxDepth {
					return i, false, malformed("nesting deeper than %d", maxDepth)
				}
				s.stack = append(s.stack, c)
			case c == '}' || c == ']':
				open := byte('{')
				if c == ']' {
					open = '['
				}
				if s.stack[len(s.stack)-1] != open {
					return i, false, malformed("mismatched %q", c)
				}
				s.stack = s.stack[:len(s.stack)-1]
				if len(s.stack) == 0 {
					return i + 1, true, nil
				}
			case c == ',' || c == ':' || isSpace(c):
			case isScalarByte(c):
				s.state = stScalar
			default:
				return i, false, malformed("unexpected byte %q", c)
			}
			i++
		}
	}
	return i, false, nil
}

// endsAtEOF reports whether the value scanned so far is complete if the
// input ends here (a top-level scalar).
func (s *valueScanner) endsAtEOF() bool { return s.state == stScalar && len(s.stack) == 0 }

// valueEnd returns the index just past the JSON value that starts at b[i]
// (b[i] must not be whitespace). It is the in-memory twin of valueScanner,
// written out so that it does not allocate.
func valueEnd(b []byte, i int) (int, error) {
	c := b[i]
	switch {
	case c == '"':
		return stringEnd(b, i+1)
	case isScalarByte(c):
		for i < len(b) && isScalarByte(b[i]) {
			i++
		}
		return i, nil
	case c != '{' && c != '[':
		return 0, malformed("unexpected byte %q at start of value", c)
	}
	var buf [64]byte
	stack := buf[:0]
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			j, err := stringEnd(b, i+1)
			if err != nil {
				return 0, err
			}
			i = j
			continue
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return 0, malformed("nesting deeper than %d", maxDepth)
			}
			stack = append(stack, c)
		case c == '}' || c == ']':
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return 0, malformed("mismatched %q", c)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return i + 1, nil
			}
		case c == ',' || c == ':' || isSpace(c) || isScalarByte(c):
		default:
			return 0, malformed("unexpected byte %q", c)
		}
		i++
	}
	return 0, malformed("unexpected end of JSON value")
}

// stringEnd returns the index just past the closing quote of the JSON string
// whose contents start at b[i].
func stringEnd(b []byte, i int) (int, error) {
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return 0, malformed("unterminated JSON string")
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// memberValue returns the raw value of the first member of the JSON object
// b named name (unquoted), or nil when b has no such member.
func memberValue(b []byte, name string) ([]byte, error) {
	var found []byte
	err := eachMember(b, func(key, value []byte) (bool, error) {
		if keyIs(key, name) {
			found = value
			return false, nil
		}
		return true, nil
	})
	return found, err
}

// memberStart returns the offset in b of the value of the first member of
// the JSON object that b starts with named name (unquoted), or -1 when the
// object has no such member. It reads b only up to that value's start (or
// the object's end): b may go on past the object, and the value and what
// follows it are not scanned.
func memberStart(b []byte, name string) (int, error) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return 0, malformed("expected JSON object")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return -1, nil
	}
	for {
		if i == len(b) || b[i] != '"' {
			return 0, malformed("expected object key")
		}
		ke, err := valueEnd(b, i)
		if err != nil {
			return 0, err
		}
		key := b[i:ke]
		i = skipSpace(b, ke)
		if i == len(b) || b[i] != ':' {
			return 0, malformed("expected ':' after object key")
		}
		i = skipSpace(b, i+1)
		if i == len(b) {
			return 0, malformed("missing object value")
		}
		if keyIs(key, name) {
			return i, nil
		}
		ve, err := valueEnd(b, i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(b, ve)
		if i == len(b) {
			return 0, malformed("unterminated object")
		}
		switch b[i] {
		case '}':
			return -1, nil
		case ',':
			i = skipSpace(b, i+1)
		default:
			return 0, malformed("expected ',' or '}' in object")
		}
	}
}

// eachMember calls fn for each member of the JSON object b (b is exactly one
// object, as returned by valueEnd). key is the raw key including quotes;
// value is the raw value. fn returns false to stop early.
func eachMember(b []byte, fn func(key, value []byte) (bool, error)) error {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return malformed("expected JSON object")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i == len(b) || b[i] != '"' {
			return malformed("expected object key")
		}
		ke, err := valueEnd(b, i)
		if err != nil {
			return err
		}
		key := b[i:ke]
		i = skipSpace(b, ke)
		if i == len(b) || b[i] != ':' {
			return malformed("expected ':' after object key")
		}
		i = skipSpace(b, i+1)
		if i == len(b) {
			return malformed("missing object value")
		}
		ve, err := valueEnd(b, i)
		if err != nil {
			return err
		}
		more, err := fn(key, b[i:ve])
		if err != nil || !more {
			return err
		}
		i = skipSpace(b, ve)
		if i == len(b) {
			return malformed("unterminated object")
		}
		switch b[i] {
		case '}':
			return nil
		case ',':
			i = skipSpace(b, i+1)
		default:
			return malformed("expected ',' or '}' in object")
		}
	}
}

// rawStringBytes returns the contents of the raw JSON string s when it has no
// escapes (the common case; no allocation), else nil, false.
func rawStringBytes(s []byte) ([]byte, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return nil, false
	}
	in := s[1 : len(s)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		return nil, false
	}
	return in, true
}

// decodeString decodes the raw JSON string s.
func decodeString(s []byte) (string, error) {
	if in, ok := rawStringBytes(s); ok {
		return string(in), nil
	}
	if len(s) == 0 || s[0] != '"' {
		return "", malformed("expected JSON string")
	}
	var out string
	if err := json.Unmarshal(s, &out); err != nil {
		return "", malformed("JSON string: %v", err)
	}
	return out, nil
}

// keyIs reports whether the raw JSON string key equals name.
func keyIs(key []byte, name string) bool {
	if in, ok := rawStringBytes(key); ok {
		return string(in) == name
	}
	s, err := decodeString(key)
	return err == nil && s == name
}

// jsonStream reads JSON tokens and values from an io.Reader with a buffer
// that slides or doubles, so that reading a body is linear in its size.
type jsonStream struct {
	r   io.Reader
	buf []byte
	pos int   // next unread byte
	end int   // end of valid data in buf
	err error // sticky read error; io.EOF at the end
	sc  valueScanner
}

func newJSONStream(r io.Reader) *jsonStream {
	return &jsonStream{r: r, buf: make([]byte, streamBufSize)}
}

// fill reads more input, keeping buf[keep:end]. It returns the number of
// bytes everything moved left by (subtract it from saved indices).
func (s *jsonStream) fill(keep int) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	shift := 0
	if s.end == len(s.buf) {
		n := s.end - keep
		if n >= maxValueSize {
			return 0, malformed("JSON value larger than %d bytes", maxValueSize)
		}
		if n <= len(s.buf)/2 {
			copy(s.buf, s.buf[keep:s.end])
		} else {
			nb := make([]byte, 2*len(s.buf))
			copy(nb, s.buf[keep:s.end])
			s.buf = nb
		}
		shift = keep
		s.pos -= keep
		s.end = n
	}
	for range 100 {
		m, err := s.r.Read(s.buf[s.end:])
		s.end += m
		if err != nil {
			s.err = err
		}
		if m > 0 {
			return shift, nil
		}
		if err != nil {
			return shift, err
		}
	}
	s.err = io.ErrNoProgress
	return shift, s.err
}

// peek skips whitespace and returns the next byte without consuming it.
func (s *jsonStream) peek() (byte, error) {
	for {
		for s.pos < s.end {
			if !isSpace(s.buf[s.pos]) {
				return s.buf[s.pos], nil
			}
			s.pos++
		}
		if _, err := s.fill(s.pos); err != nil {
			return 0, err
		}
	}
}

// expect consumes the next non-space byte, which must be c.
func (s *jsonStream) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return unexpectedEOF(err)
	}
	if got != c {
		return malformed("expected %q, found %q", c, got)
	}
	s.pos++
	return nil
}

// readValue returns the next JSON value. The bytes alias the buffer and are
// valid only until the next call on s (any call may slide the buffer).
func (s *jsonStream) readValue() ([]byte, error) {
	if _, err := s.peek(); err != nil {
		return nil, unexpectedEOF(err)
	}
	start := s.pos
	s.sc.reset()
	for {
		n, done, err := s.sc.scan(s.buf[s.pos:s.end])
		s.pos += n
		if err != nil {
			return nil, err
		}
		if done {
			return s.buf[start:s.pos], nil
		}
		shift, err := s.fill(start)
		start -= shift
		if err != nil {
			if errors.Is(err, io.EOF) && s.sc.endsAtEOF() {
				return s.buf[start:s.pos], nil
			}
			return nil, unexpectedEOF(err)
		}
	}
}

// readKey reads an object member's key and the ':' after it.
func (s *jsonStream) readKey() (string, error) {
	rawKey, err := s.readValue()
	if err != nil {
		return "", err
	}
	key, err := decodeString(rawKey)
	if err != nil {
		return "", err
	}
	if err := s.expect(':'); err != nil {
		return "", err
	}
	return key, nil
}

// memberEnd consumes the ',' or '}' after an object's member and reports
// whether it was the '}' that ends the object; in names the object in the
// error for any other byte.
func (s *jsonStream) memberEnd(in string) (last bool, err error) {
	c, err := s.peek()
	if err != nil {
		return false, unexpectedEOF(err)
	}
	s.pos++
	if c == '}' {
		return true, nil
	}
	if c != ',' {
		return false, malformed("expected ',' or '}' in %s, found %q", in, c)
	}
	return false, nil
}

// atEOF skips whitespace and reports whether the input has ended cleanly.
func (s *jsonStream) atEOF() (bool, error) {
	_, err := s.peek()
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return malformed("%w", io.ErrUnexpectedEOF)
	}
	return err
}

// eachElement calls fn for each element of the JSON array b (exactly one
// array) with the element's raw value.
func eachElement(b []byte, fn func(value []byte) error) error {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '[' {
		return malformed("expected JSON array")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return nil
	}
	for {
		if i == len(b) {
			return malformed("unterminated array")
		}
		ve, err := valueEnd(b, i)
		if err != nil {
			return err
		}
		if err := fn(b[i:ve]); err != nil {
			return err
		}
		i = skipSpace(b, ve)
		if i == len(b) {
			return malformed("unterminated array")
		}
		switch b[i] {
		case ']':
			return nil
		case ',':
			i = skipSpace(b, i+1)
		default:
			return malformed("expected ',' or ']' in array")
		}
	}
}
