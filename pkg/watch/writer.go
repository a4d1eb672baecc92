package watch

import (
	"compress/gzip"
	"io"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/listproxy/listproxy/pkg/wire"
)

// poolBufBytes bounds the burst buffers returned to burstPool; a
// larger one (a burst of huge objects) is left to the collector.
const poolBufBytes = 2 * burstBytes

// gzipWriters holds the level-1 gzip writers of compressed watch-lists
// between flushes.
var gzipWriters = sync.Pool{New: func() any {
	gw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // the level is valid
	return gw
}}

// burstPool holds the burst buffers of all watchers: a watcher borrows one
// for a burst and returns it once written, so that an idle watcher holds
// none and busy ones do not each grow and drop their own.
var burstPool = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

func getBurst() []byte { return (*burstPool.Get().(*[]byte))[:0] }

func putBurst(b []byte) {
	if b != nil && cap(b) <= poolBufBytes {
		b = b[:0]
		burstPool.Put(&b)
	}
}

// writer gathers a burst of frames and writes it with a deadline. Frames
// it encodes go into its burst buffer; a large frame shared by watchers is
// queued by reference, not copied, so that a burst of large objects costs
// each watcher nothing but the references.
type writer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	format  wire.Format
	typ     wire.ObjectType
	timeout time.Duration
	clock   clock.PassiveClock
	// buf holds frames encoded for this watcher; those before buf[sealed:]
	// are queued in parts.
	buf    []byte
	sealed int
	// parts are the pieces queued before buf[sealed:], in order: sealed
	// runs of buf and shared frames; partBytes is their length.
	parts     [][]byte
	partBytes int
	// keep: the buffer is kept whatever its size (while sending initial
	// events); release ends that.
	keep bool
	// limit, when set, is a deadline no write may pass (the initial
	// events' bound).
	limit time.Time
	// err is the first write or flush error.
	err error
	// gzip: every flush is written as one gzip member.
	gzip bool
}

// sharedFrameMin is the size from which a shared frame is queued by
// reference rather than copied into the burst buffer: below it a copy is
// cheaper than a write of its own. Not measured.
const sharedFrameMin = 4 << 10

func newWriter(w http.ResponseWriter, f wire.Format, typ wire.ObjectType, timeout time.Duration, clk clock.PassiveClock) *writer {
	return &writer{w: w, rc: http.NewResponseController(w), format: f, typ: typ, timeout: timeout, clock: clk}
}

func (w *writer) event(t wire.EventType, item []byte) {
	if w.buf == nil {
		w.buf = getBurst()
	}
	w.buf = wire.AppendWatchEvent(w.buf, w.format, t, w.typ, item)
}

// raw queues the frame appendFrame appends.
func (w *writer) raw(appendFrame func(dst []byte) []byte) {
	if w.buf == nil {
		w.buf = getBurst()
	}
	w.buf = appendFrame(w.buf)
}

// errorEvent queues an ERROR event carrying status, the watch's last. It
// reports false, having logged why, when status cannot be encoded.
func (w *writer) errorEvent(status *metav1.Status, resource string) bool {
	if w.buf == nil {
		w.buf = getBurst()
	}
	out, err := wire.AppendErrorEvent(w.buf, w.format, status)
	if err != nil {
		klog.ErrorS(err, "Cannot encode a watch error", "resource", resource)
		return false
	}
	w.buf = out
	return true
}

// frame queues an encoded frame, which must not change until flushed.
func (w *writer) frame(b []byte) {
	if len(b) < sharedFrameMin {
		if w.buf == nil {
			w.buf = getBurst()
		}
		w.buf = append(w.buf, b...)
		return
	}
	if len(w.buf) > w.sealed {
		w.parts = append(w.parts, w.buf[w.sealed:])
		w.partBytes += len(w.buf) - w.sealed
		w.sealed = len(w.buf)
	}
	w.parts = append(w.parts, b)
	w.partBytes += len(b)
}

// queued is the number of bytes queued for the next flush.
func (w *writer) queued() int { return w.partBytes + len(w.buf) - w.sealed }

// release stops keeping the buffer between bursts; an empty one is
// returned at once.
func (w *writer) release() {
	w.keep = false
	if len(w.buf) == 0 {
		putBurst(w.buf)
		w.buf = nil
	}
}

// setDeadline bounds the next writes: WriteTimeout from now, and never
// past limit. Deadlines use the real time: they bound the socket, not the
// watch.
func (w *writer) setDeadline() {
	at := time.Now().Add(w.timeout)
	if !w.limit.IsZero() && w.limit.Before(at) {
		at = w.limit
	}
	_ = w.rc.SetWriteDeadline(at) // unsupported: no bound
}

// fail records err as the writer's first error.
func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// writeQueued writes the queued pieces to dst in order.
func (w *writer) writeQueued(dst io.Writer) error {
	for _, p := range w.parts {
		if _, err := dst.Write(p); err != nil {
			return err
		}
	}
	if len(w.buf) > w.sealed {
		if _, err := dst.Write(w.buf[w.sealed:]); err != nil {
			return err
		}
	}
	return nil
}

// flush writes the queued frames and flushes them to the client.
func (w *writer) flush() error {
	w.setDeadline()
	var err error
	switch {
	case w.queued() > 0 && w.gzip:
		gw := gzipWriters.Get().(*gzip.Writer)
		gw.Reset(w.w)
		if err = w.writeQueued(gw); err == nil {
			if err = gw.Flush(); err == nil {
				err = gw.Close()
			}
		}
		gw.Reset(nil)
		gzipWriters.Put(gw)
	case w.queued() > 0:
		err = w.writeQueued(w.w)
	}
	w.parts, w.partBytes, w.sealed = nil, 0, 0
	if w.keep {
		w.buf = w.buf[:0]
	} else {
		putBurst(w.buf)
		w.buf = nil
	}
	if err == nil {
		err = w.rc.Flush()
	}
	if err != nil {
		w.fail(err)
	}
	return err
}

// close ends the response. A watcher that kept up gets its write deadline
// cleared, so that it cannot cut a later response on the same connection;
// one that did not (stalled) gets a deadline already past, so that the end
// of the response cannot block and its connection is closed.
func (w *writer) close(stalled bool) {
	if stalled {
		_ = w.rc.SetWriteDeadline(time.Now())
		return
	}
	_ = w.rc.SetWriteDeadline(time.Time{})
}
