package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

func TestStoreDiff(t *testing.T) {
	pod := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	list := func(pods ...*corev1.Pod) listView {
		v := listView{rv: "100"}
		for _, p := range pods {
			v.items = append(v.items, runtime.Object(p))
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		store    []*corev1.Pod
		want     listView
		wantDiff bool
	}{
		{name: "equal", store: []*corev1.Pod{pod("a", "1"), pod("b", "2")}, want: list(pod("a", "1"), pod("b", "2"))},
		{name: "both empty", want: list()},
		{name: "older resourceVersion", store: []*corev1.Pod{pod("a", "1"), pod("b", "2")}, want: list(pod("a", "1"), pod("b", "3")), wantDiff: true},
		{name: "missing pod", store: []*corev1.Pod{pod("a", "1"), pod("c", "2")}, want: list(pod("a", "1"), pod("b", "2")), wantDiff: true},
		{name: "extra pod", store: []*corev1.Pod{pod("a", "1"), pod("b", "2")}, want: list(pod("a", "1")), wantDiff: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			for _, p := range tc.store {
				if err := store.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := storeDiff(store, tc.want); (err != nil) != tc.wantDiff {
				t.Errorf("storeDiff() = %v, want a difference: %v", err, tc.wantDiff)
			}
		})
	}
}
