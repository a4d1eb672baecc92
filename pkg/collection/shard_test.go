package collection

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	shardparser "k8s.io/apiserver/pkg/sharding"

	"github.com/listproxy/listproxy/pkg/catalog"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Parse reads shardSelector with the apiserver's own parser: "" is none;
// one that parses makes the request selective; one that does not is the
// parser's error in ShardErr, for the servers to answer (the request
// stays one listproxy answers). On a resource of an aggregated API it
// passes through.
func TestParseShardSelector(t *testing.T) {
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	metrics := catalog.NewResource(schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "pods"}, "PodMetrics", true, false)
	metrics.Aggregated = true
	resources := catalog.NewStatic(pods, metrics)
	const valid = "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')"
	for _, tc := range []struct {
		name, path, shard string
		wantReason        string
		wantShard         string // canonical form; "" for none
		wantErr           bool
	}{
		{name: "none", path: "/api/v1/pods"},
		{name: "valid", path: "/api/v1/pods", shard: valid, wantShard: "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"},
		{name: "namespace_ors", path: "/api/v1/namespaces/a/pods", shard: "(shardRange(object.metadata.namespace,'0x0000000000000000','0x4000000000000000')||shardRange(object.metadata.namespace,'0x8000000000000000','0x10000000000000000'))",
			wantShard: "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"},
		{name: "blank", path: "/api/v1/pods", shard: "  ", wantErr: true},
		{name: "bogus", path: "/api/v1/pods", shard: "bogus", wantErr: true},
		{name: "name_key", path: "/api/v1/pods", shard: "shardRange(object.metadata.name,'0x0000000000000000','0x8000000000000000')", wantErr: true},
		{name: "short_hex", path: "/api/v1/pods", shard: "shardRange(object.metadata.uid,'0x0','0x8000000000000000')", wantErr: true},
		{name: "aggregated", path: "/apis/metrics.k8s.io/v1beta1/pods", shard: valid, wantReason: ReasonShardSelector},
		{name: "aggregated_invalid", path: "/apis/metrics.k8s.io/v1beta1/pods", shard: "bogus", wantReason: ReasonShardSelector},
		{name: "aggregated_none", path: "/apis/metrics.k8s.io/v1beta1/pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.path+"?shardSelector="+url.QueryEscape(tc.shard), nil)
			req, reason, ok := Parse(r, resources, List, "", "", tc.shard)
			if reason != tc.wantReason || ok != (tc.wantReason == "") {
				t.Fatalf("Parse: reason %q ok %v, want reason %q", reason, ok, tc.wantReason)
			}
			if !ok {
				return
			}
			_, parseErr := shardparser.Parse(tc.shard)
			switch {
			case tc.wantErr:
				if req.ShardErr == nil || req.ShardErr.Error() != parseErr.Error() || req.Shard != nil {
					t.Errorf("ShardErr %v, Shard %v; want the parser's error %v", req.ShardErr, req.Shard, parseErr)
				}
			case tc.wantShard == "":
				if req.Shard != nil || req.ShardErr != nil || req.Selective {
					t.Errorf("Shard %v, ShardErr %v, Selective %v; want none", req.Shard, req.ShardErr, req.Selective)
				}
			default:
				if req.ShardErr != nil || req.Shard == nil || req.Shard.String() != tc.wantShard || !req.Selective {
					t.Errorf("Shard %v, ShardErr %v, Selective %v; want %s", req.Shard, req.ShardErr, req.Selective, tc.wantShard)
				}
			}
		})
	}
}

// shardPod is a pod with a random uid in one of a few namespaces.
func shardPod(rng *rand.Rand, i int) *corev1.Pod {
	uid := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("pod-%d", i), Namespace: shardNamespaces[i%len(shardNamespaces)], UID: types.UID(uid),
		ResourceVersion: fmt.Sprint(i + 1), CreationTimestamp: metav1.NewTime(created),
	}}
}

var created = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

// shardNamespaces are namespaces whose hashes lie all over the hash space
// (names that differ in their last byte only hash close together).
var shardNamespaces = []string{"default", "kube-system", "team-a", "payments", "monitoring", "ingress", "batch-jobs"}

