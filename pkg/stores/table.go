package stores

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// A store of format Table holds a resource's Table rows as the apiserver
// rendered them, fed by a Table LIST and WATCH of its own with
// includeObject=Object where a clock cell reads beyond the object's
// metadata (table.Rules.Object) and Metadata otherwise. Each row is
// checked when received (table.Rules.ParseAhead), with the apiserver's
// clock up to table.MaxClockSkew from listproxy's. A row that fails the
// check is not stored, and a store that misses a row cannot be served: the
// list or watch that brought it fails, and the feeder lists again (a
// failed list is retried, a failed watch relists), so that the apiserver
// renders the row anew. tableRejectLimit rows rejected within
// tableRejectPeriod refuse the resource's Tables for tableRefusal: the
// store is dropped and its Table reads pass through. The columns a row was
// rendered with go with it (TableRow.Columns): the columns of a custom
// resource change with its CRD, and a response never mixes rows of two
// column sets.

// ReasonTableRefused is why a Table read passes through when the
// resource's Table rows did not follow listproxy's rules on this
// apiserver lately.
const ReasonTableRefused = "table_refused"

// tableRefusal is how long a resource's Tables pass through after its
// rows did not follow their rules. Not measured: long enough that a
// release listproxy does not know costs one store start per period.
const tableRefusal = 10 * time.Minute

// A resource's Tables are refused once tableRejectLimit of its rows were
// rejected within tableRejectPeriod; fewer cost a list each. Not measured:
// a rule that does not hold fails every list, so it is refused within a
// second (the feeder retries a list after 0.1 s, then 0.2 s); a row the
// apiserver rendered or sent late, or one rendered as its clock was
// stepped, costs one list; and a resource whose rows keep failing now and
// then costs at most two lists an hour before it is refused.
const (
	tableRejectLimit  = 3
	tableRejectPeriod = time.Hour
)

// TableColumns is one set of columnDefinitions, as the apiserver sent it.
// A store keeps one value per set it has seen in a row: rows rendered with
// the same columns share the pointer.
type TableColumns struct{ JSON []byte }

// TableHead is what a Table store's responses carry besides rows.
type TableHead struct {
	// Columns are the columns of the apiserver's latest Table of the
	// resource; only rows with the same Columns may be served under them.
	Columns *TableColumns
	// NullRows: the apiserver writes an empty Table's rows as null.
	NullRows bool
	// Bookmark is the row of a Table BOOKMARK under Columns, learned from
	// the apiserver; nil until one was seen (Table watches with bookmarks
	// pass through until then).
	Bookmark *wire.TableBookmark
}

// TableRow is the Extra of a Table store's entry.
type TableRow struct {
	*table.Row
	// Columns are the columns the row was rendered with.
	Columns *TableColumns
}

// tableFeed is the Table state of one store's source.
type tableFeed struct {
	rules table.Rules
	// columnNames, when not nil, are the columns the apiserver
	// must render (a custom resource's, from its CRD): a Table under
	// others is the apiserver's before it applied a change to the CRD.
	columnNames []string
	// watchLists reports whether the apiserver serves watch-lists, which
	// the bookmark row is first asked with; nil means it does.
	watchLists func() bool
	head       atomic.Pointer[TableHead]
	// mu orders column changes; reads of head do not take it.
	mu sync.Mutex
	// rejected holds when the store's latest rows were rejected, oldest
	// first, at most tableRejectLimit; the feeder's goroutine only (the
	// extractor).
	rejected []time.Time
}

// reject records a row rejected at now and reports whether it is the
// tableRejectLimit-th within tableRejectPeriod: the resource's Tables are
// to be refused.
func (t *tableFeed) reject(now time.Time) bool {
	if len(t.rejected) == tableRejectLimit {
		t.rejected = append(t.rejected[:0], t.rejected[1:]...)
	}
	t.rejected = append(t.rejected, now)
	return len(t.rejected) == tableRejectLimit && now.Sub(t.rejected[0]) <= tableRejectPeriod
}

// includeObject is the includeObject the feed asks for.
func (t *tableFeed) includeObject() string {
	if t.rules.Object {
		return "Object"
	}
	return "Metadata"
}

// columns returns the current columns.
func (t *tableFeed) columns() *TableColumns {
	if h := t.head.Load(); h != nil {
		return h.Columns
	}
	return nil
}

// setColumns makes cols the current columns and reports whether they
// differ from the previous ones.
func (t *tableFeed) setColumns(cols []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.head.Load()
	if old != nil && old.Columns != nil && bytes.Equal(old.Columns.JSON, cols) {
		return false
	}
	// A bookmark's row was rendered under the old columns: it goes.
	next := TableHead{Columns: &TableColumns{JSON: bytes.Clone(cols)}}
	if old != nil {
		next.NullRows = old.NullRows
	}
	t.head.Store(&next)
	return old != nil && old.Columns != nil
}

func (t *tableFeed) setNullRows(null bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := TableHead{NullRows: null}
	if old := t.head.Load(); old != nil {
		next.Columns, next.Bookmark = old.Columns, old.Bookmark
	}
	t.head.Store(&next)
}

