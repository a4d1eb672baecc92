package gzstitch

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name       string
		lenA, lenB int
	}{
		{name: "both_empty"},
		{name: "empty_a", lenB: 100},
		{name: "empty_b", lenA: 100},
		{name: "one_byte_each", lenA: 1, lenB: 1},
		{name: "unequal", lenA: 3, lenB: 4093},
		{name: "window", lenA: Window, lenB: Window},
		{name: "large", lenA: 1 << 19, lenB: 1<<19 + 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := buf[:tc.lenA], buf[tc.lenA:tc.lenA+tc.lenB]
			want := crc32.ChecksumIEEE(buf[:tc.lenA+tc.lenB])
			got := combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), shiftFor(uint64(len(b))))
			if got != want {
				t.Errorf("combine = %#08x, want %#08x", got, want)
			}
		})
	}
	t.Run("random", func(t *testing.T) {
		for range 2000 {
			n := rng.IntN(5000)
			cut := rng.IntN(n + 1)
			start := rng.IntN(len(buf) - n)
			p := buf[start : start+n]
			got := combine(crc32.ChecksumIEEE(p[:cut]), crc32.ChecksumIEEE(p[cut:]), shiftFor(uint64(n-cut)))
			if want := crc32.ChecksumIEEE(p); got != want {
				t.Fatalf("combine at %d of %d = %#08x, want %#08x", cut, n, got, want)
			}
		}
	})
	t.Run("many_pieces", func(t *testing.T) {
		// As Writer uses it: a running CRC extended piece by piece.
		var crc uint32
		off := 0
		for off < len(buf) {
			n := min(rng.IntN(3000), len(buf)-off)
			p := buf[off : off+n]
			crc = combine(crc, crc32.ChecksumIEEE(p), shiftFor(uint64(n)))
			off += n
		}
		if want := crc32.ChecksumIEEE(buf); crc != want {
			t.Errorf("combined CRC of %d bytes = %#08x, want %#08x", len(buf), crc, want)
		}
	})
}

// TestShiftForLarge checks shiftFor beyond what can be hashed in a test,
// including lengths whose exponent wraps x2n: x^(8(a+b)) = x^(8a)·x^(8b).
func TestShiftForLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		a, b := rng.Uint64N(1<<40), rng.Uint64N(1<<40)
		if got, want := shiftFor(a+b), multModP(shiftFor(a), shiftFor(b)); got != want {
			t.Fatalf("shiftFor(%d+%d) = %#08x, want %#08x", a, b, got, want)
		}
	}
	if got := shiftFor(0); got != 1<<31 {
		t.Errorf("shiftFor(0) = %#08x, want x^0 = %#08x", got, uint32(1<<31))
	}
}

func BenchmarkCombine(b *testing.B) {
	shift := shiftFor(5836) // a pod's JSON
	crc := uint32(0x12345678)
	for b.Loop() {
		crc = combine(crc, 0x9abcdef0, shift)
	}
	_ = crc
}
