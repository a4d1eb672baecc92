// Package workload runs a fixed control-plane workload — Deployments with
// scale-ups, scale-downs, rollouts and deletions, StatefulSets, a
// DaemonSet, Jobs, headless Services with their EndpointSlices, custom
// resources owned by Deployments, then the deletion of namespaces — on a
// control plane whose kube-controller-manager and kube-scheduler do the
// work (framework.ControlPlane.StartComponents), over fake nodes whose
// kubelets this package stands in for. Names are fixed, so that two runs
// compare: Fingerprint reads the end state directly from the apiserver
// without what differs between runs (uids, times, resourceVersions,
// generated names, placements).
package workload

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

// Config sizes the workload.
type Config struct {
	// Nodes are fake Ready nodes with room for PodsPerNode pods each.
	Nodes, PodsPerNode int
	// Namespaces each hold Deployments Deployments of Replicas pods, a
	// StatefulSet "db" of 3, a Job "batch" of 3 completions; the first
	// also the DaemonSet "agent". The last DeletedNamespaces of them are
	// deleted in the second phase.
	Namespaces, DeletedNamespaces int
	Deployments, Replicas         int
	// Halfway, if set, runs once the first phase has converged, before
	// the second phase's changes (e.g. to kill a listproxy replica).
	Halfway func(ctx context.Context) error
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
	// MeasureLatency fills Result's latencies.
	MeasureLatency bool
	// ReconcileProbes, with MeasureLatency, adds a third phase once the
	// second has converged: that many Deployments, one at a time, are
	// scaled up by one and back, each change timed alone (Result.Probe),
	// so that a reconcile's latency is measured without the queues of a
	// bulk phase. The end state is the second phase's.
	ReconcileProbes int
}

// Result is what one run measured.
type Result struct {
	// Created is how long the first phase took from the first create to
	// convergence; Changed the second phase, from its first change.
	Created, Changed time.Duration
	// With Config.MeasureLatency: each Deployment's time from its create
	// (first phase) or change (second phase) until its status showed
	// every wanted pod ready under the wanted template, and each deleted
	// namespace's time from its delete until it was gone, as informers
	// reading the apiserver directly saw them.
	Reconcile, Rescale, NamespaceDeletion []time.Duration
	// Probe holds, with Config.ReconcileProbes, each probe's two changes'
	// times until the Deployment's status showed them done, as above.
	Probe []time.Duration
}

const (
	fieldManager = "workload"
	image        = "registry.k8s.io/pause:3.10"
	// converge bounds each phase's wait for the controllers.
	converge = 10 * time.Minute
)

// Run runs the workload through the apiserver config direct (the test's
// own writes and the fake kubelets never go through listproxy) and waits
// for the controllers to converge after each phase.
func Run(ctx context.Context, direct *rest.Config, cfg Config) (Result, error) {
	var res Result
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	client, err := kubernetes.NewForConfig(direct)
	if err != nil {
		return res, err
	}
	dyn, err := dynamic.NewForConfig(direct)
	if err != nil {
		return res, err
	}
	kctx, stopKubelets := context.WithCancel(ctx)
	k, err := startKubelets(kctx, client, 8)
	if err != nil {
		stopKubelets()
		return res, err
	}
	defer func() { stopKubelets(); k.wait() }()
	var lat *latencies
	if cfg.MeasureLatency {
		if lat, err = startLatencies(kctx, client); err != nil {
			return res, err
		}
	}

	if err := seed.ReadyNodes(ctx, client, nodes(cfg), seed.Options{FieldManager: fieldManager}); err != nil {
		return res, err
	}
	if err := seed.InstallWidgetCRD(ctx, direct); err != nil {
		return res, err
	}
	begin := time.Now()
	if err := create(ctx, client, dyn, cfg, lat); err != nil {
		return res, err
	}
	if err := waitConverged(ctx, client, dyn, cfg, false); err != nil {
		return res, fmt.Errorf("first phase: %w", err)
	}
	res.Created = time.Since(begin)
	res.Reconcile, _ = lat.take()
	logf("workload: first phase converged in %s", res.Created.Round(time.Millisecond))
	if cfg.Halfway != nil {
		if err := cfg.Halfway(ctx); err != nil {
			return res, err
		}
	}
	begin = time.Now()
	if err := change(ctx, client, cfg, lat); err != nil {
		return res, err
	}
	if err := waitConverged(ctx, client, dyn, cfg, true); err != nil {
		return res, fmt.Errorf("second phase: %w", err)
	}
	res.Changed = time.Since(begin)
	res.Rescale, res.NamespaceDeletion = lat.take()
	logf("workload: second phase converged in %s", res.Changed.Round(time.Millisecond))
	if lat != nil && cfg.ReconcileProbes > 0 {
		if res.Probe, err = probe(ctx, client, cfg, lat); err != nil {
			return res, fmt.Errorf("reconcile probes: %w", err)
		}
		logf("workload: %d reconcile probes done", cfg.ReconcileProbes)
	}
	return res, nil
}

