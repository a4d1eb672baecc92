package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/test/framework/seed"
)

// state is the cluster's objects of the workload, read directly from the
// apiserver.
type state struct {
	nodes        []corev1.Node
	namespaces   map[string]bool // wl-* namespaces that exist (terminating included)
	deployments  []appsv1.Deployment
	replicaSets  []appsv1.ReplicaSet
	statefulSets []appsv1.StatefulSet
	daemonSets   []appsv1.DaemonSet
	jobs         []batchv1.Job
	pods         []corev1.Pod
	services     []corev1.Service
	slices       []discoveryv1.EndpointSlice
	revisions    []appsv1.ControllerRevision
	configMaps   []corev1.ConfigMap
	widgets      []unstructured.Unstructured
}

// read lists everything of the workload (every namespace, then kept to
// the wl-* ones).
func read(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) (*state, error) {
	all := metav1.ListOptions{}
	s := &state{namespaces: map[string]bool{}}
	nodes, err := client.CoreV1().Nodes().List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.nodes = nodes.Items
	nss, err := client.CoreV1().Namespaces().List(ctx, all)
	if err != nil {
		return nil, err
	}
	for _, ns := range nss.Items {
		if ours(ns.Name) {
			s.namespaces[ns.Name] = true
		}
	}
	var errs []error
	d, err := client.AppsV1().Deployments("").List(ctx, all)
	errs = append(errs, err)
	rs, err := client.AppsV1().ReplicaSets("").List(ctx, all)
	errs = append(errs, err)
	ss, err := client.AppsV1().StatefulSets("").List(ctx, all)
	errs = append(errs, err)
	ds, err := client.AppsV1().DaemonSets("").List(ctx, all)
	errs = append(errs, err)
	jobs, err := client.BatchV1().Jobs("").List(ctx, all)
	errs = append(errs, err)
	pods, err := client.CoreV1().Pods("").List(ctx, all)
	errs = append(errs, err)
	svcs, err := client.CoreV1().Services("").List(ctx, all)
	errs = append(errs, err)
	eps, err := client.DiscoveryV1().EndpointSlices("").List(ctx, all)
	errs = append(errs, err)
	revs, err := client.AppsV1().ControllerRevisions("").List(ctx, all)
	errs = append(errs, err)
	cms, err := client.CoreV1().ConfigMaps("").List(ctx, all)
	errs = append(errs, err)
	ws, err := dyn.Resource(seed.WidgetGVR).List(ctx, all)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.deployments = filter(d.Items, func(o *appsv1.Deployment) string { return o.Namespace })
	s.replicaSets = filter(rs.Items, func(o *appsv1.ReplicaSet) string { return o.Namespace })
	s.statefulSets = filter(ss.Items, func(o *appsv1.StatefulSet) string { return o.Namespace })
	s.daemonSets = filter(ds.Items, func(o *appsv1.DaemonSet) string { return o.Namespace })
	s.jobs = filter(jobs.Items, func(o *batchv1.Job) string { return o.Namespace })
	s.pods = filter(pods.Items, func(o *corev1.Pod) string { return o.Namespace })
	s.services = filter(svcs.Items, func(o *corev1.Service) string { return o.Namespace })
	s.slices = filter(eps.Items, func(o *discoveryv1.EndpointSlice) string { return o.Namespace })
	s.revisions = filter(revs.Items, func(o *appsv1.ControllerRevision) string { return o.Namespace })
	s.configMaps = filter(cms.Items, func(o *corev1.ConfigMap) string { return o.Namespace })
	s.widgets = filter(ws.Items, func(o *unstructured.Unstructured) string { return o.GetNamespace() })
	return s, nil
}

func ours(ns string) bool { return strings.HasPrefix(ns, "wl-") }

func filter[T any](items []T, ns func(*T) string) []T {
	var out []T
	for i := range items {
		if ours(ns(&items[i])) {
			out = append(out, items[i])
		}
	}
	return out
}

// waitConverged polls the cluster until the controllers have done all the
// phase asks (second: after change), or converge passes; the error then
// says what was still pending.
func waitConverged(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, cfg Config, second bool) error {
	var pending error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, converge, true, func(ctx context.Context) (bool, error) {
		s, err := read(ctx, client, dyn)
		if err != nil {
			pending = err
			return false, nil
		}
		pending = s.pending(cfg, second)
		return pending == nil, nil
	})
	if err != nil {
		return fmt.Errorf("controllers did not converge: %w (still pending: %w)", err, pending)
	}
	return nil
}

// want is what the phase asks of one Deployment: its replicas and
// revision, or absent.
func (cfg Config) want(i int, second bool) (replicas int32, revision string, present bool) {
	replicas, revision = int32(cfg.Replicas), "1"
	if !second {
		return replicas, revision, true
	}
	switch {
	case removed(i):
		return 0, "", false
	case scaledUp(i):
		replicas += 2
	case scaledDown(i):
		replicas--
	case rolledOut(i):
		revision = "2"
	}
	return replicas, revision, true
}

