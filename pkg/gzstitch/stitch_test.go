package gzstitch

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"testing"
)

var compressors = func() (cs [flate.BestCompression + 1]*Compressor) {
	for level := flate.BestSpeed; level <= flate.BestCompression; level++ {
		cs[level], _ = NewCompressor(level)
	}
	return cs
}()

// stitcher builds a stream from a script of operations and remembers the
// uncompressed bytes it must decompress to. A session stays live while
// every byte written since it started went through it (chunks, or Prime for
// bytes written with Write): only then may its next chunk follow.
type stitcher struct {
	z    *Writer
	out  bytes.Buffer
	want []byte
	s    *Session // live session, or nil
}

func newStitcher() *stitcher {
	st := &stitcher{}
	st.z = NewWriter(&st.out)
	return st
}

// write writes p at request time; with prime, the live session sees it too.
func (st *stitcher) write(t testing.TB, p []byte, prime bool) {
	t.Helper()
	if _, err := st.z.Write(p); err != nil {
		t.Fatal(err)
	}
	st.want = append(st.want, p...)
	if st.s != nil && prime {
		st.s.Prime(p)
	} else {
		st.endSession()
	}
}

// stored writes p as stored blocks; with prime, the live session sees it
// too.
func (st *stitcher) stored(t testing.TB, p []byte, prime bool) {
	t.Helper()
	if err := st.z.WriteStored(p); err != nil {
		t.Fatal(err)
	}
	st.want = append(st.want, p...)
	if st.s != nil && prime {
		st.s.Prime(p)
	} else {
		st.endSession()
	}
}

// chunk writes p as a chunk of the live session, or of a new one at level
// primed with the last primeLen bytes of the stream so far.
func (st *stitcher) chunk(t testing.TB, p []byte, level, primeLen int) {
	t.Helper()
	if st.s == nil {
		st.s = compressors[level].NewSession()
		if primeLen = min(primeLen, len(st.want)); primeLen > 0 {
			st.s.Prime(st.want[len(st.want)-primeLen:])
		}
	}
	c := st.s.Chunk(p)
	st.writeChunk(t, &c, p)
}

// standalone writes p as a chunk of its own.
func (st *stitcher) standalone(t testing.TB, p []byte, level int) {
	t.Helper()
	c := compressors[level].Compress(p)
	st.endSession()
	st.writeChunk(t, &c, p)
}

func (st *stitcher) writeChunk(t testing.TB, c *Chunk, p []byte) {
	t.Helper()
	if c.Size() != len(p) {
		t.Fatalf("chunk Size() = %d, want %d", c.Size(), len(p))
	}
	if err := st.z.WriteChunk(c); err != nil {
		t.Fatal(err)
	}
	st.want = append(st.want, p...)
}

func (st *stitcher) endSession() {
	if st.s != nil {
		st.s.Close()
		st.s = nil
	}
}

// finish closes the stream and checks that it decompresses to want.
func (st *stitcher) finish(t testing.TB) []byte {
	t.Helper()
	st.endSession()
	if err := st.z.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := gunzip(st.out.Bytes())
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	if !bytes.Equal(got, st.want) {
		t.Fatalf("decompressed %d bytes, want %d; first difference at %d", len(got), len(st.want), firstDiff(got, st.want))
	}
	return st.out.Bytes()
}

// gunzip decompresses exactly one gzip member; gzip.Reader checks the
// trailer's CRC-32 and size.
func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	got, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	if rest, _ := io.ReadAll(zr); len(rest) > 0 {
		return nil, fmt.Errorf("%d bytes after the member", len(rest))
	}
	return got, nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// text returns n bytes of repetitive, JSON-like text, so that chunks find
// matches in each other.
func text(rng *rand.Rand, n int) []byte {
	words := []string{`{"name":"`, `","namespace":"`, `checkout-prod`, `payments`, `"labels":{`, `"app":"api"`, `}`, `,`, `"image":"docker.io/envoy:v1.33.2"`, `0123456789abcdef`}
	var b []byte
	for len(b) < n {
		if rng.IntN(8) == 0 {
			b = append(b, byte(rng.Uint32()))
		} else {
			b = append(b, words[rng.IntN(len(words))]...)
		}
	}
	return b[:n]
}

