package workload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// kubelets stands in for the kubelets of every fake node, in one informer
// that reads from the apiserver directly (kubelets never go through
// listproxy in these tests): a pod bound to a node is started at once
// (Running and Ready with a pod IP; a Job's pod Succeeded), and a bound pod
// being deleted is removed at once (a kubelet confirms a deletion with
// grace period 0 once its containers stopped).
type kubelets struct {
	client kubernetes.Interface
	queue  workqueue.TypedRateLimitingInterface[string]
	pods   cache.Indexer
	nextIP atomic.Uint32
	wg     sync.WaitGroup
}

// startKubelets runs the fake kubelets until ctx ends, with workers
// concurrent status writes, and returns once their informer has synced.
func startKubelets(ctx context.Context, client kubernetes.Interface, workers int) (*kubelets, error) {
	k := &kubelets{
		client: client,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Pods().Informer()
	k.pods = inf.GetIndexer()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("fake kubelets: pod informer did not sync: %w", ctx.Err())
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
		factory.Shutdown()
	}()
	for range workers {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for k.work(ctx) {
			}
		}()
	}
	return k, nil
}

// work handles one pod; false once the queue is shut down.
func (k *kubelets) work(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil && ctx.Err() == nil {
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *kubelets) sync(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		zero := int64(0)
		uid := pod.UID
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return nil
	}
	return k.start(ctx, pod)
}

// start writes the status a kubelet writes once the pod's containers run
// (or, for a Job's pod, have run to completion).
func (k *kubelets) start(ctx context.Context, pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	now := metav1.NewTime(time.Now())
	n := k.nextIP.Add(1)
	ip := fmt.Sprintf("10.%d.%d.%d", 64+n>>16&63, n>>8&255, n&255)
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	pod.Status.HostIP = "192.0.2.1"
	pod.Status.StartTime = &now
	ready := corev1.ConditionTrue
	pod.Status.Phase = corev1.PodRunning
	if ownedBy(pod, "Job") {
		pod.Status.Phase, ready = corev1.PodSucceeded, corev1.ConditionFalse
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "docker.io/library/" + c.Image, ContainerID: "fake://" + string(pod.UID) + "/" + c.Name, Ready: ready == corev1.ConditionTrue, Started: ptr.To(ready == corev1.ConditionTrue)}
		if pod.Status.Phase == corev1.PodSucceeded {
			st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		} else {
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, st)
	}
	_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "fake-kubelet"})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed: the informer brings the new pod
	}
	return err
}

// ownedBy says whether pod's controller is of kind.
func ownedBy(pod *corev1.Pod, kind string) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == kind
}

// wait blocks until the workers have stopped (after ctx ended).
func (k *kubelets) wait() { k.wg.Wait() }