// learnBookmark keeps the row of a BOOKMARK at rv, rendered under cols, as
// the current columns' bookmark row. A row under other columns than the
// current ones, or one that is not a bookmark's (wire.ParseTableBookmark),
// is not kept.
func (t *tableFeed) learnBookmark(row []byte, rv string, cols *TableColumns) error {
	b, err := wire.ParseTableBookmark(row, rv)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.head.Load()
	if old == nil || old.Columns == nil || old.Columns != cols {
		return nil
	}
	if old.Bookmark != nil && bytes.Equal(old.Bookmark.Head, b.Head) && bytes.Equal(old.Bookmark.Meta, b.Meta) {
		return nil
	}
	next := *old
	next.Bookmark = &b
	t.head.Store(&next)
	return nil
}

// errColumnsNotYet fails a list or watch whose Table columns are not the
// CRD's yet: the apiserver renders an old version of the CRD's printer
// columns for a while after it changed. The list is tried again.
var errColumnsNotYet = errors.New("table columns are not the CRD's printer columns yet")

// checkColumns fails columns that are not the ones the CRD names.
func (t *tableFeed) checkColumns(columns []byte) error {
	if t.columnNames == nil {
		return nil
	}
	var defs []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(columns, &defs); err != nil {
		return fmt.Errorf("table columns: %w", err)
	}
	if len(defs) != len(t.columnNames) {
		return errColumnsNotYet
	}
	for i, d := range defs {
		if d.Name != t.columnNames[i] {
			return errColumnsNotYet
		}
	}
	return nil
}

// errColumnsChanged ends a list or watch whose Table columns changed
// under it (a CRD's printer columns edited): the store relists.
var errColumnsChanged = fmt.Errorf("table columns changed: %w", snapshot.ErrGone)

// listTable reads one page of a Table LIST. The first page sets the
// columns; a later page with other columns fails the list, which is
// started again.
func (s *apiSource) listTable(ctx context.Context, q url.Values, continueToken string, row func(raw []byte) error) (wire.ListEnvelope, error) {
	q.Set("includeObject", s.table.includeObject())
	resp, err := s.do(ctx, q, s.format.ListAccept())
	if err != nil {
		return wire.ListEnvelope{}, err
	}
	defer resp.Body.Close()
	first := continueToken == ""
	env, err := wire.DecodeTable(resp.Body, func(cols []byte) error {
		if err := s.table.checkColumns(cols); err != nil {
			return err
		}
		if s.table.setColumns(cols) && !first {
			return errColumnsChanged
		}
		return nil
	}, row)
	if err != nil {
		return env, err
	}
	if first {
		null, err := s.emptyTableRows(ctx)
		if err != nil {
			return env, err
		}
		s.table.setNullRows(null)
		// Otherwise, or when this fails, the feed's own bookmarks teach it.
		if s.table.watchLists == nil || s.table.watchLists() {
			if err := s.learnTableBookmark(ctx, env.ListMeta.ResourceVersion); err != nil {
				klog.V(2).InfoS("Table bookmark row not learned at list", "path", s.path, "err", err)
			}
		}
	}
	return env, nil
}

// tableBookmarkWait bounds the watch-list learnTableBookmark sends. Not
// measured: its end bookmark comes at once where the apiserver serves
// watch-lists.
const tableBookmarkWait = 5 * time.Second

// learnTableBookmark asks the apiserver for the row of a Table BOOKMARK:
// the end bookmark of a Table watch-list from rv that selects no object.
// An apiserver that refuses watch-lists (its WatchList feature off) is not
// asked; the feed's periodic bookmarks teach it later.
func (s *apiSource) learnTableBookmark(ctx context.Context, rv string) error {
	ctx, cancel := context.WithTimeout(ctx, tableBookmarkWait)
	defer cancel()
	cols := s.table.columns()
	q := url.Values{
		"watch":                {"true"},
		"sendInitialEvents":    {"true"},
		"allowWatchBookmarks":  {"true"},
		"resourceVersion":      {rv},
		"resourceVersionMatch": {"NotOlderThan"},
		"fieldSelector":        {fields.OneTermEqualSelector("metadata.name", impossibleName).String()},
		"includeObject":        {"Metadata"},
		"timeoutSeconds":       {strconv.Itoa(int(tableBookmarkWait / time.Second))},
	}
	resp, err := s.do(ctx, q, s.format.WatchAccept()) //nolint:bodyclose // closed by the decoder
	if err != nil {
		return err
	}
	dec := wire.NewWatchDecoder(wire.Table, resp.Body, wire.WatchOptions{})
	defer func() { _ = dec.Close() }() // the bookmark, or its error, is the answer
	ev, err := dec.Next()
	if err != nil {
		return err
	}
	if ev.Type != wire.Bookmark {
		return fmt.Errorf("a %s event, not the initial events' end bookmark", ev.Type)
	}
	if ev.Columns != nil && (cols == nil || !bytes.Equal(ev.Columns, cols.JSON)) {
		return errors.New("the bookmark's columns are not the list's")
	}
	return s.table.learnBookmark(ev.Object, ev.ResourceVersion, cols)
}

