package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

var widgetGVR = seed.WidgetGVR

// createWidgetCRD installs the demo CRD (seed.WidgetCRD), with a selectable
// field spec.color, and waits until it is served.
func createWidgetCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	if err := seed.InstallWidgetCRD(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// world is the set of objects the tests create and churn.
type world struct {
	cs         *kubernetes.Clientset
	dyn        dynamic.Interface
	namespaces []string
	nodes      int
	mu         sync.Mutex
	pods       map[string][]string // namespace -> pod names alive (approximately)
	next       int
}

var colors = []string{"red", "green", "blue", "yellow"}

func newPod(ns, name string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"app": []string{"a", "b", "c"}[i%3], "tier": []string{"x", "y"}[i%2], "idx": fmt.Sprint(i % 10),
		}, Annotations: map[string]string{"note": "<&> \u2028 unicode ✓"}},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%d", i%8),
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "I", Value: fmt.Sprint(i)}}}},
		},
	}
}

// startWithNamespace starts a control plane and creates namespace ns in it.
// ctx is the test's context, bounded by timeout when it is not zero; it
// ends when the test does, before its clean-ups (listproxy's, the control
// plane's) run.
func startWithNamespace(t *testing.T, ns string, timeout time.Duration) (*framework.ControlPlane, context.Context) {
	t.Helper()
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := t.Context()
	if timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		t.Cleanup(cancel)
	}
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	return cp, ctx
}

// createNamespaceWithPods creates namespace ns holding n pods named
// pod-0 … pod-(n-1) (newPod).
func createNamespaceWithPods(ctx context.Context, t *testing.T, cp *framework.ControlPlane, ns string, n int) {
	t.Helper()
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	cs := cp.Clientset(framework.UserAdmin)
	for i := range n {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("pod-%d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func newWidget(ns, name string, i int) *unstructured.Unstructured {
	return seed.Widget(ns, name, map[string]string{"app": []string{"a", "b", "c"}[i%3]}, colors[i%len(colors)], int64(i))
}

// seedWorld creates namespaces, nodes, pods and widgets (seed).
func seedWorld(t *testing.T, cp *framework.ControlPlane, namespaces, podsPerNS, widgetsPerNS, nodes int) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{cs: cp.Clientset(framework.UserAdmin), dyn: dynamic.NewForConfigOrDie(cp.AdminConfig), nodes: nodes, pods: map[string][]string{}}
	var (
		nss         []*corev1.Namespace
		nodeObjects []*corev1.Node
		pods        []*corev1.Pod
		widgets     []*unstructured.Unstructured
	)
	for i := 0; i < namespaces; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": fmt.Sprint(i % 2)}}})
		w.namespaces = append(w.namespaces, ns)
	}
	for i := 0; i < nodes; i++ {
		nodeObjects = append(nodeObjects, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"app": "node"}},
			Spec:       corev1.NodeSpec{Unschedulable: i%3 == 0},
		})
	}
	for _, ns := range w.namespaces {
		for i := 0; i < podsPerNS; i++ {
			name := fmt.Sprintf("pod-%d", i)
			w.pods[ns] = append(w.pods[ns], name)
			pods = append(pods, newPod(ns, name, i))
		}
		for i := 0; i < widgetsPerNS; i++ {
			widgets = append(widgets, newWidget(ns, fmt.Sprintf("widget-%d", i), i))
		}
	}
	w.next = podsPerNS
	opts := seed.Options{Workers: 16}
	if err := seed.Namespaces(ctx, cp, nss, opts); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	for _, err := range []error{
		seed.Nodes(ctx, w.cs, nodeObjects, opts),
		seed.Pods(ctx, w.cs, pods, opts),
		seed.Widgets(ctx, w.dyn, widgets, opts),
	} {
		if err != nil {
			t.Fatalf("seeding: %v", err)
		}
	}
	return w
}

