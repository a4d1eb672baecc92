package table

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// IncludeObject is a Table request's includeObject: what each row's
// "object" carries.
type IncludeObject int

const (
	// IncludeMetadata (the default when unset): PartialObjectMetadata in
	// the Table's group version.
	IncludeMetadata IncludeObject = iota
	// IncludeNone: "object":null.
	IncludeNone
)

// ErrMismatch is returned when a clock cell the apiserver rendered is not
// what the rule gives for the time the row was received: the resource's
// rules do not hold for this apiserver.
var ErrMismatch = errors.New("table cell does not follow its rule")

// ErrClockSkew is the ErrMismatch of a clock cell that is what the rule
// gives for an instant outside the tolerated range but within a minute of
// it: the apiserver's clock and listproxy's are more than MaxClockSkew
// apart, or the row was delivered late.
var ErrClockSkew = fmt.Errorf("%w (only for an instant beyond the clock skew tolerated)", ErrMismatch)

// Column is what Rules need of a custom resource's printer column
// (apiextensions.k8s.io/v1 CustomResourceColumnDefinition).
type Column struct {
	Type     string // "date", "string", ...
	JSONPath string
}

// Rules is how one resource's Table rows are stored and served on one
// apiserver release: which cells are relative to the clock, and what of
// the object they read.
type Rules struct {
	// Object: a clock cell reads beyond the object's metadata, so the
	// rows must be fed with includeObject=Object (Parse keeps only the
	// metadata); otherwise includeObject=Metadata.
	Object bool

	kind kind
	// age is the cell of metadata.creationTimestamp's Age (-1: none).
	age int
	// dates has bit i set when cell i is a custom resource's date
	// column of .metadata.creationTimestamp (Rules stay comparable).
	dates uint64
}

// kind is which rule reads the object beyond its Age.
type kind uint8

const (
	kindMetadata kind = iota // Age at most
	kindPod                  // Restarts
	kindJob                  // Duration
	kindCronJob              // Last Schedule
	kindEvent                // core/v1 Last Seen, First Seen
	kindEventsV1             // events.k8s.io/v1 Last Seen, First Seen
	kindCustom               // date columns of .metadata.creationTimestamp
)

// For returns the rules of built-in resource gr on apiserver release
// 1.minor, and false when its Tables are not served from snapshots: an
// unknown release or resource, or a cell that depends on more than one
// object (a page rule).
func For(minor int, gr schema.GroupResource) (Rules, bool) {
	if minor < minMinor || minor > maxMinor {
		return Rules{}, false
	}
	for _, b := range builtins {
		if b.gr != gr || minor < b.from || (b.to != 0 && minor > b.to) {
			continue
		}
		r := Rules{kind: b.kind, age: b.age}
		r.Object = b.kind != kindMetadata
		return r, true
	}
	return Rules{}, false
}

// ForCustom returns the rules of a custom resource whose served version
// has the given printer columns (none: the apiserver's default Age
// column), and false when a date column reads outside .metadata.
func ForCustom(columns []Column) (Rules, bool) {
	if len(columns) == 0 {
		columns = []Column{{Type: "date", JSONPath: ".metadata.creationTimestamp"}}
	}
	r := Rules{kind: kindCustom, age: -1}
	for i, c := range columns {
		if c.Type != "date" {
			continue
		}
		// Cell 0 is the name; the columns follow in order.
		if c.JSONPath != ".metadata.creationTimestamp" || i+1 >= 64 {
			return Rules{}, false
		}
		r.dates |= 1 << (i + 1)
	}
	return r, true
}

// Row is where one stored row's clock cells and object lie in its bytes,
// and the times its clock cells are relative to. It does not hold the
// bytes (they are stored, and packed, beside it).
type Row struct {
	// object is the object's JSON value in the stored bytes: a
	// PartialObjectMetadata in meta.k8s.io/v1.
	objectStart, objectEnd uint32
	slots                  []slot
}

// slot is a clock-relative duration inside a cell: bytes [start, end) of
// the stored row, rendered as the duration since the unix microsecond t.
type slot struct {
	start, end uint32
	t          int64
}

// metadataPrefix is how a PartialObjectMetadata in meta.k8s.io/v1 starts
// as the apiserver writes it; metadataGroupPrefix is its part before the
// version.
const (
	metadataPrefix      = `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":`
	metadataGroupPrefix = `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/`
)