// probe runs the reconcile probes (Config.ReconcileProbes): Deployments of
// the namespaces kept, in turn, each scaled up by one, then back once the
// first change is done, the next change sent only when the one before is
// done.
func probe(ctx context.Context, client kubernetes.Interface, cfg Config, lat *latencies) ([]time.Duration, error) {
	type target struct{ n, i int }
	var targets []target
	for i := range cfg.Deployments {
		for n := range cfg.Namespaces {
			if _, _, present := cfg.want(i, true); present && !cfg.deleted(n) {
				targets = append(targets, target{n, i})
			}
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no Deployment left to probe")
	}
	po := metav1.PatchOptions{FieldManager: fieldManager}
	var out []time.Duration
	for k := range cfg.ReconcileProbes {
		tg := targets[k%len(targets)]
		ns, name := namespace(tg.n), deployment(tg.i)
		replicas, revision, _ := cfg.want(tg.i, true)
		for _, r := range []int32{replicas + 1, replicas} {
			lat.expect(ns+"/"+name, r, revision)
			patch := `{"spec":{"replicas":` + strconv.Itoa(int(r)) + `}}`
			if _, err := client.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), po); err != nil {
				return out, fmt.Errorf("scale deployment %s/%s to %d: %w", ns, name, r, err)
			}
			d, err := lat.waitDone(ctx, ns+"/"+name, converge)
			if err != nil {
				return out, fmt.Errorf("deployment %s/%s scaled to %d: %w", ns, name, r, err)
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func namespace(i int) string  { return fmt.Sprintf("wl-%02d", i) }
func deployment(i int) string { return fmt.Sprintf("web-%03d", i) }
func widget(i int) string     { return fmt.Sprintf("widget-%03d", i) }

// deleted says whether the second phase deletes namespace i.
func (cfg Config) deleted(i int) bool { return i >= cfg.Namespaces-cfg.DeletedNamespaces }

// Second-phase changes by Deployment index: scale up, scale down, roll out
// a new template, delete (every eighth).
func scaledUp(i int) bool   { return i%4 == 0 }
func scaledDown(i int) bool { return i%4 == 1 }
func rolledOut(i int) bool  { return i%4 == 2 }
func removed(i int) bool    { return i%8 == 7 }

func nodes(cfg Config) []*corev1.Node {
	var out []*corev1.Node
	for i := range cfg.Nodes {
		room := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods:   *resource.NewQuantity(int64(cfg.PodsPerNode), resource.DecimalSI),
		}
		out = append(out, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i), Labels: map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node-%04d", i)}},
			Status:     corev1.NodeStatus{Capacity: room, Allocatable: room},
		})
	}
	return out
}

func podSpec(labels map[string]string) corev1.PodTemplateSpec {
	zero := int64(0)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "app", Image: image,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
		},
	}
}

