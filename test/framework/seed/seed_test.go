package seed_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

func TestSeed(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := cp.Clientset(framework.UserAdmin)
	opts := seed.Options{Workers: 4}

	nss := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	}
	if err := seed.Namespaces(ctx, cp, nss, opts); err != nil {
		t.Fatal(err)
	}
	if ns, err := client.CoreV1().Namespaces().Get(ctx, "a", metav1.GetOptions{}); err != nil || ns.Labels["team"] != "x" {
		t.Errorf("namespace a = %v, %v; want label team=x", ns.Labels, err)
	}

	t.Run("pods_repeatable_with_progress", func(t *testing.T) {
		var pods []*corev1.Pod
		for i := range 10 {
			pods = append(pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: nss[i%2].Name, Name: fmt.Sprintf("p-%d", i)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			})
		}
		var created atomic.Int64
		o := opts
		o.FieldManager = "seed-test"
		o.Created = func() { created.Add(1) }
		for range 2 { // the second run finds every pod there
			if err := seed.Pods(ctx, client, pods, o); err != nil {
				t.Fatal(err)
			}
		}
		if got := created.Load(); got != 20 {
			t.Errorf("Created called %d times, want 20", got)
		}
		list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 10 {
			t.Fatalf("listed %d pods, %v; want 10", len(list.Items), err)
		}
		if m := list.Items[0].ManagedFields; len(m) == 0 || m[0].Manager != "seed-test" {
			t.Errorf("managed fields %+v, want manager seed-test", m)
		}
	})

	t.Run("error_names_object", func(t *testing.T) {
		cms := []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "missing", Name: "cm"}}}
		err := seed.ConfigMaps(ctx, client, cms, opts)
		if err == nil || !strings.Contains(err.Error(), "create configmap missing/cm") {
			t.Errorf("ConfigMaps in a missing namespace = %v, want an error naming missing/cm", err)
		}
	})

	t.Run("ready_nodes", func(t *testing.T) {
		capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
		nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Capacity: capacity}}}
		if err := seed.ReadyNodes(ctx, client, nodes, opts); err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if !ready || len(n.Spec.Taints) != 0 || !n.Status.Capacity.Pods().Equal(resource.MustParse("110")) {
			t.Errorf("node n1: conditions %+v, taints %+v, capacity %v; want Ready, untainted, 110 pods", n.Status.Conditions, n.Spec.Taints, n.Status.Capacity)
		}
	})

	t.Run("widgets", func(t *testing.T) {
		for range 2 { // installing again is a no-op
			if err := seed.InstallWidgetCRD(ctx, cp.AdminConfig); err != nil {
				t.Fatal(err)
			}
		}
		dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
		widgets := []*unstructured.Unstructured{
			seed.Widget("a", "w1", map[string]string{"app": "x"}, "red", 3),
			seed.Widget("b", "w2", nil, "blue", 4),
		}
		if err := seed.Widgets(ctx, dyn, widgets, opts); err != nil {
			t.Fatal(err)
		}
		list, err := dyn.Resource(seed.WidgetGVR).List(ctx, metav1.ListOptions{FieldSelector: "spec.color=red"})
		if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "w1" || list.Items[0].GetLabels()["app"] != "x" {
			t.Fatalf("red widgets = %+v, %v; want w1 labelled app=x", list, err)
		}
		if size, _, _ := unstructured.NestedInt64(list.Items[0].Object, "spec", "size"); size != 3 {
			t.Errorf("w1 size = %d, want 3", size)
		}
	})
}