func TestWriterScripts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	bigText := text(rng, 300<<10)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, st *stitcher)
	}{
		{name: "nothing", run: func(t *testing.T, st *stitcher) {}},
		{name: "empty_write", run: func(t *testing.T, st *stitcher) { st.write(t, nil, false) }},
		{name: "empty_chunk", run: func(t *testing.T, st *stitcher) { st.chunk(t, nil, 6, 0) }},
		{name: "zero_chunk", run: func(t *testing.T, st *stitcher) {
			st.write(t, []byte("a"), false)
			st.writeChunk(t, &Chunk{}, nil)
			st.write(t, []byte("b"), false)
		}},
		{name: "only_write", run: func(t *testing.T, st *stitcher) { st.write(t, []byte(`{"items":[]}`), false) }},
		{name: "only_chunk", run: func(t *testing.T, st *stitcher) { st.standalone(t, []byte(`{"items":[]}`), 1) }},
		{name: "list", run: func(t *testing.T, st *stitcher) {
			st.write(t, []byte(`{"kind":"PodList","items":[`), false)
			st.write(t, []byte(`{"name":"a"}`), false)
			for i := range 5 {
				st.chunk(t, fmt.Appendf(nil, `,{"name":"pod-%d"}`, i), 6, 0)
			}
			st.write(t, []byte("]}\n"), false)
		}},
		{name: "chunks_only", run: func(t *testing.T, st *stitcher) {
			for i := range 50 {
				st.chunk(t, text(rng, i*37), 6, 0)
			}
		}},
		{name: "chunk_refers_to_written_bytes", run: func(t *testing.T, st *stitcher) {
			st.write(t, bigText[:20000], false)
			st.chunk(t, bigText[:20000], 9, Window) // primed with what Write compressed
			st.write(t, bigText[:1000], true)       // primes the live session
			st.chunk(t, bigText[:5000], 9, 0)
		}},
		{name: "large_write", run: func(t *testing.T, st *stitcher) { st.write(t, bigText, false) }},
		{name: "large_chunks", run: func(t *testing.T, st *stitcher) {
			st.chunk(t, bigText, 6, 0)
			st.chunk(t, bigText, 6, 0) // refers to the last Window bytes of the first
			st.standalone(t, bigText, 1)
		}},
		{name: "incompressible", run: func(t *testing.T, st *stitcher) {
			p := make([]byte, 100<<10)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			st.write(t, p, false)
			st.chunk(t, p, 6, 0)
			st.standalone(t, p, 9)
		}},
		{name: "stored", run: func(t *testing.T, st *stitcher) { st.stored(t, []byte(`{"items":[]}`), false) }},
		{name: "stored_empty", run: func(t *testing.T, st *stitcher) {
			st.write(t, []byte("a"), false)
			st.stored(t, nil, false)
			st.write(t, []byte("b"), false)
		}},
		{name: "stored_between_writes_and_chunks", run: func(t *testing.T, st *stitcher) {
			st.write(t, []byte(`{"kind":"Table","rows":[`), false)
			st.stored(t, []byte(`{"cells":["a","5m"`), false)
			st.write(t, []byte(`],"object":null}`), false)
			for i := range 5 {
				st.stored(t, fmt.Appendf(nil, `,{"cells":["pod-%d","%dm"`, i, i), true)
				st.chunk(t, []byte(`],"object":null}`), 1, 0)
			}
			st.write(t, []byte("]}\n"), false)
		}},
		{name: "stored_large", run: func(t *testing.T, st *stitcher) {
			st.stored(t, bigText, false) // several blocks of at most 65535 bytes
			st.chunk(t, bigText[:5000], 6, Window)
			st.stored(t, bigText[:maxStored], false)
			st.stored(t, bigText[:maxStored+1], false)
		}},
		{name: "every_level", run: func(t *testing.T, st *stitcher) {
			for level := flate.BestSpeed; level <= flate.BestCompression; level++ {
				st.endSession()
				st.chunk(t, bigText[level*1000:level*5000], level, level*3000)
				st.chunk(t, bigText[level*2000:level*6000], level, 0)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStitcher()
			tc.run(t, st)
			st.finish(t)
		})
	}
}

