package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

func TestExtractMeta(t *testing.T) {
	labels := func(idx string) map[string]string { return map[string]string{"app": "demo", "idx": idx} }
	wantPods := map[string]Meta{
		"p1": {Namespace: "wire", Name: "p1", ResourceVersion: "250", Labels: labels("1")},
		"p2": {Namespace: "wire", Name: "p2", ResourceVersion: "208", Labels: labels("2")},
		"p3": {Namespace: "wire", Name: "p3", ResourceVersion: "209", Labels: labels("3")},
	}
	wantWidgets := map[string]Meta{
		"w1": {Namespace: "wire", Name: "w1", ResourceVersion: "251", Labels: labels("1")},
		"w2": {Namespace: "wire", Name: "w2", ResourceVersion: "218", Labels: labels("2")},
		"w3": {Namespace: "wire", Name: "w3", ResourceVersion: "219", Labels: labels("3")},
	}
	tests := []struct {
		file string
		want map[string]Meta
	}{
		{"pods.json", wantPods},
		{"pods.pb", wantPods},
		{"pods-meta.json", wantPods},
		{"pods-meta.pb", wantPods},
		{"widgets.json", wantWidgets},
		{"widgets-meta.json", wantWidgets},
		{"widgets-meta.pb", wantWidgets},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			_, items := decodeGolden(t, tc.file)
			got := make(map[string]Meta)
			for _, it := range items {
				m, err := ExtractMeta(formatOf(tc.file), it)
				if err != nil {
					t.Fatal(err)
				}
				got[m.Name] = m
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// ExtractMetaUID reads the same object's uid from every representation,
// and what ExtractMeta reads besides.
func TestExtractMetaUID(t *testing.T) {
	uids := map[string]map[string]string{} // kind: name: uid
	for _, file := range []string{"pods.json", "pods.pb", "pods-meta.json", "pods-meta.pb", "widgets.json", "widgets-meta.json", "widgets-meta.pb"} {
		t.Run(file, func(t *testing.T) {
			kind := strings.SplitN(strings.TrimSuffix(strings.TrimSuffix(file, ".json"), ".pb"), "-", 2)[0]
			_, items := decodeGolden(t, file)
			for _, it := range items {
				want, err := ExtractMeta(formatOf(file), it)
				if err != nil {
					t.Fatal(err)
				}
				got, uid, err := ExtractMetaUID(formatOf(file), it)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: Meta (-ExtractMeta +ExtractMetaUID):\n%s", want.Name, diff)
				}
				if uid == "" {
					t.Errorf("%s: no uid", want.Name)
				}
				if uids[kind] == nil {
					uids[kind] = map[string]string{}
				}
				if seen, ok := uids[kind][want.Name]; ok && seen != uid {
					t.Errorf("%s: uid %q, %q in another representation", want.Name, uid, seen)
				}
				uids[kind][want.Name] = uid
			}
		})
	}
}

func TestExtractMetaSynthetic(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    Meta
		wantErr error
	}{
		{"escaped_values", `{"metadata":{"name":"a\u0062","namespace":"n","labels":{"k\"":"v\\"}}}`, Meta{Name: "ab", Namespace: "n", Labels: map[string]string{`k"`: `v\`}}, nil},
		{"escaped_key", `{"meta\u0064ata":{"na\u006de":"x"}}`, Meta{Name: "x"}, nil},
		{"metadata_not_first", `{"spec":{"metadata":{"name":"wrong"}},"metadata":{"name":"right"}}`, Meta{Name: "right"}, nil},
		{"whitespace", "{ \"metadata\" : { \"name\" : \"x\" , \"labels\" : { } } }", Meta{Name: "x"}, nil},
		{"null_metadata", `{"metadata":null}`, Meta{}, nil},
		{"no_metadata", `{}`, Meta{}, nil},
		{"nulls", `{"metadata":{"name":null,"labels":null}}`, Meta{}, nil},
		{"not_object", `[]`, Meta{}, ErrMalformed},
		{"truncated", `{"metadata":{"name":"x"`, Meta{}, ErrMalformed},
		{"label_not_string", `{"metadata":{"labels":{"a":1}}}`, Meta{}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractMeta(JSON, []byte(tc.raw))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractFields(t *testing.T) {
	podPaths := []FieldPath{
		{Path: "metadata.name"}, {Path: "metadata.namespace"}, {Path: "spec.nodeName"},
		{Path: "spec.hostNetwork", Bool: true}, {Path: "status.phase"}, {Path: "spec.terminationGracePeriodSeconds"},
		{Path: "spec.serviceAccountName"}, {Path: "status.nominatedNodeName"},
	}
	pod := func(name, node, hostNetwork string) map[string]string {
		return map[string]string{
			"metadata.name": name, "metadata.namespace": "wire", "spec.nodeName": node,
			"spec.hostNetwork": hostNetwork, "status.phase": "Pending", "spec.terminationGracePeriodSeconds": "30",
			"spec.serviceAccountName": "default", "status.nominatedNodeName": "",
		}
	}
	wantPods := map[string]map[string]string{
		"p1": pod("p1", "node-1", "false"),
		"p2": pod("p2", "node-2", "true"),
		"p3": pod("p3", "node-3", "false"),
	}
	metaPaths := []FieldPath{{Path: "metadata.name"}, {Path: "metadata.namespace"}}
	wantMeta := func(names ...string) map[string]map[string]string {
		m := make(map[string]map[string]string)
		for _, n := range names {
			m[n] = map[string]string{"metadata.name": n, "metadata.namespace": "wire"}
		}
		return m
	}
	widgetPaths := []FieldPath{{Path: "spec.size"}, {Path: "spec.zeta"}, {Path: "spec.unicode"}, {Path: "spec.missing"}, {Path: "spec.flag", Bool: true}, {Path: "metadata.name"}}
	widget := func(name, size string) map[string]string {
		return map[string]string{"spec.size": size, "spec.zeta": "z", "spec.unicode": "héllo <&> \u2028", "spec.missing": "", "spec.flag": "false", "metadata.name": name}
	}
	tests := []struct {
		file  string
		gvk   schema.GroupVersionKind
		paths []FieldPath
		want  map[string]map[string]string
	}{
		{"pods.json", podGVK, podPaths, wantPods},
		{"pods.pb", podGVK, podPaths, wantPods},
		{"pods-meta.json", podGVK, metaPaths, wantMeta("p1", "p2", "p3")},
		{"pods-meta.pb", podGVK, metaPaths, wantMeta("p1", "p2", "p3")},
		{"widgets.json", widgetListGVK.GroupVersion().WithKind("Widget"), widgetPaths, map[string]map[string]string{"w1": widget("w1", "1"), "w2": widget("w2", "2"), "w3": widget("w3", "3")}},
		{"widgets-meta.pb", widgetListGVK.GroupVersion().WithKind("Widget"), metaPaths, wantMeta("w1", "w2", "w3")},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			_, items := decodeGolden(t, tc.file)
			got := make(map[string]map[string]string)
			for _, it := range items {
				m, err := ExtractMeta(formatOf(tc.file), it)
				if err != nil {
					t.Fatal(err)
				}
				fields, err := ExtractFields(formatOf(tc.file), tc.gvk, it, tc.paths)
				if err != nil {
					t.Fatal(err)
				}
				got[m.Name] = fields
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractFieldsErrors(t *testing.T) {
	_, pods := decodeGolden(t, "pods.pb")
	tests := []struct {
		name    string
		f       Format
		gvk     schema.GroupVersionKind
		raw     []byte
		paths   []FieldPath
		wantErr error
	}{
		{"json_object_value", JSON, podGVK, []byte(`{"spec":{"a":{}}}`), []FieldPath{{Path: "spec.a"}}, ErrMalformed},
		{"json_array_value", JSON, podGVK, []byte(`{"spec":{"a":[1]}}`), []FieldPath{{Path: "spec.a"}}, ErrMalformed},
		{"json_garbage", JSON, podGVK, []byte(`{"spec":`), []FieldPath{{Path: "spec.a"}}, ErrMalformed},
		{"proto_unregistered", Protobuf, schema.GroupVersionKind{Group: "demo.listproxy.io", Version: "v1", Kind: "Widget"}, pods[0], []FieldPath{{Path: "spec.a"}}, ErrUnsupported},
		{"proto_object_value", Protobuf, podGVK, pods[0], []FieldPath{{Path: "spec.securityContext"}}, ErrMalformed},
		{"proto_garbage", Protobuf, podGVK, []byte{0xff, 0xff}, []FieldPath{{Path: "spec.nodeName"}}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ExtractFields(tc.f, tc.gvk, tc.raw, tc.paths)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}
