package watch

import "github.com/listproxy/listproxy/pkg/collection"

// Reason says why a watch passed through (the "reason" label of
// listproxy_watch_passed_through_total) or, for a watch listproxy serves,
// how it starts (the "start" label of listproxy_watch_served_total), as
// lists.Reason says why a LIST was served or passed through. The reasons
// of collection.Parse and stores.Registry.Acquire, and those the edge
// gives Handler.PassedThrough, are reasons too, under their own names.
type Reason string

// How a served watch starts (Decision.Reason).
const (
	ReasonInitialConsistent   Reason = "initial_consistent"     // a watch-list from a consistent read
	ReasonInitialLatest       Reason = "initial_latest"         // a watch-list from the latest snapshot (resourceVersion "0")
	ReasonInitialNotOlderThan Reason = "initial_not_older_than" // a watch-list from resourceVersion N
	ReasonFrom                Reason = "from"                   // every change after resourceVersion N
)

// Reasons Decide passes a watch through.
const (
	ReasonQuery           Reason = "query"             // a parameter or spelling listproxy does not take for certain
	ReasonInvalid         Reason = "invalid"           // options the apiserver rejects
	ReasonResourceVersion Reason = "resource_version"  // a resourceVersion that is not a revision etcd can have
	ReasonNoInitialEvents Reason = "no_initial_events" // sendInitialEvents=false
)

// Reasons the Handler passes a watch through, besides Decide's and those
// of collection.Parse and stores.Registry.Acquire.
const (
	// ReasonShardSelector: a shardSelector while serving them is off
	// (Config.ServeShardSelectors).
	ReasonShardSelector Reason = collection.ReasonShardSelector
	// ReasonNotSynced: the store has not synced (its list is failing, or
	// the client left while it waited), or has no snapshot yet.
	ReasonNotSynced Reason = "not_synced"
)

// Reasons of Server.Serve: it passes a watch through for all of them but
// ReasonInitialEventsRejected, which it answers itself.
const (
	// ReasonLegacyInitialEvents: a watch from resourceVersion "" or "0"
	// without sendInitialEvents where the apiserver's WatchList feature is
	// off (Target.WatchListDefaults).
	ReasonLegacyInitialEvents Reason = "legacy_initial_events"
	// ReasonTableWatch: a watch of Table rows with bookmarks, while the
	// row of the resource's bookmark is not known yet.
	ReasonTableWatch Reason = "table_watch"
	// ReasonUnsupportedType: a type whose bookmark cannot be built.
	ReasonUnsupportedType Reason = "unsupported_type"
	// ReasonNoConsistentRead: a consistent watch-list with nothing to
	// prove it (Target.Consistent nil).
	ReasonNoConsistentRead Reason = "no_consistent_read"
	// ReasonConsistentUnproven: the consistent read was not proven.
	ReasonConsistentUnproven Reason = "consistent_unproven"
	// ReasonNotOlderThanTimeout: the store did not reach a watch-list's
	// resourceVersion in time.
	ReasonNotOlderThanTimeout Reason = "not_older_than_timeout"
	// ReasonResourceVersionAhead: a watch from a resourceVersion past the
	// store's progress that nothing proved will reach the store, or from
	// a store that has not synced.
	ReasonResourceVersionAhead Reason = "resource_version_ahead"
	// ReasonPassThrough: a Decision to pass through.
	ReasonPassThrough Reason = "pass_through"
	// ReasonInitialEventsRejected: a watch-list answered the apiserver's
	// 429 for lack of room to write its initial events (Target.Admit).
	ReasonInitialEventsRejected Reason = "initial_events_rejected"
	// ReasonTableColumns: a Table watch-list whose snapshot holds a row
	// rendered under other columns than the resource's latest.
	ReasonTableColumns Reason = "table_columns"
	// ReasonNotRetained: a watch from a resourceVersion older than the
	// store's feed of changes, or a store that relisted since its
	// snapshot was taken.
	ReasonNotRetained Reason = "not_retained"
)