// shardEntries returns pod's entry in every representation a store holds
// it in: the apiserver's encodings of the pod and of its metadata, and a
// Table row (configmaps' rules: a row of name, data count and age) whose
// object is its metadata.
func shardEntries(t *testing.T, rules table.Rules, pod *corev1.Pod) map[wire.Format]*snapshot.Entry {
	t.Helper()
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: pod.ObjectMeta}
	jsonPod, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	protoPod, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	jsonMeta, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	protoMeta, err := meta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	entry := func(raw []byte) *snapshot.Entry {
		return snapshot.NewEntry(pod.Namespace, pod.Name, 1, nil, nil, nil, raw)
	}
	row := fmt.Appendf(nil, `{"cells":[%q,0,"90m"],"object":%s}`, pod.Name, jsonMeta)
	stored, _, parsed, err := rules.Parse(row, created.Add(90*time.Minute))
	if err != nil {
		t.Fatalf("Parse(%s): %v", row, err)
	}
	tableEntry := entry(stored)
	tableEntry.Extra = &stores.TableRow{Row: parsed}
	return map[wire.Format]*snapshot.Entry{
		wire.JSON: entry(jsonPod), wire.Protobuf: entry(protoPod),
		wire.MetaJSON: entry(jsonMeta), wire.MetaProtobuf: entry(protoMeta),
		wire.Table: tableEntry,
	}
}

// randomShard is a shard selector of one to three random ranges of the
// hash space on key.
func randomShard(rng *rand.Rand, key string) string {
	sel := ""
	for i := range 1 + rng.IntN(3) {
		a, b := rng.Uint64(), rng.Uint64()
		if a > b {
			a, b = b, a
		}
		end := fmt.Sprintf("0x%016x", b)
		if rng.IntN(4) == 0 {
			end = "0x10000000000000000"
		}
		if i > 0 {
			sel += " || "
		}
		sel += fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", key, a, end)
	}
	return sel
}

// Match puts an object in a shard exactly when the apiserver's selector
// does for the whole object (sharding.Selector.Matches on the decoded pod,
// which hashes its uid or namespace), whichever representation the entry
// holds: the uid is read from the stored bytes (a Table row's object).
// Half of the pods fall in a half of the hash space, so a wrong key or a
// wrong uid disagrees on about half of them.
func TestShardMatch(t *testing.T) {
	rules, ok := table.For(37, schema.GroupResource{Resource: "configmaps"})
	if !ok {
		t.Fatal("no Table rules for configmaps on 1.37")
	}
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	rng := rand.New(rand.NewPCG(1, 2))
	objects := make([]*corev1.Pod, 200)
	entries := make([]map[wire.Format]*snapshot.Entry, len(objects))
	for i := range objects {
		objects[i] = shardPod(rng, i)
		entries[i] = shardEntries(t, rules, objects[i])
	}
	selectors := []string{
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
		"shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')",
	}
	for range 20 {
		selectors = append(selectors, randomShard(rng, "object.metadata.uid"), randomShard(rng, "object.metadata.namespace"))
	}
	for _, s := range selectors {
		sel, err := shardparser.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		reqs := map[wire.Format]Request{}
		for f := range entries[0] {
			req := Request{Resource: pods, Format: f, Labels: labels.Everything(), Fields: fields.Everything()}
			req.parseShard(s)
			reqs[f] = req
		}
		in := 0
		for i, pod := range objects {
			want, err := sel.Matches(pod)
			if err != nil {
				t.Fatal(err)
			}
			if want {
				in++
			}
			for f, e := range entries[i] {
				if got := reqs[f].Match(e); got != want {
					t.Errorf("%s: %v entry of %s (uid %s): Match %v, the apiserver's selector %v", s, f, e.Key, pod.UID, got, want)
				}
			}
		}
		t.Logf("%s: %d of %d pods", s, in, len(objects))
	}
}

