package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// EventType is the type of a watch event
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes).
type EventType string

// Watch event types.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

func (t EventType) valid() bool {
	switch t {
	case Added, Modified, Deleted, Bookmark, Error:
		return true
	}
	return false
}

// initialEventsEndAnnotation marks the bookmark that ends the initial events
// of a sendInitialEvents=true watch.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// bookmarkParts reads the initial-events-end annotation of bookmarks only.
func bookmarkParts(t EventType) metaParts {
	if t == Bookmark {
		return withInitialEventsEnd
	}
	return 0
}

// Event is one decoded watch event.
type Event struct {
	Type EventType
	// Object, for ADDED, MODIFIED and DELETED, is the object in list-item
	// form: byte-identical to the same object's item in a LIST in the same
	// format (given the right WatchOptions). For BOOKMARK it is the bookmark
	// object in the same form. For ERROR it is the Status as sent: the JSON
	// object, or the bare protobuf metav1.Status message (see DecodeStatus).
	// Object is owned by the caller.
	Object []byte
	// ResourceVersion is the object's metadata.resourceVersion; for a
	// BOOKMARK, the bookmarked resourceVersion. Empty for ERROR.
	ResourceVersion string
	// InitialEventsEnd is set on the BOOKMARK that carries the
	// k8s.io/initial-events-end: "true" annotation.
	InitialEventsEnd bool
	// Columns, in format Table, is the event's columnDefinitions when it
	// carried them (the first event a watcher is sent), else nil.
	Columns []byte
}

// WatchOptions tune a WatchDecoder.
type WatchOptions struct {
	// StripTypeMeta removes the top-level "kind" and "apiVersion" members from
	// JSON objects, byte-wise. Set it for built-in resources in format JSON:
	// their watch objects carry kind/apiVersion but their list items do not.
	// Leave it unset for custom resources (unstructured items keep them) and
	// for MetaJSON (PartialObjectMetadata items keep them). Ignored for
	// protobuf, whose objects never carry TypeMeta in the message.
	StripTypeMeta bool
}

// maxFrameSize bounds one protobuf watch frame. A guard against garbage,
// not tuned; objects are limited by etcd to ~1.5 MiB by default.
const maxFrameSize = 64 << 20

// WatchDecoder decodes a watch response body. Next is not safe for
// concurrent use; Close may be called from another goroutine to unblock it.
type WatchDecoder struct {
	format Format
	body   io.ReadCloser
	opts   WatchOptions
	js     *jsonStream   // JSON formats
	br     *bufio.Reader // protobuf formats
	err    error         // sticky
}

// NewWatchDecoder returns a decoder of the watch body in format f. It takes
// ownership of body; Close closes it.
//
// JSON watch bodies are a sequence of {"type":T,"object":O} values (the
// apiserver writes one per line). Protobuf watch bodies are frames of a
// 4-byte big-endian length followed by a metav1.WatchEvent message {type = 1;
// object = 2 {raw = 1: "k8s\x00" + runtime.Unknown wrapping the object}}.
// Observed on v1.36.3: the frame holds the bare WatchEvent, not an Unknown
// around it; a "k8s\x00"-prefixed frame is accepted too.
func NewWatchDecoder(f Format, body io.ReadCloser, opts WatchOptions) *WatchDecoder {
	d := &WatchDecoder{format: f, body: body, opts: opts}
	switch f {
	case JSON, MetaJSON, Table:
		d.js = newJSONStream(body)
	case Protobuf, MetaProtobuf:
		d.br = bufio.NewReaderSize(body, streamBufSize)
	default:
		d.err = unsupported("format %v", f)
	}
	return d
}

// Next returns the next event. At the clean end of the stream it returns
// io.EOF; a stream cut inside an event is ErrMalformed wrapping
// io.ErrUnexpectedEOF. Errors are sticky.
func (d *WatchDecoder) Next() (Event, error) {
	if d.err != nil {
		return Event{}, d.err
	}
	var ev Event
	var err error
	if d.js != nil {
		ev, err = d.nextJSON()
	} else {
		ev, err = d.nextProto()
	}
	if err != nil {
		d.err = err
		return Event{}, err
	}
	return ev, nil
}

// Close closes the body.
func (d *WatchDecoder) Close() error { return d.body.Close() }