// pending returns the first thing the controllers have not done yet, nil
// when the phase has converged.
func (s *state) pending(cfg Config, second bool) error {
	for n := range cfg.Namespaces {
		ns := namespace(n)
		if gone := second && cfg.deleted(n); gone == s.namespaces[ns] {
			return fmt.Errorf("namespace %s exists: %v, want %v", ns, s.namespaces[ns], !gone)
		}
	}
	deployments := map[string]*appsv1.Deployment{}
	for i := range s.deployments {
		d := &s.deployments[i]
		deployments[d.Namespace+"/"+d.Name] = d
	}
	podsOf := map[types.UID][]*corev1.Pod{}
	for i := range s.pods {
		p := &s.pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			return fmt.Errorf("pod %s/%s not bound or being deleted", p.Namespace, p.Name)
		}
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
		}
		if ref := metav1.GetControllerOf(p); ref != nil {
			podsOf[ref.UID] = append(podsOf[ref.UID], p)
		}
	}
	wantDeployments := 0
	for n := range cfg.Namespaces {
		if second && cfg.deleted(n) {
			continue
		}
		for i := range cfg.Deployments {
			key := namespace(n) + "/" + deployment(i)
			replicas, revision, present := cfg.want(i, second)
			d := deployments[key]
			if !present {
				continue
			}
			wantDeployments++
			if d == nil {
				return fmt.Errorf("deployment %s missing", key)
			}
			st := d.Status
			if st.ObservedGeneration != d.Generation || *d.Spec.Replicas != replicas || st.Replicas != replicas ||
				st.UpdatedReplicas != replicas || st.ReadyReplicas != replicas || st.AvailableReplicas != replicas ||
				d.Annotations["deployment.kubernetes.io/revision"] != revision {
				return fmt.Errorf("deployment %s: generation %d observed %d, replicas %d/%d updated %d ready %d available %d, revision %q (want %d, %q)",
					key, d.Generation, st.ObservedGeneration, st.Replicas, *d.Spec.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas,
					d.Annotations["deployment.kubernetes.io/revision"], replicas, revision)
			}
		}
	}
	if len(s.deployments) != wantDeployments {
		return fmt.Errorf("%d deployments, want %d", len(s.deployments), wantDeployments)
	}
	for i := range s.replicaSets {
		rs := &s.replicaSets[i]
		owner := metav1.GetControllerOf(rs)
		if owner == nil || deployments[rs.Namespace+"/"+owner.Name] == nil {
			return fmt.Errorf("replicaset %s/%s outlives its deployment", rs.Namespace, rs.Name)
		}
		want := *rs.Spec.Replicas
		if got := int32(len(podsOf[rs.UID])); got != want || rs.Status.Replicas != want || rs.Status.ReadyReplicas != want || rs.Status.ObservedGeneration != rs.Generation {
			return fmt.Errorf("replicaset %s/%s: %d pods, status %d ready %d, want %d", rs.Namespace, rs.Name, got, rs.Status.Replicas, rs.Status.ReadyReplicas, want)
		}
	}
	for i := range s.statefulSets {
		ss := &s.statefulSets[i]
		want := *ss.Spec.Replicas
		st := ss.Status
		if got := int32(len(podsOf[ss.UID])); got != want || st.ReadyReplicas != want || st.ObservedGeneration != ss.Generation || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("statefulset %s/%s: %d pods, ready %d, want %d", ss.Namespace, ss.Name, got, st.ReadyReplicas, want)
		}
	}
	for i := range s.daemonSets {
		ds := &s.daemonSets[i]
		st, want := ds.Status, int32(len(s.nodes))
		if got := int32(len(podsOf[ds.UID])); got != want || st.DesiredNumberScheduled != want || st.NumberReady != want ||
			st.UpdatedNumberScheduled != want || st.ObservedGeneration != ds.Generation {
			return fmt.Errorf("daemonset %s/%s: %d pods, desired %d ready %d updated %d, want %d", ds.Namespace, ds.Name, got, st.DesiredNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled, want)
		}
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if got := len(podsOf[j.UID]); got != 3 || j.Status.Succeeded != 3 || !jobComplete(j) {
			return fmt.Errorf("job %s/%s: %d pods, %d succeeded, complete %v", j.Namespace, j.Name, got, j.Status.Succeeded, jobComplete(j))
		}
	}
	ready := s.readyEndpoints()
	for i := range s.services {
		svc := &s.services[i]
		want := 0
		for j := range s.pods {
			p := &s.pods[j]
			if p.Namespace == svc.Namespace && p.Status.Phase == corev1.PodRunning && matches(svc.Spec.Selector, p.Labels) {
				want++
			}
		}
		if got := ready[svc.Namespace+"/"+svc.Name]; got != want {
			return fmt.Errorf("service %s/%s: %d ready endpoints, want %d", svc.Namespace, svc.Name, got, want)
		}
	}
	for i := range s.widgets {
		w := &s.widgets[i]
		if deployments[w.GetNamespace()+"/"+widgetOwner(w)] == nil {
			return fmt.Errorf("widget %s/%s outlives its deployment", w.GetNamespace(), w.GetName())
		}
	}
	if len(s.widgets) != wantDeployments {
		return fmt.Errorf("%d widgets, want %d", len(s.widgets), wantDeployments)
	}
	return nil
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// readyEndpoints counts ready endpoints by namespace/service.
func (s *state) readyEndpoints() map[string]int {
	out := map[string]int{}
	for i := range s.slices {
		sl := &s.slices[i]
		key := sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName]
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out[key]++
			}
		}
	}
	return out
}

