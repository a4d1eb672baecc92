package stores

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Bounds on what a store keeps per pod beside the pod's bytes: the entry,
// its key, labels and selector fields, a Table row's clock cells, and the
// trees and spec.nodeName index (TestEntryOverhead). They hold what was
// measured (340 and 276 B, 2026-11-27) with a little room, so that any
// word added to every entry fails; the target for a Table row of the
// bench's pods (3.4 KiB) is 10% of it, 340 B.
const (
	tableEntryOverheadMax = 350
	jsonEntryOverheadMax  = 285
)

// TestEntryOverhead holds the heap a store of pods keeps per entry beside
// the entries' bytes to its bound, for the Table store (rows fed with
// includeObject=Object, cut to their PartialObjectMetadata) and the JSON
// store, with entries built and packed as the stores build them.
func TestEntryOverhead(t *testing.T) {
	const n = 20000
	info := &catalog.Resource{
		GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", Namespaced: true,
		Fields: catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false).Fields,
	}
	var ok bool
	info.Table, ok = table.For(37, info.GVR.GroupResource())
	if !ok {
		t.Fatal("no Table rules for pods on 1.37")
	}
	created := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	received := created.Add(30 * time.Second)
	pods := make([][]byte, n)
	rows := make([][]byte, n)
	for i := range pods {
		pods[i], rows[i] = overheadPod(t, i, created)
	}
	feed := &tableFeed{rules: info.Table}
	feed.setColumns([]byte(`[{"name":"Name"}]`))
	tableEntry := newTableExtractor(info, feed, func() time.Time { return received }, nil, func(err error) { t.Fatal(err) })
	jsonEntry := newEntryMaker(info, wire.JSON)

	for _, tc := range []struct {
		name   string
		format wire.Format
		max    float64
		entry  func(i int) (*snapshot.Entry, error)
	}{
		{name: "table", format: wire.Table, max: tableEntryOverheadMax, entry: func(i int) (*snapshot.Entry, error) { return tableEntry(rows[i]) }},
		{name: "json", format: wire.JSON, max: jsonEntryOverheadMax, entry: func(i int) (*snapshot.Entry, error) { return jsonEntry(pods[i], pods[i]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := liveHeap()
			store := snapshot.NewStore(snapshot.StoreConfig{
				IndexField: "spec.nodeName",
				Pack:       func(items [][]byte) [][]byte { return wire.PackItems(tc.format, items) },
			})
			// The entries' slice is gone once the store holds them.
			func() {
				entries := make([]*snapshot.Entry, n)
				for i := range entries {
					e, err := tc.entry(i)
					if err != nil {
						t.Fatal(err)
					}
					entries[i] = e
				}
				store.Replace(entries, 1)
			}()
			after := liveHeap()
			latest, _, err := store.Latest()
			if err != nil {
				t.Fatal(err)
			}
			payload := latest.Bytes()
			perEntry := float64(int64(after-before)-payload) / n
			t.Logf("%d pods, %.0f B each: %.0f B per entry beside its bytes (%.3f× the payload)",
				n, float64(payload)/n, perEntry, float64(after-before)/float64(payload))
			if perEntry > tc.max {
				t.Errorf("a store of pods keeps %.0f B per entry beside its bytes, want ≤ %.0f", perEntry, tc.max)
			}
			runtime.KeepAlive(store)
		})
	}
	runtime.KeepAlive(pods)
	runtime.KeepAlive(rows)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// overheadPod returns a running pod of a Deployment, like the bench's,
// as JSON and as the row of a Table with includeObject=Object.
func overheadPod(t *testing.T, i int, created time.Time) (pod, row []byte) {
	app := fmt.Sprintf("app-%d", i%50)
	hash := fmt.Sprintf("%08x", i%200)
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("%s-%s-%05d", app, hash, i),
			Namespace:         fmt.Sprintf("team-%d-prod", i%20),
			UID:               "4b1e2a3c-0000-4000-8000-000000000000",
			ResourceVersion:   fmt.Sprint(1000 + i),
			CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				"app.kubernetes.io/name":     app,
				"app.kubernetes.io/instance": "team-" + app,
				"app.kubernetes.io/version":  fmt.Sprintf("v2.%d.%d", i%40, i%10),
				"app.kubernetes.io/part-of":  "team",
				"pod-template-hash":          hash,
				"team":                       "team",
			},
		},
		Spec: corev1.PodSpec{
			NodeName:           fmt.Sprintf("node-%04d", i%500),
			RestartPolicy:      corev1.RestartPolicyAlways,
			SchedulerName:      "default-scheduler",
			ServiceAccountName: "default",
			Containers:         []corev1.Container{{Name: app, Image: "registry.example/" + app + ":v2"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: app, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created)}},
			}},
		},
	}
	pod, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := json.Marshal([]any{p.Name, "1/1", "Running", "0", "30s", p.Status.PodIP, p.Spec.NodeName, "<none>", "<none>"})
	if err != nil {
		t.Fatal(err)
	}
	row = fmt.Appendf(nil, `{"cells":%s,"object":%s}`, cells, pod)
	return pod, row
}