// window is how long before received a row may have been rendered, by
// the apiserver's clock equal to listproxy's: a page's rows are rendered
// together and read one after another.
const window = 5 * time.Second

// MaxClockSkew is how far apart the apiserver's clock and listproxy's may
// be for a row to be taken: Parse accepts a row rendered at an instant in
// [received-5s-MaxClockSkew, received+MaxClockSkew] of listproxy's clock.
// Clocks kept by NTP agree within milliseconds, yet a cell of seconds
// rendered within that skew after a whole second reads the next one (30 ms
// of skew: about 3% of the rows of objects younger than 10 minutes).
//
// 2 s is kube's own tolerance: HumanDuration renders a time less than 2 s
// in the future as "0s" ("almost now"), and <invalid> from 2 s. A stored
// row's clock cells are rendered again on listproxy's clock, as an
// apiserver with that clock renders them: with the apiserver less than
// 2 s ahead, listproxy shows each duration as much less than the
// apiserver shows at that moment, an object the apiserver just stamped as
// 0s, never <invalid>. With more skew, listproxy would show objects
// younger than the skew as <invalid> while the apiserver shows their age:
// such rows are rejected (ErrClockSkew).
const MaxClockSkew = 2 * time.Second

// skewSearch is how far beyond the tolerated range a clock cell that does
// not follow its rule is looked for, to tell skewed clocks (ErrClockSkew)
// from a rule that does not hold.
const skewSearch = time.Minute

// Parse is ParseAhead without how far ahead the apiserver's clock was.
func (r Rules) Parse(raw []byte, received time.Time) (stored, object []byte, row *Row, err error) {
	stored, object, row, _, err = r.ParseAhead(raw, received)
	return stored, object, row, err
}

// ParseAhead reads one row of a Table the apiserver rendered at about
// received, as {"cells":[...][,"conditions":[...]],"object":{...}}. It
// returns the row as stored: the same bytes, except that a full object
// (Rules.Object) is replaced by its PartialObjectMetadata in
// meta.k8s.io/v1 as the apiserver writes it for includeObject=Metadata;
// the object as received (for reading labels and fields, valid as long
// as raw is); and where its clock cells lie. Every clock cell must be
// what the rule gives for a time in
// [received-5s-MaxClockSkew, received+MaxClockSkew] (ErrMismatch
// otherwise; ErrClockSkew when it is within a minute of that range).
//
// ahead is how long after received, at least, the apiserver rendered the
// row by listproxy's clock: the least skew of the apiserver's clock ahead
// of listproxy's that its clock cells show, 0 when an instant up to
// received explains them. At most MaxClockSkew.
//
// For a Metadata feed, stored is raw itself.
func (r Rules) ParseAhead(raw []byte, received time.Time) (stored, object []byte, row *Row, ahead time.Duration, err error) {
	if len(raw) > math.MaxUint32 {
		return nil, nil, nil, 0, fmt.Errorf("%w: the row is too long", errSyntax)
	}
	l, err := scanRow(raw)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	object = raw[l.object.start:l.object.end]
	wants, err := r.wants(object)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	row = &Row{}
	for _, w := range wants {
		if w.cell >= len(l.cells) {
			return nil, nil, nil, 0, fmt.Errorf("%w: cell %d: the row has %d cells", ErrMismatch, w.cell, len(l.cells))
		}
		c := l.cells[w.cell]
		s, after, err := w.check(raw[c.start:c.end], received)
		if err != nil {
			return nil, nil, nil, 0, fmt.Errorf("%w: cell %d is %s", err, w.cell, raw[c.start:c.end])
		}
		// The cells were rendered at one instant: after each one's earliest.
		ahead = max(ahead, after)
		if w.clock {
			row.slots = append(row.slots, slot{
				start: uint32(c.start + s.start),
				end:   uint32(c.start + s.end),
				t:     w.t.UnixMicro(),
			})
		}
	}
	// Slots are in cell order.
	slices.SortFunc(row.slots, func(a, b slot) int { return int(a.start) - int(b.start) })

	stored = raw
	if r.Object {
		meta, err := findField(object, "metadata")
		if err != nil {
			return nil, nil, nil, 0, err
		}
		tail := raw[l.object.end:]
		stored = make([]byte, 0, l.object.start+len(metadataPrefix)+meta.end-meta.start+1+len(tail))
		stored = append(stored, raw[:l.object.start]...)
		stored = append(stored, metadataPrefix...)
		stored = append(stored, object[meta.start:meta.end]...)
		stored = append(stored, '}')
		row.objectStart = uint32(l.object.start)
		row.objectEnd = uint32(len(stored))
		stored = append(stored, tail...)
	} else {
		if !bytes.HasPrefix(object, []byte(metadataPrefix)) {
			return nil, nil, nil, 0, fmt.Errorf("%w: the object is not a PartialObjectMetadata in meta.k8s.io/v1", errSyntax)
		}
		row.objectStart, row.objectEnd = uint32(l.object.start), uint32(l.object.end)
	}
	return stored, object, row, ahead, nil
}

