package lists

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// ReasonTableColumns is why a Table page passes through when it holds rows
// rendered under other columns than the resource's latest (a CRD's
// printer columns changed and the store has not relisted yet).
const ReasonTableColumns Reason = "table_columns"

// respondTable writes a Table page from stored rows, each with its clock
// cells rendered for one instant taken now (table.Row.Append), under the
// columns of the resource's latest Table. A page whose rows were rendered
// under other columns passes through, having written nothing.
func (l *Lists) respondTable(w http.ResponseWriter, r *http.Request, req listRequest, h *stores.Handle, meta wire.ListMeta, entries []*snapshot.Entry, reason Reason) (bool, Reason) {
	head := h.TableHead()
	if head == nil || head.Columns == nil {
		return false, ReasonNotSynced
	}
	rows := make([]*stores.TableRow, len(entries))
	for i, e := range entries {
		row, ok := e.Extra.(*stores.TableRow)
		if !ok || row.Columns != head.Columns {
			return false, ReasonTableColumns
		}
		rows[i] = row
	}
	parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: req.Table.GroupVersion, ListMeta: meta, Columns: head.Columns.JSON, NullRows: head.NullRows}, len(entries))
	if err != nil {
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, apierrors.NewInternalError(err))
		return true, reason
	}
	writeTable(w, r, req.Table, parts, rows, entries, time.Now())
	return true, reason
}

// tableChunk is how many bytes of rendered rows are gathered before they
// are written.
const tableChunk = 64 << 10

// tableBufBytes is a Table response's render buffer: up to the gzip
// threshold, and one chunk beyond it. A larger one (a row of a huge
// object grew it) is left to the collector rather than pooled.
const tableBufBytes = gzipThreshold + tableChunk

// Table responses borrow their render buffer and bufio writer from pools
// (gzstitch pools its own): a walk of 30,000 pods made ~1 MiB of garbage
// per page otherwise, and at listproxy's GOGC the collections it caused
// cost as much CPU as the compression.
var (
	tableBufs   = sync.Pool{New: func() any { b := make([]byte, 0, tableBufBytes); return &b }}
	tableBufios = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, tableChunk) }}
)

// writeTable writes a Table response: uncompressed with a Content-Length
// when it is at most gzipThreshold long, else gzipped for a client that
// accepts it (as the apiserver does), else streamed.
func writeTable(w http.ResponseWriter, r *http.Request, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time) {
	hdr := w.Header()
	hdr.Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
	hdr.Set("Content-Type", wire.Table.ContentType())
	hdr.Set("Cache-Control", "no-cache, private")
	appendRow := func(dst []byte, i int) []byte {
		if i > 0 {
			dst = append(dst, ',')
		}
		return rows[i].Append(dst, entries[i].Raw, now, opts.Include, opts.GroupVersion)
	}
	// Render up to the threshold: a short response is written whole.
	pooled := tableBufs.Get().(*[]byte)
	buf := append((*pooled)[:0], parts.Head...)
	defer func() {
		if cap(buf) <= tableBufBytes {
			*pooled = buf[:0]
			tableBufs.Put(pooled)
		}
	}()
	i := 0
	for ; i < len(rows) && len(buf) <= gzipThreshold; i++ {
		buf = appendRow(buf, i)
	}
	if i == len(rows) && len(buf)+len(parts.Tail) <= gzipThreshold {
		buf = append(buf, parts.Tail...)
		hdr.Set("Content-Length", strconv.Itoa(len(buf)))
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(buf); err != nil {
			klog.V(2).InfoS("Writing table response failed", "err", err)
		}
		return
	}
	if collection.AcceptsGzip(r) {
		hdr.Set("Content-Encoding", "gzip")
		hdr.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if err := writeTableGzip(w, opts, parts, rows, entries, now, buf[:0]); err != nil {
			klog.V(2).InfoS("Writing table response failed", "err", err)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	out := tableBufios.Get().(*bufio.Writer)
	out.Reset(w)
	defer func() {
		out.Reset(nil)
		tableBufios.Put(out)
	}()
	err := writeAll(out, buf)
	for ; err == nil && i < len(rows); i++ {
		buf = appendRow(buf[:0], i)
		err = writeAll(out, buf)
	}
	if err == nil {
		err = writeAll(out, parts.Tail)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		klog.V(2).InfoS("Writing table response failed", "err", err)
	}
}

// tableGzipForm is the form (stores.TableGzipForms) a Table response
// writes its rows in.
func tableGzipForm(opts collection.TableOptions) int {
	switch {
	case opts.Include == table.IncludeNone:
		return 2
	case opts.GroupVersion == "v1beta1":
		return 1
	}
	return 0
}

// writeTableGzip writes a Table response as one gzip member. The head,
// the first row (which has no "," before it) and the tail are compressed
// now; every other row is copied from the chunk cached on it for the
// response's form, which holds while its clock cells render as they did
// when it was compressed (stores.TableGzip), and is compressed and cached
// anew when they do not: a walk of rows whose clock cells moved on since
// the last one (an AGE ticks every second for two minutes, then every
// minute, then hourly) compresses only those. Chunks stand alone, at
// gzipChunkLevel. buf is scratch space.
func writeTableGzip(w io.Writer, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time, buf []byte) error {
	zw := gzstitch.NewWriter(w)
	err := writeTableGzipRows(zw, opts, parts, rows, entries, now, buf)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeTableGzipRows(zw *gzstitch.Writer, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time, buf []byte) error {
	buf = append(buf[:0], parts.Head...)
	if len(rows) > 0 {
		buf = rows[0].Append(buf, entries[0].Raw, now, opts.Include, opts.GroupVersion)
	}
	if _, err := zw.Write(buf); err != nil {
		return err
	}
	form := tableGzipForm(opts)
	var clock []byte
	for i := 1; i < len(rows); i++ {
		clock = rows[i].AppendClock(clock[:0], now)
		cached := rows[i].Gzip(form)
		if cached == nil || !bytes.Equal(cached.Clock, clock) {
			buf = append(buf[:0], ',')
			buf = rows[i].Append(buf, entries[i].Raw, now, opts.Include, opts.GroupVersion)
			cached = &stores.TableGzip{Clock: bytes.Clone(clock), Chunk: gzipChunks.Compress(buf)}
			rows[i].SetGzip(form, cached)
		}
		if err := zw.WriteChunk(&cached.Chunk); err != nil {
			return err
		}
	}
	_, err := zw.Write(parts.Tail)
	return err
}

func writeAll(w *bufio.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}