// churn creates, updates and deletes pods, widgets and nodes at about rate
// writes per second until ctx is done. It returns the number of writes.
func (w *world) churn(ctx context.Context, rate int, rng *rand.Rand) int {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	writes := 0
	for {
		select {
		case <-ctx.Done():
			return writes
		case <-tick.C:
		}
		if err := w.write(ctx, rng); err == nil {
			writes++
		}
	}
}

func (w *world) write(ctx context.Context, rng *rand.Rand) error {
	ns := w.namespaces[rng.IntN(len(w.namespaces))]
	w.mu.Lock()
	names := w.pods[ns]
	w.mu.Unlock()
	switch op := rng.IntN(10); {
	case op < 3: // create a pod
		w.mu.Lock()
		i := w.next
		w.next++
		name := fmt.Sprintf("pod-%d", i)
		w.pods[ns] = append(w.pods[ns], name)
		w.mu.Unlock()
		_, err := w.cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, name, i), metav1.CreateOptions{})
		return err
	case op < 5 && len(names) > 0: // delete a pod
		k := rng.IntN(len(names))
		name := names[k]
		w.mu.Lock()
		w.pods[ns] = append(append([]string(nil), names[:k]...), names[k+1:]...)
		w.mu.Unlock()
		err := w.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case op < 8 && len(names) > 0: // relabel a pod
		name := names[rng.IntN(len(names))]
		patch := fmt.Sprintf(`{"metadata":{"labels":{"app":%q,"idx":"%d"}}}`, []string{"a", "b", "c"}[rng.IntN(3)], rng.IntN(10))
		_, err := w.cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case op < 9: // recolor a widget
		name := fmt.Sprintf("widget-%d", rng.IntN(20))
		patch := fmt.Sprintf(`{"spec":{"color":%q}}`, colors[rng.IntN(len(colors))])
		_, err := w.dyn.Resource(widgetGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	default: // toggle a node
		name := fmt.Sprintf("node-%d", rng.IntN(w.nodes))
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, rng.IntN(2) == 0)
		_, err := w.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
}

// rawClient sends GET requests with a given Accept header and returns the
// status, headers and body.
type rawClient struct {
	base   string
	client *http.Client
	// gzipped counts the responses that came gzipped: net/http asks for
	// gzip and decompresses (checking the CRC) when no Accept-Encoding is set.
	gzipped *atomic.Int64
}

func newRawClient(t *testing.T, cfg *rest.Config) rawClient {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("http client: %v", err)
	}
	return rawClient{base: cfg.Host, client: c, gzipped: new(atomic.Int64)}
}

func (c rawClient) get(ctx context.Context, path string, q url.Values, accept string) (int, http.Header, []byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "listproxy-e2e")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	if resp.Uncompressed && c.gzipped != nil {
		c.gzipped.Add(1)
	}
	var buf bytes.Buffer
	_, err = io.Copy(&buf, resp.Body)
	return resp.StatusCode, resp.Header, buf.Bytes(), err
}

// startReplicaSet starts n listproxy replicas with args behind a balancer
// (framework.StartReplicaSet) for the test, and stops them when it ends,
// showing each replica's last log lines if it failed.
func startReplicaSet(ctx context.Context, t *testing.T, cp *framework.ControlPlane, n int, args ...string) *framework.ReplicaSet {
	t.Helper()
	return startReplicaSetAt(ctx, t, cp, "", n, args...)
}

// startReplicaSetAt is startReplicaSet with the replicas' upstream at
// serverURL ("" is cp's own kube-apiserver).
func startReplicaSetAt(ctx context.Context, t *testing.T, cp *framework.ControlPlane, serverURL string, n int, args ...string) *framework.ReplicaSet {
	t.Helper()
	rs, err := framework.StartReplicaSetAt(ctx, cp, serverURL, t.TempDir(), n, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rs.Stop(); err != nil {
			t.Errorf("stop replicas: %v", err)
		}
		if t.Failed() {
			for _, r := range rs.Replicas {
				t.Logf("==== last lines of %s:\n%s", r.LogFile, framework.LogTail(r.LogFile, 30))
			}
		}
	})
	return rs
}