// A shard selector is ANDed with the label and field selectors, and keeps
// Match on a selection the pods' node index would otherwise select
// exactly.
func TestShardSelect(t *testing.T) {
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	fs, err := fields.ParseSelector("spec.nodeName=n1")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Resource: pods, Format: wire.JSON, Labels: labels.Everything(), Fields: fs, Selective: true}
	if sel := req.Select(true); sel.IndexValue == nil || sel.Match != nil {
		t.Fatalf("node selection without a shard: index %v, match %v; want the index alone", sel.IndexValue, sel.Match != nil)
	}
	req.parseShard("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
	if sel := req.Select(true); sel.IndexValue == nil || sel.Match == nil {
		t.Errorf("node selection with a shard: index %v, match %v; want the index and Match", sel.IndexValue, sel.Match != nil)
	}
	ls, err := labels.Parse("app=a")
	if err != nil {
		t.Fatal(err)
	}
	req = Request{Resource: pods, Format: wire.JSON, Labels: ls, Fields: fields.Everything(), Selective: true}
	req.parseShard("shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')") // every object
	labelled := snapshot.NewEntry("ns", "a", 1, map[string]string{"app": "a"}, nil, nil, []byte(`{"metadata":{"name":"a","namespace":"ns","uid":"u"}}`))
	other := snapshot.NewEntry("ns", "b", 1, map[string]string{"app": "b"}, nil, nil, []byte(`{"metadata":{"name":"b","namespace":"ns","uid":"u"}}`))
	if !req.Match(labelled) || req.Match(other) {
		t.Errorf("label selector with the whole hash space: Match(app=a) %v, Match(app=b) %v; want true, false", req.Match(labelled), req.Match(other))
	}
}

// ShardInfo echoes the canonical selector on built-in resources' JSON and
// protobuf lists only, as the apiserver's list types do.
func TestShardInfo(t *testing.T) {
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	widgets := catalog.NewResource(schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "widgets"}, "Widget", true, true)
	const canonical = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	for _, tc := range []struct {
		res    *catalog.Resource
		format wire.Format
		want   string
	}{
		{pods, wire.JSON, canonical},
		{pods, wire.Protobuf, canonical},
		{pods, wire.MetaJSON, ""},
		{pods, wire.MetaProtobuf, ""},
		{pods, wire.Table, ""},
		{widgets, wire.JSON, ""},
		{widgets, wire.MetaJSON, ""},
	} {
		req := Request{Resource: tc.res, Format: tc.format}
		if got := req.ShardInfo(); got != "" {
			t.Errorf("%s %v without a shard selector: ShardInfo %q", tc.res.GVR.Resource, tc.format, got)
		}
		req.parseShard("shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')")
		if got := req.ShardInfo(); got != tc.want {
			t.Errorf("%s %v: ShardInfo %q, want %q", tc.res.GVR.Resource, tc.format, got, tc.want)
		}
	}
}

// A gzip response caches its chunks for the whole collection without a
// selector, for one shard (under the shard's key) with a shard selector
// alone, and not at all with any other selector, a shard's included.
func TestShardGzipCache(t *testing.T) {
	const shard = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	pods := catalog.NewResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true, false)
	app, err := labels.Parse("app=a")
	if err != nil {
		t.Fatal(err)
	}
	node, err := fields.ParseSelector("spec.nodeName=n1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels labels.Selector
		fields fields.Selector
		shard  string
		want   snapshot.GzipCache
	}{
		{name: "no selector", want: snapshot.GzipCache{Build: true}},
		{name: "a shard alone", shard: shard, want: snapshot.GzipCache{Build: true, Key: snapshot.GzipKey(shard)}},
		{name: "a label selector", labels: app},
		{name: "a field selector", fields: node},
		{name: "a shard and a label selector", labels: app, shard: shard},
		{name: "a shard and a field selector", fields: node, shard: shard},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Resource: pods, Format: wire.JSON, Labels: labels.Everything(), Fields: fields.Everything()}
			if tc.labels != nil {
				req.Labels = tc.labels
			}
			if tc.fields != nil {
				req.Fields = tc.fields
			}
			req.parseShard(tc.shard)
			req.Selective = !req.Labels.Empty() || !req.Fields.Empty() || req.Shard != nil
			if got := req.GzipCache(); got != tc.want {
				t.Errorf("GzipCache() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