func (d *WatchDecoder) nextJSON() (Event, error) {
	s := d.js
	if eof, err := s.atEOF(); err != nil {
		return Event{}, err
	} else if eof {
		return Event{}, io.EOF
	}
	if err := s.expect('{'); err != nil {
		return Event{}, err
	}
	var ev Event
	var obj []byte
	stripped := false
	for {
		rawKey, err := s.readValue()
		if err != nil {
			return Event{}, err
		}
		// Classify the key now: reading the value may move the buffer.
		isType, isObject := keyIs(rawKey, "type"), keyIs(rawKey, "object")
		if err := s.expect(':'); err != nil {
			return Event{}, err
		}
		v, err := s.readValue()
		if err != nil {
			return Event{}, err
		}
		switch {
		case isType:
			t, err := decodeString(v)
			if err != nil {
				return Event{}, fmt.Errorf("watch event type: %w", err)
			}
			ev.Type = EventType(t)
		case isObject:
			o, st, err := d.jsonEventObject(v, ev.Type)
			if err != nil {
				return Event{}, err
			}
			obj, stripped = o, stripped || st
		}
		if last, err := s.memberEnd("watch event"); err != nil {
			return Event{}, err
		} else if last {
			break
		}
	}
	return d.finishJSONEvent(ev, obj, stripped)
}

// jsonEventObject copies a watch event's object v out of the buffer (the
// next readValue may reuse it), stripping its type meta now (stripped) when
// the options ask it and the event's type, read before it, is known and not
// ERROR.
func (d *WatchDecoder) jsonEventObject(v []byte, t EventType) (obj []byte, stripped bool, err error) {
	if v[0] != '{' {
		return nil, false, malformed("watch event object is not a JSON object")
	}
	if d.opts.StripTypeMeta && t != "" && t != Error {
		obj, err = stripTypeMeta(v)
		if err != nil {
			return nil, false, err
		}
		return obj, true, nil
	}
	return append([]byte(nil), v...), false, nil
}

// finishJSONEvent completes a watch event read from JSON with its object
// obj: the type and object checked, the object's type meta stripped if the
// options ask it and it was not (stripped) as it was read, and, but for
// ERROR events, the object's resourceVersion read.
func (d *WatchDecoder) finishJSONEvent(ev Event, obj []byte, stripped bool) (Event, error) {
	if !ev.Type.valid() {
		return Event{}, malformed("watch event type %q", ev.Type)
	}
	if obj == nil {
		return Event{}, malformed("watch event without object")
	}
	if d.opts.StripTypeMeta && !stripped && ev.Type != Error {
		// "object" came before "type".
		var err error
		if obj, err = stripTypeMeta(obj); err != nil {
			return Event{}, err
		}
	}
	ev.Object = obj
	if ev.Type == Error {
		return ev, nil
	}
	if d.format == Table {
		return tableEvent(ev)
	}
	m, err := jsonObjectMeta(obj, bookmarkParts(ev.Type))
	if err != nil {
		return Event{}, fmt.Errorf("watch %s object: %w", ev.Type, err)
	}
	ev.ResourceVersion = m.ResourceVersion
	ev.InitialEventsEnd = m.initialEventsEnd
	return ev, nil
}

// stripTypeMeta returns a copy of the JSON object b without its top-level
// "kind" and "apiVersion" members. Members are re-joined with ",", which
// reproduces compact JSON exactly.
func stripTypeMeta(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b))
	out = append(out, '{')
	first := true
	err := eachMember(b, func(key, value []byte) (bool, error) {
		if keyIs(key, "kind") || keyIs(key, "apiVersion") {
			return true, nil
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, key...)
		out = append(out, ':')
		out = append(out, value...)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

func (d *WatchDecoder) nextProto() (Event, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(d.br, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Event{}, malformed("watch frame header: %w", err)
		}
		return Event{}, err // io.EOF at a frame boundary: clean end
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrameSize {
		return Event{}, malformed("watch frame of %d bytes exceeds %d", n, maxFrameSize)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(d.br, frame); err != nil {
		return Event{}, malformed("watch frame: %w", unexpectedEOF(err))
	}
	return parseProtoWatchEvent(frame)
}

// parseProtoWatchEvent parses one protobuf watch frame. Event.Object aliases
// frame.
func parseProtoWatchEvent(frame []byte) (Event, error) {
	var ev Event
	if bytes.HasPrefix(frame, protoPrefix) {
		u, err := parseUnknown(frame)
		if err != nil {
			return ev, err
		}
		frame = u.raw
	}
	var objRaw []byte
	sawObj := false
	err := eachField(frame, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			ev.Type = EventType(v)
		case 2:
			sawObj = true
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == 1 && typ == protowire.BytesType {
					objRaw = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return Event{}, err
	}
	if !ev.Type.valid() {
		return Event{}, malformed("watch event type %q", ev.Type)
	}
	if !sawObj {
		return Event{}, malformed("watch event without object")
	}
	u, err := parseUnknown(objRaw)
	if err != nil {
		return Event{}, fmt.Errorf("watch %s object: %w", ev.Type, err)
	}
	ev.Object = u.raw
	if ev.Type == Error {
		return ev, nil
	}
	m, err := protoObjectMeta(u.raw, bookmarkParts(ev.Type))
	if err != nil {
		return Event{}, fmt.Errorf("watch %s object: %w", ev.Type, err)
	}
	ev.ResourceVersion = m.ResourceVersion
	ev.InitialEventsEnd = m.initialEventsEnd
	return ev, nil
}
