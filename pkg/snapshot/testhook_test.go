package snapshot

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCorruptForTest(t *testing.T) {
	s := NewStore(StoreConfig{IndexField: "spec.nodeName", History: 1 << 40})
	if err := s.CorruptForTest(nil, nil); !errors.Is(err, ErrNotSynced) {
		t.Fatalf("CorruptForTest before sync = %v, want ErrNotSynced", err)
	}
	s.Replace([]*Entry{entry("a", "p1", 1, "n1"), entry("a", "p2", 2, "n2"), entry("b", "p1", 3, "n1")}, 10)
	s.MarkProgress(12)
	before, _, _ := s.Latest()

	if err := s.CorruptForTest([]string{"a/p1", "a/missing"}, nil); err == nil {
		t.Fatal("CorruptForTest of a missing key succeeded")
	}
	if err := s.CorruptForTest([]string{"a/p1"}, map[string]uint64{"b/p1": 99}); err != nil {
		t.Fatal(err)
	}
	snap, progress, err := s.Latest()
	if err != nil || progress != 12 || snap.RV() != 10 {
		t.Fatalf("Latest() = rv %d progress %d, %v; want 10, 12, nil", snap.RV(), progress, err)
	}
	type kv struct {
		Key string
		RV  uint64
	}
	list := func(snap *Snapshot) []kv {
		var out []kv
		snap.Ascend(func(e *Entry) bool { out = append(out, kv{e.Key, e.RV}); return true })
		return out
	}
	if diff := cmp.Diff([]kv{{"a/p2", 2}, {"b/p1", 99}}, list(snap)); diff != "" {
		t.Errorf("corrupted snapshot (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]kv{{"a/p1", 1}, {"a/p2", 2}, {"b/p1", 3}}, list(before)); diff != "" {
		t.Errorf("earlier snapshot changed (-want +got):\n%s", diff)
	}
	if at, err := s.At(11); err != nil || at != snap {
		t.Errorf("At(11) = %p, %v; want the corrupted snapshot %p", at, err, snap)
	}
	n1 := "n1"
	if got := keys(snap.Page(PageRequest{IndexValue: &n1})); !cmp.Equal(got, []string{"b/p1"}) {
		t.Errorf("index scan = %v, want [b/p1]", got)
	}

	// Later changes apply on top of the corruption.
	s.Apply(Change{Entry: entry("c", "p1", 13, "n1")}, 13)
	snap, _, _ = s.Latest()
	if diff := cmp.Diff([]kv{{"a/p2", 2}, {"b/p1", 99}, {"c/p1", 13}}, list(snap)); diff != "" {
		t.Errorf("after Apply (-want +got):\n%s", diff)
	}
}