// impossibleName is a name no object can have ("/" is not allowed in any
// object name): a Table LIST selecting it is empty.
const impossibleName = "listproxy/none"

// emptyTableRows asks the apiserver how it writes an empty Table of the
// resource (rows null or []): a LIST selecting no object, from its watch
// cache.
func (s *apiSource) emptyTableRows(ctx context.Context) (bool, error) {
	q := url.Values{
		"fieldSelector":   {fields.OneTermEqualSelector("metadata.name", impossibleName).String()},
		"resourceVersion": {"0"},
		"includeObject":   {"None"},
	}
	resp, err := s.do(ctx, q, s.format.ListAccept())
	if err != nil {
		return false, fmt.Errorf("empty table: %w", err)
	}
	defer resp.Body.Close()
	env, err := wire.DecodeTable(resp.Body, nil, func([]byte) error { return errors.New("a row in a list that selects nothing") })
	if err != nil {
		return false, fmt.Errorf("empty table: %w", err)
	}
	return env.NullRows, nil
}

// tableWatch is a Table watch: an event carrying columns other than the
// store's ends it, so that the store relists under the new columns.
type tableWatch struct {
	watchAdapter
	table *tableFeed
}

func (w tableWatch) Next() (snapshot.WatchEvent, error) {
	ev, err := w.d.Next()
	if err != nil {
		return snapshot.WatchEvent{}, err
	}
	if ev.Columns != nil {
		if err := w.table.checkColumns(ev.Columns); err != nil {
			return snapshot.WatchEvent{}, fmt.Errorf("%w: %w", err, snapshot.ErrGone)
		}
		if w.table.setColumns(ev.Columns) {
			return snapshot.WatchEvent{}, errColumnsChanged
		}
	}
	if ev.Type == wire.Bookmark {
		if err := w.table.learnBookmark(ev.Object, ev.ResourceVersion, w.table.columns()); err != nil {
			klog.V(2).InfoS("Table bookmark row not learned", "err", err)
		}
	}
	return snapshot.WatchEvent{Type: snapshot.EventType(ev.Type), Object: ev.Object, ResourceVersion: ev.ResourceVersion}, nil
}

// newTableExtractor returns how a Table store's rows become entries: the
// row is checked and stored (table.Rules.ParseAhead), labels and fields
// are read from its object. A row that fails the check fails the list or
// watch; the tableRejectLimit-th within tableRejectPeriod refuses the
// resource's Tables (refuse). m, which may be nil, counts rejected rows
// and observes how far ahead the apiserver's clock is.
func newTableExtractor(info *catalog.Resource, feed *tableFeed, now func() time.Time, m *Metrics, refuse func(error)) snapshot.Extractor {
	objectFormat := wire.MetaJSON
	if info.Table.Object {
		objectFormat = wire.JSON
	}
	entryOf := newEntryMaker(info, objectFormat)
	resource := info.GVR.GroupResource().String()
	return func(raw []byte) (*snapshot.Entry, error) {
		received := now()
		stored, object, row, ahead, err := info.Table.ParseAhead(raw, received)
		if err != nil {
			m.tableMismatch(resource, tableRejectReason(err))
			if feed.reject(received) {
				refuse(err)
			} else {
				klog.InfoS("Table row rejected; the store lists again", "resource", resource, "err", err)
			}
			return nil, err
		}
		if ahead > 0 {
			m.tableAhead(ahead)
		}
		e, err := entryOf(object, stored)
		if err != nil {
			return nil, err
		}
		e.Extra = &TableRow{Row: row, Columns: feed.columns()}
		return e, nil
	}
}

// tableRejectReason is the reason label of a row table.Rules.ParseAhead
// rejected with err.
func tableRejectReason(err error) string {
	switch {
	case errors.Is(err, table.ErrClockSkew):
		return tableRejectClockSkew
	case errors.Is(err, table.ErrMismatch):
		return tableRejectRule
	}
	return tableRejectMalformed
}

// refuseTables refuses gvr's Tables for tableRefusal and drops its Table
// store; err is the last row's rejection.
func (reg *Registry) refuseTables(info *catalog.Resource, err error) {
	resource := info.GVR.GroupResource().String()
	klog.ErrorS(err, "Table rows do not follow listproxy's rules on this apiserver; its Tables pass through", "resource", resource, "rejected", tableRejectLimit, "within", tableRejectPeriod, "for", tableRefusal)
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.tableRefused[info.GVR] = reg.clock.Now().Add(tableRefusal)
	k := storeKey{gvr: info.GVR, format: wire.Table}
	if e, ok := reg.stores[k]; ok {
		reg.dropLocked(k, e, "table rows do not follow their rules")
	}
}

// tablesRefused reports whether gvr's Tables are refused now.
func (reg *Registry) tablesRefused(gvr schema.GroupVersionResource) bool {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	until, ok := reg.tableRefused[gvr]
	return ok && reg.clock.Now().Before(until)
}

// TableHead returns the head of a Table store's responses; nil before its
// first list.
func (h *Handle) TableHead() *TableHead {
	if h.e.source.table == nil {
		return nil
	}
	return h.e.source.table.head.Load()
}