// wants is what the rules give for the row of object.
func (r Rules) wants(object []byte) ([]want, error) {
	var ws []want
	var created time.Time
	switch r.kind {
	case kindMetadata, kindCustom:
		var m metaFields
		if err := decode(object, &m); err != nil {
			return nil, err
		}
		created = m.Metadata.CreationTimestamp.Time
	case kindPod:
		var p podFields
		if err := decode(object, &p); err != nil {
			return nil, err
		}
		created = p.Metadata.CreationTimestamp.Time
		ws = append(ws, podRestarts(&p))
	case kindJob:
		var j jobFields
		if err := decode(object, &j); err != nil {
			return nil, err
		}
		created = j.Metadata.CreationTimestamp.Time
		ws = append(ws, jobDuration(&j))
	case kindCronJob:
		var c cronJobFields
		if err := decode(object, &c); err != nil {
			return nil, err
		}
		created = c.Metadata.CreationTimestamp.Time
		ws = append(ws, cronJobLastSchedule(&c))
	case kindEvent, kindEventsV1:
		var e eventFields
		if err := decode(object, &e); err != nil {
			return nil, err
		}
		seen := eventSeen(&e, r.kind == kindEventsV1)
		ws = append(ws, seen[:]...)
	}
	if r.age >= 0 {
		ws = append(ws, since(r.age, created))
	}
	for cell := range 64 {
		if r.dates&(1<<cell) == 0 {
			continue
		}
		w := since(cell, created)
		w.missing = created.IsZero()
		ws = append(ws, w)
	}
	return ws, nil
}

// check reports whether cell, a JSON value, is what w gives for an
// instant in [received-window-MaxClockSkew, received+MaxClockSkew], where
// the duration lies in it, and how long after received the earliest such
// instant is (0 when one is not after received). It fails with
// ErrClockSkew or ErrMismatch.
func (w want) check(cell []byte, received time.Time) (span, time.Duration, error) {
	if !w.clock {
		if string(cell) == w.fixed || (w.missing && string(cell) == "null") {
			return span{}, 0, nil
		}
		return span{}, 0, ErrMismatch
	}
	inner := len(`"`) + len(w.prefix)
	if len(cell) < inner+len(w.suffix)+len(`"`) ||
		string(cell[:inner]) != `"`+w.prefix ||
		string(cell[len(cell)-len(w.suffix)-1:]) != w.suffix+`"` {
		return span{}, 0, ErrMismatch
	}
	s := span{inner, len(cell) - len(w.suffix) - 1}
	got := cell[s.start:s.end]
	// HumanDuration depends on whole seconds only, so the values over a
	// range of instants are those of the whole seconds it spans. Those up
	// to received are tried first (a row arrives just after it was
	// rendered), then those after it, earliest first.
	t := time.UnixMicro(w.t.UnixMicro())
	at := wholeSeconds(received.Sub(t))
	lo := wholeSeconds(received.Add(-window - MaxClockSkew).Sub(t))
	hi := wholeSeconds(received.Add(MaxClockSkew).Sub(t))
	for k := at; k >= lo; k-- {
		if renders(got, k) {
			return s, 0, nil
		}
	}
	for k := at + 1; k <= hi; k++ {
		if renders(got, k) {
			return s, t.Add(earliest(k)).Sub(received), nil
		}
	}
	// Outside the tolerance: near it, the clocks disagree.
	lo = wholeSeconds(received.Add(-window - MaxClockSkew - skewSearch).Sub(t))
	hi = wholeSeconds(received.Add(MaxClockSkew + skewSearch).Sub(t))
	for k := lo; k <= hi; k++ {
		if renders(got, k) {
			return span{}, 0, ErrClockSkew
		}
	}
	return span{}, 0, ErrMismatch
}

