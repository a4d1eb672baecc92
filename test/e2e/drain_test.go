package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/listproxy/listproxy/test/framework"
)

// TestDrainInformerRewatchesElsewhere: an informer (watch-list, client-go's
// defaults) reads configmaps through a balancer in front of two replicas.
// SIGTERM to the replica serving its watch fails that replica's /readyz
// first, then ends the watch cleanly: the informer re-watches from its last
// resourceVersion on the other replica — no relist — and sees what is
// written afterwards; the drained replica exits 0.
func TestDrainInformerRewatchesElsewhere(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 20 {
		scaleCreate(ctx, t, cs, "default", fmt.Sprintf("drain-%02d", i), "0")
	}
	rs := startReplicaSet(ctx, t, cp, 2,
		"--etcd-servers="+cp.EtcdEndpoint, "--resources=configmaps", "--preload=configmaps",
		"--shutdown-delay=1s", "--shutdown-grace-period=10s")

	lbClient := kubernetes.NewForConfigOrDie(&rest.Config{Host: rs.Balancer.URL()})
	var lists, watches atomic.Int64
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return lbClient.CoreV1().ConfigMaps("default").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				lists.Add(1)
			}
			watches.Add(1)
			return lbClient.CoreV1().ConfigMaps("default").Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if lists.Load() != 1 {
		t.Fatalf("informer listed %d times before it synced, want 1", lists.Load())
	}

	// The replica serving the informer's watch.
	serving := -1
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, r := range rs.Replicas {
			if framework.Scrape(t, nil, r.URL()+"/metrics").Sum("listproxy_watch_open") == 1 {
				serving = r.Index
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no replica serves the informer's watch: %v", err)
	}
	other := rs.Replicas[1-serving]
	watchesBefore := watches.Load()
	if err := rs.Terminate(ctx, serving); err != nil {
		t.Fatal(err)
	}
	// Re-watched on the other replica (served from its store's recent
	// changes, or passed through when the resourceVersion is newer than
	// that store has seen).
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m := framework.Scrape(t, nil, other.URL()+"/metrics")
		return m.Sum("listproxy_watch_open") >= 1 || m.Sum("listproxy_watch_passed_through_total") >= 1, nil
	})
	if err != nil {
		t.Fatalf("the informer did not re-watch on the other replica (%d lists, %d watches): %v", lists.Load(), watches.Load(), err)
	}
	scaleCreate(ctx, t, cs, "default", "drain-after", "1")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok, _ := inf.GetStore().GetByKey("default/drain-after")
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the informer never saw a configmap created after the drain: %v", err)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("the informer listed %d times, want 1: a drained watch must end cleanly so that the client re-watches instead of relisting", n)
	}
	m := framework.Scrape(t, nil, other.URL()+"/metrics")
	t.Logf("replica %d drained; the informer re-watched on replica %d (%d watch requests after the drain; there %v served from the store's changes, %v passed through)",
		serving, other.Index, watches.Load()-watchesBefore, m.Sum("listproxy_watch_served_total", `start="from"`), m.Sum("listproxy_watch_passed_through_total"))
}
