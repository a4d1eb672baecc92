package lists

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/listproxy/listproxy/pkg/admission"
	"github.com/listproxy/listproxy/pkg/paging"
	"github.com/listproxy/listproxy/pkg/snapshot"
)

// admit admits a response for writing (Config.Admission) and selects its
// page with pageFn. The response weighs estimate, or, when that is
// negative, exactly its page's item bytes, selected first: without
// selectors the weight is known before the page is selected
// (estimateWeight), so a queued or rejected full list costs nothing; with
// selectors it is measured on the selected page. A response that must wait
// holds no page meanwhile (one selected for its weight is dropped and
// selected again once admitted: pageFn reads an immutable snapshot, so it
// is the same page). On rejection admit returns the 429 to answer with;
// otherwise the caller must release the slot.
func (l *Lists) admit(ctx context.Context, estimate int64, pageFn func() (snapshot.Page, int64)) (snapshot.Page, int64, *admission.Slot, *apierrors.StatusError) {
	var page snapshot.Page
	var total int64
	selected := false
	weight := estimate
	if weight < 0 {
		page, total = pageFn()
		weight, selected = itemBytes(page.Items), true
	}
	slot, status := l.admission.Admit(ctx, weight, func() { page, selected = snapshot.Page{}, false })
	if status != nil {
		return snapshot.Page{}, 0, nil, status
	}
	if !selected {
		page, total = pageFn()
	}
	return page, total, slot, nil
}

// estimateWeight is the weight of a response without selectors, known
// without selecting its page: the items it will hold (the namespace's or all
// objects, less those returned on earlier pages, up to the limit) times the
// snapshot's mean object size; for a full list, its exact item bytes. It is
// -1 when selectors decide the items.
func (l *Lists) estimateWeight(req listRequest, d paging.Decision, token paging.Token, snap *snapshot.Snapshot) int64 {
	objects := int64(snap.Len())
	if req.Selective || objects == 0 {
		return -1
	}
	items := int64(snap.Count(req.Namespace))
	if d.Action == paging.ServeContinue {
		items = max(0, token.Total-token.Returned)
	}
	if limit := int64(l.pageLimit(req, d)); limit > 0 {
		items = min(items, limit)
	}
	if items == objects {
		return snap.Bytes()
	}
	return items * (snap.Bytes() / objects)
}

// pageLimit is the most items a page holds; 0 is no limit. Upstream's
// watch cache ignores limit for resourceVersion="0" (LimitForRV0 honours
// it); a resource without one is read from etcd, which honours it.
func (l *Lists) pageLimit(req listRequest, d paging.Decision) int {
	if d.Action == paging.ServeLatest && !l.cfg.LimitForRV0 && !req.Resource.NoWatchCache {
		return 0
	}
	return int(req.query.limit)
}

func itemBytes(items []*snapshot.Entry) int64 {
	var n int64
	for _, e := range items {
		n += int64(len(e.Raw))
	}
	return n
}
