package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// latencies measures, from informers reading the apiserver directly, how
// long the controllers take: from a Deployment's create (or change) to its
// status showing every wanted pod ready under the wanted template, and
// from a namespace's delete to it being gone.
type latencies struct {
	mu          sync.Mutex
	want        map[string]wantDeployment // namespace/name -> what the phase asks
	deployments []time.Duration
	deleting    map[string]time.Time // namespace -> delete call
	namespaces  []time.Duration
}

type wantDeployment struct {
	since    time.Time
	replicas int32
	revision string
	done     bool
	took     time.Duration // once done
}

// startLatencies starts the informers; they stop when ctx ends.
func startLatencies(ctx context.Context, client kubernetes.Interface) (*latencies, error) {
	l := &latencies{want: map[string]wantDeployment{}, deleting: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactory(client, 0)
	deployments := factory.Apps().V1().Deployments().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	if _, err := deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.observeDeployment,
		UpdateFunc: func(_, obj any) { l.observeDeployment(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: l.observeNamespaceGone}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	context.AfterFunc(ctx, factory.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), deployments.HasSynced, namespaces.HasSynced) {
		return nil, fmt.Errorf("latency informers did not sync: %w", ctx.Err())
	}
	return l, nil
}

// expect records that deployment key was just created or changed to want
// replicas of revision.
func (l *latencies) expect(key string, replicas int32, revision string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.want[key] = wantDeployment{since: time.Now(), replicas: replicas, revision: revision}
}

// expectGone records that namespace ns was just deleted.
func (l *latencies) expectGone(ns string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleting[ns] = time.Now()
}

func (l *latencies) observeDeployment(obj any) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	key := d.Namespace + "/" + d.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.want[key]
	if !ok || w.done {
		return
	}
	st := d.Status
	if st.ObservedGeneration == d.Generation && *d.Spec.Replicas == w.replicas && st.Replicas == w.replicas &&
		st.UpdatedReplicas == w.replicas && st.ReadyReplicas == w.replicas && st.AvailableReplicas == w.replicas &&
		d.Annotations["deployment.kubernetes.io/revision"] == w.revision {
		w.done, w.took = true, time.Since(w.since)
		l.want[key] = w
		l.deployments = append(l.deployments, w.took)
	}
}

func (l *latencies) observeNamespaceGone(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if since, ok := l.deleting[ns.Name]; ok {
		delete(l.deleting, ns.Name)
		l.namespaces = append(l.namespaces, time.Since(since))
	}
}

// waitDone waits at most timeout for the change of deployment key last
// expected to be done, and returns how long it took (from expect); the
// latency is taken when the informer sees the status, not when the wait
// notices it.
func (l *latencies) waitDone(ctx context.Context, key string, timeout time.Duration) (time.Duration, error) {
	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		w := l.want[key]
		took = w.took
		return w.done, nil
	})
	return took, err
}

// take returns the latencies measured so far and forgets them.
func (l *latencies) take() (deployments, namespaces []time.Duration) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	deployments, namespaces = l.deployments, l.namespaces
	l.deployments, l.namespaces = nil, nil
	return deployments, namespaces
}