// randomScript runs n random operations of up to maxLen bytes.
func randomScript(t testing.TB, rng *rand.Rand, st *stitcher, n, maxLen int) {
	for range n {
		var p []byte
		if len(st.want) > 0 && rng.IntN(2) == 0 {
			// Repeat earlier output: matches across pieces.
			from := rng.IntN(len(st.want))
			p = bytes.Clone(st.want[from:min(len(st.want), from+rng.IntN(maxLen+1))])
		} else {
			p = text(rng, rng.IntN(maxLen+1))
		}
		switch rng.IntN(5) {
		case 0:
			st.write(t, p, rng.IntN(2) == 0)
		case 4:
			st.stored(t, p, rng.IntN(2) == 0)
		case 1:
			st.standalone(t, p, 1+rng.IntN(9))
		default:
			st.chunk(t, p, 1+rng.IntN(9), rng.IntN(2*Window))
		}
	}
}

func TestWriterRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 60 {
		st := newStitcher()
		randomScript(t, rng, st, rng.IntN(40), []int{10, 1000, 20000}[i%3])
		st.finish(t)
	}
}

// TestWriterGzipTool checks streams with the gzip tool, an implementation
// independent of Go's.
func TestWriterGzipTool(t *testing.T) {
	gz, err := exec.LookPath("gzip")
	if err != nil {
		t.Skip("gzip not installed")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 10 {
		st := newStitcher()
		randomScript(t, rng, st, 30, 20000)
		body := st.finish(t)
		cmd := exec.Command(gz, "-t")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("stream %d: gzip -t: %v\n%s", i, err, out)
		}
		cmd = exec.Command(gz, "-dc")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("stream %d: gzip -dc: %v", i, err)
		}
		if !bytes.Equal(out, st.want) {
			t.Fatalf("stream %d: gzip -dc gave %d bytes, want %d; first difference at %d", i, len(out), len(st.want), firstDiff(out, st.want))
		}
	}
}

// TestChunkDependsOnHistory checks that the tests above exercise what they
// claim: a session chunk refers to its history, so placed after other bytes
// it decompresses to something else.
func TestChunkDependsOnHistory(t *testing.T) {
	p := text(rand.New(rand.NewPCG(11, 12)), 4000)
	s := compressors[6].NewSession()
	defer s.Close()
	s.Prime(p)
	c := s.Chunk(p)
	if alone := compressors[6].Compress(p); c.Len() >= alone.Len()/4 {
		t.Fatalf("chunk after its own text is %d bytes, alone %d: want it to refer back", c.Len(), alone.Len())
	}
	other := bytes.Repeat([]byte{'-'}, len(p))
	var out bytes.Buffer
	z := NewWriter(&out)
	_, _ = z.Write(other)
	_ = z.WriteChunk(&c)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := gunzip(out.Bytes()); err == nil && bytes.Equal(got[len(other):], p) {
		t.Fatal("a chunk placed after the wrong bytes decompressed correctly")
	}
}