// create makes the first phase's objects, namespace by namespace in
// parallel.
func create(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, cfg Config, lat *latencies) error {
	co := metav1.CreateOptions{FieldManager: fieldManager}
	return framework.Parallel(ctx, 8, cfg.Namespaces, func(ctx context.Context, n int) error {
		ns := namespace(n)
		if err := ignoreExists(client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, co)); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		// Pods are refused until the namespace's "default" service
		// account exists; creating it spares the controllers retries.
		if err := ignoreExists(client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, co)); err != nil {
			return err
		}
		for i := range cfg.Deployments {
			name := deployment(i)
			labels := map[string]string{"app": name}
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To(int32(cfg.Replicas)),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: podSpec(labels),
				},
			}
			lat.expect(ns+"/"+name, int32(cfg.Replicas), "1")
			created, err := client.AppsV1().Deployments(ns).Create(ctx, d, co)
			if err != nil {
				return fmt.Errorf("deployment %s/%s: %w", ns, name, err)
			}
			if err := ignoreExists(client.CoreV1().Services(ns).Create(ctx, headless(ns, name, labels), co)); err != nil {
				return err
			}
			w := seed.Widget(ns, widget(i), labels, "blue", int64(i))
			w.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: created.UID}})
			if _, err := dyn.Resource(seed.WidgetGVR).Namespace(ns).Create(ctx, w, co); err != nil {
				return fmt.Errorf("widget %s/%s: %w", ns, w.GetName(), err)
			}
		}
		db := map[string]string{"app": "db"}
		if err := ignoreExists(client.CoreV1().Services(ns).Create(ctx, headless(ns, "db", db), co)); err != nil {
			return err
		}
		ss := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To(int32(3)), ServiceName: "db", PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector: &metav1.LabelSelector{MatchLabels: db}, Template: podSpec(db),
			},
		}
		if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, ss, co); err != nil {
			return fmt.Errorf("statefulset %s/db: %w", ns, err)
		}
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns},
			Spec:       batchv1.JobSpec{Completions: ptr.To(int32(3)), Parallelism: ptr.To(int32(3)), Template: podSpec(nil)},
		}
		job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		if _, err := client.BatchV1().Jobs(ns).Create(ctx, job, co); err != nil {
			return fmt.Errorf("job %s/batch: %w", ns, err)
		}
		if n == 0 {
			agent := map[string]string{"app": "agent"}
			ds := &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
				Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: agent}, Template: podSpec(agent)},
			}
			if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, co); err != nil {
				return fmt.Errorf("daemonset %s/agent: %w", ns, err)
			}
		}
		return nil
	})
}

func headless(ns, name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: selector,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

// change makes the second phase's changes: Deployments scaled, rolled out
// and deleted, every StatefulSet scaled to 4, the DaemonSet rolled out,
// and the last namespaces deleted.
func change(ctx context.Context, client kubernetes.Interface, cfg Config, lat *latencies) error {
	po := metav1.PatchOptions{FieldManager: fieldManager}
	background := metav1.DeletePropagationBackground
	err := framework.Parallel(ctx, 8, cfg.Namespaces, func(ctx context.Context, n int) error {
		ns := namespace(n)
		if cfg.deleted(n) {
			return nil
		}
		deployments := client.AppsV1().Deployments(ns)
		for i := range cfg.Deployments {
			name := deployment(i)
			var patch string
			switch {
			case removed(i):
				if err := deployments.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
					return fmt.Errorf("delete deployment %s/%s: %w", ns, name, err)
				}
				continue
			case scaledUp(i):
				patch = `{"spec":{"replicas":` + strconv.Itoa(cfg.Replicas+2) + `}}`
			case scaledDown(i):
				patch = `{"spec":{"replicas":` + strconv.Itoa(cfg.Replicas-1) + `}}`
			case rolledOut(i):
				patch = `{"spec":{"template":{"metadata":{"annotations":{"workload/revision":"2"}}}}}`
			default:
				continue
			}
			replicas, revision, _ := cfg.want(i, true)
			lat.expect(ns+"/"+name, replicas, revision)
			if _, err := deployments.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), po); err != nil {
				return fmt.Errorf("patch deployment %s/%s: %w", ns, name, err)
			}
		}
		if _, err := client.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, []byte(`{"spec":{"replicas":4}}`), po); err != nil {
			return fmt.Errorf("scale statefulset %s/db: %w", ns, err)
		}
		if n == 0 {
			patch := `{"spec":{"template":{"metadata":{"annotations":{"workload/revision":"2"}}}}}`
			if _, err := client.AppsV1().DaemonSets(ns).Patch(ctx, "agent", types.StrategicMergePatchType, []byte(patch), po); err != nil {
				return fmt.Errorf("roll out daemonset %s/agent: %w", ns, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for n := range cfg.Namespaces {
		if cfg.deleted(n) {
			lat.expectGone(namespace(n))
			if err := client.CoreV1().Namespaces().Delete(ctx, namespace(n), metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("delete namespace %s: %w", namespace(n), err)
			}
		}
	}
	return nil
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// widgetOwner returns the name of a widget's owning Deployment.
func widgetOwner(w *unstructured.Unstructured) string {
	for _, ref := range w.GetOwnerReferences() {
		if ref.Kind == "Deployment" {
			return ref.Name
		}
	}
	return ""
}
