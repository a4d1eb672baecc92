package watch

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Action is what listproxy does with a watch request.
type Action int

const (
	// PassThrough: the apiserver answers (invalid or unsupported options).
	PassThrough Action = iota
	// InitialConsistent: initial events from a snapshot proven as fresh as
	// a consistent read (resourceVersion unset).
	InitialConsistent
	// InitialLatest: initial events from the latest snapshot
	// (resourceVersion "0").
	InitialLatest
	// InitialNotOlderThan: initial events from a snapshot at or past RV.
	InitialNotOlderThan
	// From: no initial events; every change after RV.
	From
)

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// RV is the resourceVersion of InitialNotOlderThan and From.
	RV uint64
	// Bookmarks: allowWatchBookmarks was set.
	Bookmarks bool
	// Timeout is timeoutSeconds; 0 when not given.
	Timeout time.Duration
	// LabelSelector and FieldSelector are as given, unparsed.
	LabelSelector, FieldSelector string
	// ShardSelector is the shardSelector parameter (KEP-5866) as given,
	// unparsed; "" is none.
	ShardSelector string
	// Defaulted: a watch from resourceVersion "" or "0" without
	// sendInitialEvents and resourceVersionMatch, a watch-list only where
	// the apiserver's WatchList feature is on (Target.WatchListDefaults).
	Defaulted bool
	// IncludeObject: the query has includeObject, which only a Table
	// watch may carry.
	IncludeObject bool
	// Reason is how a served watch starts, or why it passes through
	// (PassThrough).
	Reason Reason
}

// Decide parses a watch request's query, applying the apiserver's defaults
// (SetListOptionsDefaults in k8s.io/apimachinery/pkg/apis/meta/internalversion,
// WatchList on as in 1.34+: a watch from resourceVersion "" or "0" without
// sendInitialEvents and resourceVersionMatch is a watch-list), and decides
// whether listproxy serves it. Anything the apiserver would reject
// (ValidateListOptions), an unknown or repeated parameter, or a spelling
// listproxy does not take for certain passes through, so that the apiserver
// gives its own answer. sendInitialEvents=false passes through too, and so
// does a resourceVersion beyond etcd's int64 revisions (the apiserver, which
// parses it as a uint64, waits for it).
func Decide(rawQuery string) Decision {
	pass := func(reason Reason) Decision { return Decision{Action: PassThrough, Reason: reason} }
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return pass(ReasonQuery)
	}
	q, ok := parseWatchQuery(values)
	if !ok || !q.watch {
		return pass(ReasonQuery)
	}
	d, sendInitial, rv, rvMatch, haveMatch := q.d, q.sendInitial, q.rv, q.rvMatch, q.haveMatch
	// SetListOptionsDefaults with the WatchList feature on.
	if sendInitial == nil && !haveMatch && (rv == "" || rv == "0") {
		t := true
		sendInitial, rvMatch, haveMatch = &t, "NotOlderThan", true
		d.Defaulted = true
	}
	// validateWatchOptions: anything it rejects is the apiserver's 422.
	if sendInitial != nil && rvMatch != "NotOlderThan" {
		return pass(ReasonInvalid)
	}
	if haveMatch && (sendInitial == nil || rvMatch != "NotOlderThan") {
		return pass(ReasonInvalid)
	}
	var n uint64
	if rv != "" && rv != "0" {
		if n, err = strconv.ParseUint(rv, 10, 64); err != nil || n == 0 || n > math.MaxInt64 {
			return pass(ReasonResourceVersion)
		}
	}
	switch {
	case sendInitial == nil:
		d.Action, d.RV, d.Reason = From, n, ReasonFrom
	case !*sendInitial:
		return pass(ReasonNoInitialEvents)
	case rv == "":
		d.Action, d.Reason = InitialConsistent, ReasonInitialConsistent
	case rv == "0":
		d.Action, d.Reason = InitialLatest, ReasonInitialLatest
	default:
		d.Action, d.RV, d.Reason = InitialNotOlderThan, n, ReasonInitialNotOlderThan
	}
	return d
}

// watchQuery is a watch request's parameters as Decide reads them; d holds
// those the Decision carries as they are.
type watchQuery struct {
	d           Decision
	watch       bool
	sendInitial *bool
	rv, rvMatch string
	haveMatch   bool
}

// parseWatchQuery reads a watch request's parameters; ok is false for what
// passes through as ReasonQuery: a repeated or unknown parameter, or a
// value listproxy does not take for certain.
func parseWatchQuery(values url.Values) (q watchQuery, ok bool) {
	for name, vs := range values {
		if len(vs) != 1 {
			return q, false
		}
		v := vs[0]
		switch name {
		case "watch":
			b, ok := parseBool(v)
			if !ok || !b {
				return q, false
			}
			q.watch = true
		case "resourceVersion":
			q.rv = v
		case "resourceVersionMatch":
			q.rvMatch, q.haveMatch = v, true
		case "sendInitialEvents":
			b, ok := parseBool(v)
			if !ok {
				return q, false
			}
			q.sendInitial = &b
		case "allowWatchBookmarks":
			b, ok := parseBool(v)
			if !ok {
				return q, false
			}
			q.d.Bookmarks = b
		case "timeoutSeconds":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > 1<<31 {
				return q, false
			}
			q.d.Timeout = time.Duration(n) * time.Second
		case "timeout":
			// The apiserver ignores ?timeout= on watches; client-go sends it.
			if _, err := time.ParseDuration(v); err != nil {
				return q, false
			}
		case "includeObject":
			// Read by collection.Parse for a Table; any other watch with
			// it passes through (Handler.parse).
			q.d.IncludeObject = true
		case "labelSelector":
			q.d.LabelSelector = v
		case "fieldSelector":
			q.d.FieldSelector = v
		case "shardSelector":
			q.d.ShardSelector = v
		default:
			return q, false
		}
	}
	return q, true
}

// parseBool reads a boolean query value listproxy is sure of; the apiserver
// takes anything but "0" and "false" as true, so other spellings pass
// through.
func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "true":
		return true, true
	case "0", "false":
		return false, true
	}
	return false, false
}
