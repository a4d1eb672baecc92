package snapshot

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
)

// pagedLister lists pages[i] for the continue token "i" (the first page for
// ""), then ends at rv.
type pagedLister struct {
	rv    string
	pages [][]string
}

func (l *pagedLister) List(_ context.Context, _ int64, token string, item func([]byte) error) (ListResult, error) {
	i := 0
	if token != "" {
		i, _ = strconv.Atoi(token)
	}
	for _, it := range l.pages[i] {
		if err := item([]byte(it)); err != nil {
			return ListResult{}, err
		}
	}
	res := ListResult{ResourceVersion: l.rv}
	if i+1 < len(l.pages) {
		res.Continue = strconv.Itoa(i + 1)
	}
	return res, nil
}

// TestFeederPacksEachListedPage: Pack gets each page's items in list order,
// and the store keeps what it returned as the entries' bytes.
func TestFeederPacksEachListedPage(t *testing.T) {
	lister := &pagedLister{rv: "20", pages: [][]string{{"ns/a/1", "ns/b/2"}, {"ns/c/3"}}}
	h := newFeederHarness(t, -1)
	h.feeder.cfg.Warm = lister

	var mu sync.Mutex
	var pages [][]string
	packed := map[string][]byte{}
	h.feeder.cfg.Pack = func(items [][]byte) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		var page []string
		out := make([][]byte, len(items))
		for i, it := range items {
			page = append(page, string(it))
			out[i] = bytes.Clone(it)
			packed[string(it)] = out[i]
		}
		pages = append(pages, page)
		return out
	}
	h.run(t)
	if w := h.nextWatch(t); w.rv != "20" {
		t.Fatalf("first watch from %q, want the list's resourceVersion 20", w.rv)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(pages) != 2 || len(pages[0]) != 2 || pages[0][1] != "ns/b/2" || len(pages[1]) != 1 {
		t.Fatalf("Pack saw pages %q, want the two listed pages in order", pages)
	}
	snap, _, _ := h.store.Latest()
	snap.Ascend(func(e *Entry) bool {
		if want := packed[string(e.Raw)]; &want[0] != &e.Raw[0] {
			t.Errorf("entry %s holds bytes other than the packed ones", e.Key)
		}
		return true
	})
}
