package app

import (
	"net/http"

	"github.com/listproxy/listproxy/pkg/lists"
	"github.com/listproxy/listproxy/pkg/watch"
)

// watchStores lets the watch server resolve watches to the LIST server's
// stores (watch.Stores).
type watchStores struct {
	lists *lists.Lists
}

var _ watch.Stores = watchStores{}

func (s watchStores) Cacheable(r *http.Request, labelSelector, fieldSelector string) (string, string, bool) {
	return s.lists.CacheableWatch(r, labelSelector, fieldSelector)
}

func (s watchStores) Resolve(r *http.Request, labelSelector, fieldSelector string) (watch.Target, func(), string, bool) {
	t, reason, ok := s.lists.ResolveWatch(r, labelSelector, fieldSelector)
	target := watch.Target{
		Resource: t.Resource, Format: t.Format, Type: t.Type, Store: t.Store,
		Namespace: t.Namespace, Match: t.Match, Wake: t.Wake, Consistent: t.Consistent, Reject: t.Reject,
		Warnings: t.Warnings, Admit: t.Admit,
		NotOlderThan: t.NotOlderThan, Holds: t.Holds,
		WatchListDefaults: t.WatchListDefaults, WatchListGzip: t.WatchListGzip,
	}
	return target, t.Release, reason, ok
}
