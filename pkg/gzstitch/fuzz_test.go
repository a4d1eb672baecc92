package gzstitch

import (
	"bytes"
	"testing"
)

// FuzzStitch runs scripts of writes and chunks and checks that the stream
// decompresses to exactly what was written. A script is a sequence of
// operations: an opcode byte, a length byte, then that many bytes of data
// (literal), or for a repeat a distance byte instead, taking the data from
// the output so far so that pieces refer to each other. Opcode bits:
// 0-1 kind (write, write and prime the live session, session chunk,
// standalone chunk); bit 2 repeat; bits 3-6 level (mod 9, plus 1); bit 7:
// a new session's prime length is Window instead of 0.
func FuzzStitch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 3, 'a', 'b', 'c'})
	f.Add([]byte{2 | 5<<3, 4, 't', 'e', 'x', 't', 2 | 4 | 5<<3, 4, 4})
	f.Add([]byte{0, 10, '{', '"', 'a', '"', ':', '"', 'b', '"', '}', ',', 2 | 4 | 8<<3 | 0x80, 10, 10, 1 | 4, 5, 7, 2 | 4, 20, 15, 3 | 4, 8, 30})
	f.Add([]byte{3, 1, 'x', 3 | 4, 1, 1, 0 | 4, 2, 2, 2 | 4 | 0x80, 3, 3})
	f.Fuzz(func(t *testing.T, script []byte) {
		st := newStitcher()
		for len(script) >= 2 {
			op, n := script[0], int(script[1])
			script = script[2:]
			var p []byte
			if op&4 != 0 {
				if len(script) == 0 {
					break
				}
				dist := int(script[0]) + 1
				script = script[1:]
				from := max(0, len(st.want)-dist)
				p = bytes.Clone(st.want[from:min(len(st.want), from+n)])
			} else {
				n = min(n, len(script))
				p, script = script[:n], script[n:]
			}
			level := 1 + int(op>>3&15)%9
			prime := 0
			if op&0x80 != 0 {
				prime = Window
			}
			switch op & 3 {
			case 0:
				st.write(t, p, false)
			case 1:
				st.write(t, p, true)
			case 2:
				st.chunk(t, p, level, prime)
			case 3:
				st.standalone(t, p, level)
			}
		}
		st.finish(t)
	})
}