// Fingerprint reads the workload's end state directly from the apiserver
// as sorted lines: objects per kind and owner, the owner graph (by the
// owners' names and revisions, not uids or generated names), status
// counters, endpoints per service, namespaces. Placements are not in it
// (scheduling ties are random); that every pod is bound within its node's
// room is.
func Fingerprint(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) ([]string, error) {
	s, err := read(ctx, client, dyn)
	if err != nil {
		return nil, err
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("nodes %d", len(s.nodes))
	for ns := range s.namespaces {
		add("namespace %s", ns)
	}
	rsKey := map[types.UID]string{}
	for _, d := range s.deployments {
		conds := []string{}
		for _, c := range d.Status.Conditions {
			conds = append(conds, string(c.Type)+"="+string(c.Status))
		}
		slices.Sort(conds)
		add("deployment %s/%s replicas=%d updated=%d ready=%d available=%d revision=%s conditions=%v",
			d.Namespace, d.Name, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas,
			d.Annotations["deployment.kubernetes.io/revision"], conds)
	}
	for _, rs := range s.replicaSets {
		owner := "-"
		if ref := metav1.GetControllerOf(&rs); ref != nil {
			owner = ref.Kind + "/" + ref.Name
		}
		key := fmt.Sprintf("%s/%s/revision=%s", rs.Namespace, owner, rs.Annotations["deployment.kubernetes.io/revision"])
		rsKey[rs.UID] = key
		add("replicaset %s spec=%d ready=%d", key, *rs.Spec.Replicas, rs.Status.ReadyReplicas)
	}
	pods := map[string]int{}
	perNode := map[string]int{}
	for _, p := range s.pods {
		owner := "-"
		if ref := metav1.GetControllerOf(&p); ref != nil {
			owner = ref.Kind + "/" + ref.Name
			if ref.Kind == "ReplicaSet" {
				owner = "ReplicaSet " + rsKey[ref.UID]
			}
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "StatefulSet" {
			owner += " " + p.Name // ordinal names are fixed
		}
		pods[fmt.Sprintf("%s %s %s", p.Namespace, owner, p.Status.Phase)]++
		perNode[p.Spec.NodeName]++
	}
	for k, n := range pods {
		add("pods %s: %d", k, n)
	}
	within := true
	for _, node := range s.nodes {
		if int64(perNode[node.Name]) > node.Status.Allocatable.Pods().Value() {
			within = false
		}
	}
	add("pods bound within their nodes' room: %v", within)
	for _, ss := range s.statefulSets {
		add("statefulset %s/%s replicas=%d ready=%d current=update:%v", ss.Namespace, ss.Name, ss.Status.Replicas, ss.Status.ReadyReplicas, ss.Status.CurrentRevision == ss.Status.UpdateRevision)
	}
	for _, ds := range s.daemonSets {
		add("daemonset %s/%s desired=%d ready=%d updated=%d", ds.Namespace, ds.Name, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, ds.Status.UpdatedNumberScheduled)
	}
	for _, j := range s.jobs {
		add("job %s/%s succeeded=%d failed=%d complete=%v", j.Namespace, j.Name, j.Status.Succeeded, j.Status.Failed, jobComplete(&j))
	}
	ready := s.readyEndpoints()
	for _, svc := range s.services {
		add("service %s/%s ready-endpoints=%d", svc.Namespace, svc.Name, ready[svc.Namespace+"/"+svc.Name])
	}
	revs := map[string]int{}
	for _, r := range s.revisions {
		if ref := metav1.GetControllerOf(&r); ref != nil {
			revs[r.Namespace+"/"+ref.Kind+"/"+ref.Name]++
		}
	}
	for k, n := range revs {
		add("controllerrevisions %s: %d", k, n)
	}
	for _, cm := range s.configMaps {
		add("configmap %s/%s", cm.Namespace, cm.Name)
	}
	for _, w := range s.widgets {
		add("widget %s/%s owner=%s", w.GetNamespace(), w.GetName(), widgetOwner(&w))
	}
	slices.Sort(lines)
	return lines, nil
}

// Diff returns the lines only in a and only in b.
func Diff(a, b []string) (onlyA, onlyB []string) {
	inB := map[string]int{}
	for _, l := range b {
		inB[l]++
	}
	for _, l := range a {
		if inB[l] > 0 {
			inB[l]--
			continue
		}
		onlyA = append(onlyA, l)
	}
	for _, l := range b {
		if inB[l] > 0 {
			inB[l]--
			onlyB = append(onlyB, l)
		}
	}
	return onlyA, onlyB
}
