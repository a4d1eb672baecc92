package snapshottest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/listproxy/listproxy/pkg/snapshot"
)

var nodeName = snapshot.NewFieldNames("spec.nodeName")

func entry(ns, name string, rv uint64, node string) *snapshot.Entry {
	return snapshot.NewEntry(ns, name, rv, map[string]string{"app": name}, nodeName, []string{node},
		[]byte(fmt.Sprintf(`{"n":%q,"rv":%d}`, name, rv)))
}

func TestCorrupt(t *testing.T) {
	s := snapshot.NewStore(snapshot.StoreConfig{IndexField: "spec.nodeName", History: 1 << 40})
	if err := Corrupt(s, nil, nil); !errors.Is(err, snapshot.ErrNotSynced) {
		t.Fatalf("Corrupt before sync = %v, want ErrNotSynced", err)
	}
	s.Replace([]*snapshot.Entry{entry("a", "p1", 1, "n1"), entry("a", "p2", 2, "n2"), entry("b", "p1", 3, "n1")}, 10)
	s.MarkProgress(12)
	before, _, _ := s.Latest()

	if err := Corrupt(s, []string{"a/p1", "a/missing"}, nil); err == nil {
		t.Fatal("Corrupt of a missing key succeeded")
	}
	if err := Corrupt(s, nil, map[string]uint64{"a/missing": 5}); err == nil {
		t.Fatal("Corrupt of a missing key's resourceVersion succeeded")
	}
	if latest, _, _ := s.Latest(); latest != before {
		t.Fatal("a failed Corrupt changed the store")
	}
	if err := Corrupt(s, []string{"a/p1"}, map[string]uint64{"b/p1": 99}); err != nil {
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
	list := func(snap *snapshot.Snapshot) []kv {
		var out []kv
		snap.Ascend(func(e *snapshot.Entry) bool { out = append(out, kv{e.Key, e.RV}); return true })
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
	var indexed []string
	for _, e := range snap.Page(snapshot.PageRequest{IndexValue: &n1}).Items {
		indexed = append(indexed, e.Key)
	}
	if !cmp.Equal(indexed, []string{"b/p1"}) {
		t.Errorf("index scan = %v, want [b/p1]", indexed)
	}

	// Later changes apply on top of the corruption.
	s.Apply(snapshot.Change{Entry: entry("c", "p1", 13, "n1")}, 13)
	snap, _, _ = s.Latest()
	if diff := cmp.Diff([]kv{{"a/p2", 2}, {"b/p1", 99}, {"c/p1", 13}}, list(snap)); diff != "" {
		t.Errorf("after Apply (-want +got):\n%s", diff)
	}
}