// wholeSeconds is d in whole seconds as HumanDuration reads it: truncated
// toward zero. A saturated time.Time.Sub keeps the loops over them short.
func wholeSeconds(d time.Duration) int64 { return int64(d / time.Second) }

// earliest is the least duration that is k whole seconds.
func earliest(k int64) time.Duration {
	if k > 0 {
		return time.Duration(k) * time.Second
	}
	return time.Duration(k-1)*time.Second + 1
}

// renders reports whether got is HumanDuration of k whole seconds.
func renders(got []byte, k int64) bool {
	var buf [32]byte
	return bytes.Equal(appendHumanDuration(buf[:0], time.Duration(k)*time.Second), got)
}

// Append appends the stored row to dst with its clock cells rendered for
// now and its object as include asks, PartialObjectMetadata in
// meta.k8s.io/groupVersion ("v1" or "v1beta1"): AppendHead, then
// AppendTail.
func (row *Row) Append(dst, stored []byte, now time.Time, include IncludeObject, groupVersion string) []byte {
	dst = row.AppendHead(dst, stored, now)
	return row.AppendTail(dst, stored, include, groupVersion)
}

// AppendHead appends the stored row's bytes up to the end of its last
// clock cell's duration (none when it has no clock cell), with the clock
// cells rendered for now.
func (row *Row) AppendHead(dst, stored []byte, now time.Time) []byte {
	return row.appendHead(dst, stored, now, false, 0)
}

// AppendHeadBlank appends what AppendHead appends, with every byte of each
// clock cell's rendering replaced by blank: the head's layout at now
// without the bytes that change with the clock.
func (row *Row) AppendHeadBlank(dst, stored []byte, now time.Time, blank byte) []byte {
	return row.appendHead(dst, stored, now, true, blank)
}

func (row *Row) appendHead(dst, stored []byte, now time.Time, blanked bool, blank byte) []byte {
	i := 0
	for _, s := range row.slots {
		dst = append(dst, stored[i:s.start]...)
		n := len(dst)
		dst = appendHumanDuration(dst, now.Sub(time.UnixMicro(s.t)))
		if blanked {
			for k := n; k < len(dst); k++ {
				dst[k] = blank
			}
		}
		i = int(s.end)
	}
	return dst
}

// AppendTail appends the rest of the stored row after AppendHead's bytes,
// with its object as include asks (see Append). It is the same at every
// instant.
func (row *Row) AppendTail(dst, stored []byte, include IncludeObject, groupVersion string) []byte {
	i := 0
	if n := len(row.slots); n > 0 {
		i = int(row.slots[n-1].end)
	}
	dst = append(dst, stored[i:row.objectStart]...)
	switch {
	case include == IncludeNone:
		dst = append(dst, "null"...)
	case groupVersion == "v1":
		dst = append(dst, stored[row.objectStart:row.objectEnd]...)
	default:
		dst = append(dst, metadataGroupPrefix...)
		dst = append(dst, groupVersion...)
		dst = append(dst, `",`...)
		dst = append(dst, stored[int(row.objectStart)+len(metadataPrefix)-len(`"metadata":`):row.objectEnd]...)
	}
	return append(dst, stored[row.objectEnd:]...)
}

// Object returns the row's object in stored, the row's stored bytes: a
// PartialObjectMetadata in meta.k8s.io/v1 (JSON).
func (row *Row) Object(stored []byte) []byte {
	return stored[row.objectStart:row.objectEnd]
}

// MaxClockLens is how many clock cells ClockLens tells apart.
const MaxClockLens = 7

// ClockLens returns the lengths of the row's clock cells rendered for now,
// one byte each, the first cell's in the lowest: two instants with the
// same lengths give heads (AppendHeadBlank) of one layout. It returns
// false for a row of more than MaxClockLens clock cells.
func (row *Row) ClockLens(now time.Time) (uint64, bool) {
	if len(row.slots) > MaxClockLens {
		return 0, false
	}
	var lens uint64
	var buf [32]byte
	for k, s := range row.slots {
		// A rendering is at most len(invalidJSON) (19) bytes long.
		n := len(appendHumanDuration(buf[:0], now.Sub(time.UnixMicro(s.t))))
		lens |= uint64(n) << (8 * k)
	}
	return lens, true
}
