package lists

import (
	"bufio"
	"compress/gzip"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/wire"
)

// ReasonTableColumns is why a Table page passes through when it holds rows
// rendered under other columns than the resource's latest (a CRD's
// printer columns changed and the store has not relisted yet).
const ReasonTableColumns Reason = "table_columns"

// tableRowsOf returns the Table head a page of entries is written under
// and the entries' rows, or why the page passes through: the store has no
// head yet, or a row was rendered under other columns than the resource's
// latest. It is asked before anything is written or kept for the page.
func tableRowsOf(h *stores.Handle, entries []*snapshot.Entry) (*stores.TableHead, []*stores.TableRow, Reason, bool) {
	head := h.TableHead()
	if head == nil || head.Columns == nil {
		return nil, nil, ReasonNotSynced, false
	}
	rows := make([]*stores.TableRow, len(entries))
	for i, e := range entries {
		row, ok := e.Extra.(*stores.TableRow)
		if !ok || row.Columns != head.Columns {
			return nil, nil, ReasonTableColumns, false
		}
		rows[i] = row
	}
	return head, rows, "", true
}

// respondTable writes a Table page from stored rows (tableRowsOf), each with
// its clock cells rendered for one instant taken now (table.Row.Append),
// under head's columns.
func (l *Lists) respondTable(w http.ResponseWriter, r *http.Request, req listRequest, head *stores.TableHead, rows []*stores.TableRow, meta wire.ListMeta, entries []*snapshot.Entry) {
	parts, err := wire.SplitTable(wire.TableEnvelope{GroupVersion: req.Table.GroupVersion, ListMeta: meta, Columns: head.Columns.JSON, NullRows: head.NullRows}, len(entries))
	if err != nil {
		w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceSnapshot)
		httpapi.WriteStatus(w, apierrors.NewInternalError(err))
		return
	}
	writeTable(w, r, req.Table, parts, rows, entries, time.Now(), !req.Selective)
}

// tableChunk is how many bytes of rendered rows are gathered before they
// are written.
const tableChunk = 64 << 10

// tableBufBytes is a Table response's render buffer: up to the gzip
// threshold, and one chunk beyond it. A larger one (a row of a huge
// object grew it) is left to the collector rather than pooled.
const tableBufBytes = gzipThreshold + tableChunk

// Table responses borrow their render buffer, gzip writer (at the
// apiserver's level) and bufio writer from pools: a walk of 30,000 pods
// made ~1 MiB of garbage per page otherwise (mostly the gzip writer's
// state), and at listproxy's GOGC the collections it caused cost as much
// CPU as the compression.
var (
	tableBufs   = sync.Pool{New: func() any { b := make([]byte, 0, tableBufBytes); return &b }}
	tableGzips  = sync.Pool{New: func() any { gz, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return gz }} // the level is valid
	tableBufios = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, tableChunk) }}
)

// writeTable writes a Table response: uncompressed with a Content-Length
// when it is at most gzipThreshold long, else gzipped for a client that
// accepts it (as the apiserver does), else streamed. unfiltered says the
// entries are consecutive in key order: a gzipped response is then
// stitched from row chunks cached on the entries (writeGzipTable).
func writeTable(w http.ResponseWriter, r *http.Request, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time, unfiltered bool) {
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
	buf := (*pooled)[:0]
	buf = append(buf, parts.Head...)
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
	if unfiltered && collection.AcceptsGzip(r) {
		hdr.Set("Content-Encoding", "gzip")
		hdr.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if err := writeGzipTable(w, opts, parts, rows, entries, now); err != nil {
			klog.V(2).InfoS("Writing table response failed", "err", err)
		}
		return
	}
	buf, err := streamTable(w, collection.AcceptsGzip(r), buf, i, len(rows), parts.Tail, appendRow)
	if err != nil {
		klog.V(2).InfoS("Writing table response failed", "err", err)
	}
}

// streamTable writes a Table response longer than gzipThreshold (but for a
// stitched one, writeGzipTable): the status, then buf (the head and the
// rows before i, rendered), rows i to n-1 rendered by appendRow, and tail,
// through a pooled bufio writer, gzipped at the apiserver's level when
// gzipped. It returns the render buffer, as large as the rows made it.
func streamTable(w http.ResponseWriter, gzipped bool, buf []byte, i, n int, tail []byte, appendRow func(dst []byte, i int) []byte) ([]byte, error) {
	hdr := w.Header()
	var out *bufio.Writer
	var gz *gzip.Writer
	if gzipped {
		hdr.Set("Content-Encoding", "gzip")
		hdr.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		// The apiserver's level (responsewriters: defaultGzipContentEncodingLevel).
		gz = tableGzips.Get().(*gzip.Writer)
		gz.Reset(w)
		defer func() {
			gz.Reset(nil)
			tableGzips.Put(gz)
		}()
		out = tableBufios.Get().(*bufio.Writer)
		out.Reset(gz)
	} else {
		w.WriteHeader(http.StatusOK)
		out = tableBufios.Get().(*bufio.Writer)
		out.Reset(w)
	}
	defer func() {
		out.Reset(nil)
		tableBufios.Put(out)
	}()
	err := writeAll(out, buf)
	for ; err == nil && i < n; i++ {
		buf = appendRow(buf[:0], i)
		err = writeAll(out, buf)
	}
	if err == nil {
		err = writeAll(out, tail)
	}
	if err == nil {
		err = out.Flush()
	}
	if err == nil && gz != nil {
		err = gz.Close()
	}
	return buf, err
}

func writeAll(w *bufio.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}