func TestNewCompressorLevels(t *testing.T) {
	for _, level := range []int{flate.HuffmanOnly, flate.NoCompression, flate.DefaultCompression, 10} {
		if _, err := NewCompressor(level); err == nil {
			t.Errorf("NewCompressor(%d) succeeded, want an error", level)
		}
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestWriterError(t *testing.T) {
	z := NewWriter(failWriter{})
	_, _ = z.Write(bytes.Repeat([]byte("x"), 2*bufSize))
	c := compressors[1].Compress([]byte("y"))
	_ = z.WriteChunk(&c)
	if err := z.Close(); err == nil {
		t.Fatal("Close succeeded on a failing writer, want its error")
	}
	if err := z.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// TestWriterFlush: after Flush, everything written so far — request-time
// bytes and chunks — decompresses from the bytes out, before the member
// ends; the closed member is whole.
func TestWriterFlush(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	st := newStitcher()
	for i := range 6 {
		p := text(rng, 1000+rng.IntN(5000))
		if i%2 == 0 {
			st.write(t, p, false)
		} else {
			st.standalone(t, p, 6)
		}
		if err := st.z.Flush(); err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(st.out.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(st.want))
		if _, err := io.ReadFull(zr, got); err != nil {
			t.Fatalf("after flush %d: reading the %d bytes written: %v", i, len(st.want), err)
		}
		if !bytes.Equal(got, st.want) {
			t.Fatalf("after flush %d: first difference at %d", i, firstDiff(got, st.want))
		}
	}
	st.finish(t)
}

// TestChunkAfterBlanks: a chunk compressed after history with Blank bytes
// in place of some of its bytes decompresses correctly after the history
// with any other bytes of the same lengths there, written stored: what a
// Table row's cached chunk relies on for its clock cells.
func TestChunkAfterBlanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	row := func(age string) []byte {
		return fmt.Appendf(nil, `{"cells":["pod-1","1/1","Running","0","%s"],"object":{"metadata":{"name":"pod-1","labels":{"app":"web"}}}}`, age)
	}
	prev := row("7m")
	head := []byte(`,{"cells":["pod-2","1/1","Running","0","`)
	tail := bytes.Repeat([]byte(`"],"object":{"metadata":{"name":"pod-2","labels":{"app":"web"}}}}`), 3)
	for _, level := range []int{flate.BestSpeed, 6, flate.BestCompression} {
		for _, age := range []string{"6m30s", "5m29s", "99999"} {
			t.Run(fmt.Sprintf("level %d, age %s", level, age), func(t *testing.T) {
				s := compressors[level].NewSession()
				defer s.Close()
				before := text(rng, 3000)
				s.Prime(before, prev, head, bytes.Repeat([]byte{Blank}, len(age)))
				c := s.Chunk(tail)
				if alone := compressors[level].Compress(tail); c.Len() >= alone.Len() {
					t.Fatalf("chunk is %d bytes, alone %d: want it to refer back", c.Len(), alone.Len())
				}
				st := newStitcher()
				st.write(t, before, false)
				st.stored(t, prev, false)
				st.stored(t, head, false)
				st.stored(t, []byte(age), false)
				st.writeChunk(t, &c, tail)
				st.finish(t)
			})
		}
	}
}

// claim: a CompressAfter chunk decompresses correctly directly after its
// history, refers back to it (smaller than the piece alone), and, with
// Blank bytes in the history, after any bytes of the same lengths there;
// histories beyond MaxHistory and pieces beyond one deflate block included.
func TestCompressAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	row := func(name, age string) []byte {
		return fmt.Appendf(nil, `{"cells":["%s","1/1","Running","0","%s"],"object":{"metadata":{"name":"%[1]s","labels":{"app":"web","tier":"frontend"},"annotations":{"owner":"team-a","note":"a row's tail of some length"}}}}`, name, age)
	}
	head := []byte(`,{"cells":["pod-2","1/1","Running","0","`)
	tail := []byte(`"],"object":{"metadata":{"name":"pod-2","labels":{"app":"web","tier":"frontend"},"annotations":{"owner":"team-a","note":"a row's tail of some length"}}}}`)
	long := text(rng, 100<<10)
	for _, tc := range []struct {
		name        string
		before, age []byte // age is written where history has Blank bytes
		p           []byte
		refersBack  bool
	}{
		{name: "a row's tail after the row before and its head", before: append(row("pod-1", "7m"), head...), age: []byte("6m30s"), p: tail, refersBack: true},
		{name: "other clock cells of the same length", before: append(row("pod-1", "7m"), head...), age: []byte("99999"), p: tail, refersBack: true},
		{name: "history longer than MaxHistory", before: append(text(rng, 3*MaxHistory), tail...), p: tail, refersBack: true},
		{name: "no history", p: tail},
		{name: "a piece longer than a block", before: long[:1000], p: long},
		{name: "an empty piece", before: tail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			history := append(slices.Clone(tc.before), bytes.Repeat([]byte{Blank}, len(tc.age))...)
			c := CompressAfter(history, tc.p)
			if alone := compressors[flate.BestSpeed].Compress(tc.p); tc.refersBack && c.Len() >= alone.Len() {
				t.Fatalf("chunk is %d bytes, alone %d: want it to refer back", c.Len(), alone.Len())
			}
			st := newStitcher()
			st.write(t, tc.before, false)
			st.stored(t, tc.age, false)
			st.writeChunk(t, &c, tc.p)
			st.write(t, tail, false)
			st.finish(t)
		})
	}
}
