// Package gzstitch writes one gzip member (RFC 1952) from pieces of deflate
// stream (RFC 1951) compressed once and reused by many responses, mixed with
// bytes compressed at request time.
//
// A Chunk is compressed by compress/flate and ended with a sync flush, so it
// is a run of whole, non-final deflate blocks that starts and ends on a byte
// boundary: chunks can be concatenated as they are. A Chunk may refer back to
// up to Window bytes of the uncompressed stream before it (the bytes its
// Session was primed with or compressed before it); the caller places it only
// after exactly those bytes. Writer stitches chunks and request-time bytes
// together and computes the gzip trailer's CRC-32 by combining the chunks'
// CRCs (zlib's crc32_combine), without reading their uncompressed bytes.
//
// It imports nothing of listproxy's.
package gzstitch

import (
	"bytes"
	"compress/flate"
	"fmt"
	"hash/crc32"
	"sync"

	kflate "github.com/klauspost/compress/flate"
)

// Blank is a byte that no valid UTF-8 text holds. Bytes that differ
// between responses (a Table row's clock cells) are primed as Blank bytes,
// as many as they are long: a chunk that holds no Blank byte cannot refer to
// them (deflate copies only bytes equal to the chunk's own), so it is valid
// after any bytes of those lengths in their place.
const Blank = 0xff

// Window is how far back in the uncompressed stream deflate may refer
// (RFC 1951: distances up to 32768 bytes).
const Window = 32 << 10

// Chunk is a piece of a deflate stream compressed once, with what a gzip
// trailer needs to know about its uncompressed bytes. It is immutable. The
// zero Chunk is an empty piece.
type Chunk struct {
	data  []byte // whole non-final deflate blocks ending with a sync flush
	crc   uint32 // CRC-32 (IEEE) of the uncompressed bytes
	size  uint32 // number of uncompressed bytes
	shift uint32 // shiftFor(size)
}

// Len returns the number of compressed bytes.
func (c *Chunk) Len() int { return len(c.data) }

// Size returns the number of uncompressed bytes.
func (c *Chunk) Size() int { return int(c.size) }

// Compressor makes chunks at one compression level. It is safe for
// concurrent use; its sessions are pooled.
type Compressor struct {
	level int
	pool  sync.Pool // of *Session
}

// NewCompressor returns a Compressor for a compress/flate level from
// flate.BestSpeed to flate.BestCompression.
func NewCompressor(level int) (*Compressor, error) {
	if level < flate.BestSpeed || level > flate.BestCompression {
		return nil, fmt.Errorf("gzstitch: compression level %d out of range [%d, %d]", level, flate.BestSpeed, flate.BestCompression)
	}
	return &Compressor{level: level}, nil
}

// Session compresses consecutive pieces of one stream: each chunk may refer
// back to the bytes primed or compressed before it in the same session, up
// to Window bytes. A chunk is therefore valid only where those bytes precede
// it in the stream. A Session is not safe for concurrent use.
type Session struct {
	c   *Compressor
	fw  *flate.Writer // writes to buf
	buf bytes.Buffer
}

// NewSession starts a session with an empty history: its first chunk, if
// nothing is primed, stands alone. Close returns it to c.
func (c *Compressor) NewSession() *Session {
	if s, ok := c.pool.Get().(*Session); ok {
		s.fw.Reset(&s.buf)
		return s
	}
	s := &Session{c: c}
	s.fw, _ = flate.NewWriter(&s.buf, c.level) // level checked by NewCompressor
	return s
}

// Prime appends pieces to the history without producing a chunk: the next
// chunk may refer to them and must directly follow them in the stream.
func (s *Session) Prime(pieces ...[]byte) {
	for _, p := range pieces {
		_, _ = s.fw.Write(p) // writes to a bytes.Buffer do not fail
	}
	_ = s.fw.Flush()
	s.buf.Reset()
}

// Chunk compresses the concatenation of pieces into a chunk and appends it to
// the history.
func (s *Session) Chunk(pieces ...[]byte) Chunk {
	var crc uint32
	var n uint64
	for _, p := range pieces {
		_, _ = s.fw.Write(p)
		crc = crc32.Update(crc, crc32.IEEETable, p)
		n += uint64(len(p))
	}
	_ = s.fw.Flush()
	c := Chunk{data: bytes.Clone(s.buf.Bytes()), crc: crc, size: uint32(n), shift: shiftFor(n)}
	s.buf.Reset()
	return c
}

// Close ends the session. It must not be used afterwards.
func (s *Session) Close() {
	s.buf.Reset()
	s.c.pool.Put(s)
}

// Compress returns a chunk of the concatenation of pieces that stands alone:
// valid anywhere in a stream.
func (c *Compressor) Compress(pieces ...[]byte) Chunk {
	s := c.NewSession()
	defer s.Close()
	return s.Chunk(pieces...)
}

// MaxHistory is how much history CompressAfter uses: the last MaxHistory
// bytes of it.
const MaxHistory = Window

// afterWriter is a pooled CompressAfter compressor and its output.
type afterWriter struct {
	fw  *kflate.Writer
	buf bytes.Buffer
}

var afterWriters = sync.Pool{New: func() any {
	a := &afterWriter{}
	a.fw, _ = kflate.NewWriter(&a.buf, kflate.BestSpeed) // a valid level
	return a
}}

// CompressAfter returns a chunk of p compressed after history: it may refer
// back to the last MaxHistory bytes of history, and is valid only where they
// directly precede it in the stream. Unlike a Session primed with history,
// it spends no deflate block on the history (klauspost/compress's deflate
// at level 1 with history as its dictionary: the history is only indexed),
// so that it costs about what compressing p alone costs. Safe for
// concurrent use.
func CompressAfter(history, p []byte) Chunk {
	a := afterWriters.Get().(*afterWriter)
	defer func() {
		a.fw.ResetDict(nil, nil) // drops history and the output's writer
		a.buf.Reset()
		afterWriters.Put(a)
	}()
	a.buf.Reset()
	a.fw.ResetDict(&a.buf, history)
	// Writes to a bytes.Buffer do not fail; a sync flush ends the chunk on a
	// byte boundary, not final.
	_, _ = a.fw.Write(p)
	_ = a.fw.Flush()
	n := uint64(len(p))
	return Chunk{data: bytes.Clone(a.buf.Bytes()), crc: crc32.ChecksumIEEE(p), size: uint32(n), shift: shiftFor(n)}
}
