package gzstitch

import (
	"bufio"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
)

// header is the gzip member header Go's gzip.Writer writes at BestSpeed,
// as the apiserver's responses carry it: no name, no mtime, XFL 4 (fastest),
// OS unknown.
var header = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff}

// finalBlock is an empty final deflate block with fixed Huffman codes: bits
// BFINAL=1, BTYPE=01, then end-of-block (seven zero bits), padded.
var finalBlock = [2]byte{0x03, 0x00}

// bufSize batches the many small chunks of a list (a few hundred bytes each)
// into large writes, as wire.WriteList does with its items.
const bufSize = 256 << 10

var (
	bufPool   = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
	flatePool sync.Pool // of *flate.Writer at flate.BestSpeed
)

// Writer writes one gzip member to an io.Writer: bytes passed to Write,
// compressed at request time at flate.BestSpeed (the apiserver's level), and
// chunks passed to WriteChunk, copied as they are. Close must be called, also
// after an error, to finish the member and release pooled buffers. A Writer
// is not safe for concurrent use.
type Writer struct {
	bw        *bufio.Writer
	fw        *flate.Writer // nil until the first Write
	streaming bool          // fw has written since its last Flush or Reset
	crc       uint32
	size      uint32 // mod 2^32, as ISIZE
	closed    bool
	stored    [5]byte // a stored block's header, here so that it is not allocated per block
}

// NewWriter returns a Writer to w and writes the gzip header (buffered).
func NewWriter(w io.Writer) *Writer {
	bw := bufPool.Get().(*bufio.Writer)
	bw.Reset(w)
	_, _ = bw.Write(header[:]) // errors stick in bw and come back from Close
	return &Writer{bw: bw}
}

// Write compresses p at request time. Back-references stay within what
// Write compressed since the last chunk.
func (z *Writer) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !z.streaming {
		if z.fw == nil {
			if fw, ok := flatePool.Get().(*flate.Writer); ok {
				z.fw = fw
				z.fw.Reset(z.bw)
			} else {
				z.fw, _ = flate.NewWriter(z.bw, flate.BestSpeed) // a valid level
			}
		} else {
			// The stream's history lacks the chunks written since: start afresh.
			z.fw.Reset(z.bw)
		}
		z.streaming = true
	}
	n, err := z.fw.Write(p)
	z.crc = crc32.Update(z.crc, crc32.IEEETable, p[:n])
	z.size += uint32(n)
	return n, err
}

// WriteChunk appends c. The caller guarantees that the uncompressed bytes c
// was compressed after (see Session) are the ones just before it.
func (z *Writer) WriteChunk(c *Chunk) error {
	if err := z.endStream(); err != nil {
		return err
	}
	if len(c.data) == 0 {
		return nil
	}
	_, err := z.bw.Write(c.data)
	z.crc = combine(z.crc, c.crc, c.shift)
	z.size += c.size
	return err
}

// maxStored is the most bytes one stored deflate block holds (RFC 1951
// 3.2.4: LEN is 16 bits).
const maxStored = 1<<16 - 1

// WriteStored appends p uncompressed, as stored deflate blocks: no
// compression work at all, for short request-time bytes between chunks (a
// Table row's clock cells), where a compressed block would cost more than
// it saves. Chunks may follow it as they may follow Write's bytes.
func (z *Writer) WriteStored(p []byte) error {
	if err := z.endStream(); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), maxStored)
		// BFINAL 0, BTYPE 00, padded to the byte boundary that every
		// chunk and flushed stream ends on; then LEN and NLEN.
		z.stored = [5]byte{0, byte(n), byte(n >> 8), ^byte(n), ^byte(n >> 8)}
		if _, err := z.bw.Write(z.stored[:]); err != nil {
			return err
		}
		if _, err := z.bw.Write(p[:n]); err != nil {
			return err
		}
		z.crc = crc32.Update(z.crc, crc32.IEEETable, p[:n])
		z.size += uint32(n)
		p = p[n:]
	}
	return nil
}

// Flush ends the request-time stream with a sync flush and writes out
// everything buffered, so that a reader can decompress all bytes written so
// far; the member goes on.
func (z *Writer) Flush() error {
	if err := z.endStream(); err != nil {
		return err
	}
	return z.bw.Flush()
}

// endStream ends the request-time stream on a byte boundary with a sync
// flush, so that a chunk can follow.
func (z *Writer) endStream() error {
	if !z.streaming {
		return nil
	}
	z.streaming = false
	return z.fw.Flush()
}

// Close writes the final block and the trailer, flushes, and releases the
// Writer's buffers. It returns the first error writing to w.
func (z *Writer) Close() error {
	if z.closed {
		return nil
	}
	z.closed = true
	err := z.endStream()
	var trailer [10]byte
	copy(trailer[:], finalBlock[:])
	binary.LittleEndian.PutUint32(trailer[2:], z.crc)
	binary.LittleEndian.PutUint32(trailer[6:], z.size)
	_, _ = z.bw.Write(trailer[:])
	if ferr := z.bw.Flush(); err == nil {
		err = ferr
	}
	z.bw.Reset(nil)
	bufPool.Put(z.bw)
	z.bw = nil
	if z.fw != nil {
		z.fw.Reset(nil) // level 1: cheap, and drops the reference to bw
		flatePool.Put(z.fw)
		z.fw = nil
	}
	return err
}
