package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/test/framework"
)

// The Table fixtures: objects whose printed rows exercise every kind of
// cell the apiserver renders relative to the clock (Age, pod Restarts
// "N (X ago)", a running job's Duration, a cronjob's Last Schedule, an
// event's Last Seen and First Seen, a custom resource's date columns) and
// the rows that carry more than cells (finished pods' conditions).

// Namespaces of the Table fixtures. tableEmptyNS holds nothing.
const (
	tableNSA     = "tbl-a"
	tableNSB     = "tbl-b"
	tableEmptyNS = "tbl-empty"
)

// fracEventName is the events.k8s.io event whose eventTime has a fraction
// of a second: its Last Seen and First Seen cells change at a sub-second
// boundary, so they are compared by the window rule.
const fracEventName = "frac-event"

// The custom resources of the Table fixtures: gadgets have printer columns
// with a date column on .metadata.creationTimestamp, plainthings none (the
// apiserver's default Age column), timers a date column on .spec.firedAt.
var (
	gadgetGVR     = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "gadgets"}
	plainthingGVR = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "plainthings"}
	timerGVR      = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "timers"}
)

// tableWorld is what seedTableWorld created.
type tableWorld struct {
	// minor is the apiserver's minor release, e.g. 37.
	minor int
	// fracEventTime is fracEventName's eventTime.
	fracEventTime time.Time
}

// seedTableWorld creates the Table fixtures. Times are whole seconds
// except fracEventTime.
func seedTableWorld(t *testing.T, cp *framework.ControlPlane) tableWorld {
	t.Helper()
	ctx := context.Background()
	cs := cp.Clientset(framework.UserAdmin)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	var w tableWorld
	if _, err := fmt.Sscanf(v.Minor, "%d", &w.minor); err != nil {
		t.Fatalf("apiserver minor %q: %v", v.Minor, err)
	}
	now := time.Now().Truncate(time.Second)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	microAgo := func(d time.Duration) metav1.MicroTime { return metav1.NewMicroTime(now.Add(-d)) }
	w.fracEventTime = now.Add(-45*time.Second + 437218*time.Microsecond)

	for i, ns := range []string{tableNSA, tableNSB, tableEmptyNS} {
		if err := cp.CreateNamespace(ctx, ns, map[string]string{"team": fmt.Sprint(i % 2)}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}

	// Pods: plain ones on two nodes and one unscheduled, one with an init
	// container and a restartable init container, restarted ones, and
	// finished ones.
	container := corev1.Container{Name: "c", Image: "busybox"}
	pod := func(ns, name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{container}},
		}
	}
	always := corev1.ContainerRestartPolicyAlways
	pods := []*corev1.Pod{
		pod(tableNSA, "web-0", "node-0", map[string]string{"app": "web", "tier": "fe"}),
		pod(tableNSA, "web-1", "node-1", map[string]string{"app": "web", "tier": "fe"}),
		pod(tableNSA, "web-2", "", map[string]string{"app": "web"}),
		pod(tableNSA, "db-0", "node-1", map[string]string{"app": "db", "tier": "be"}),
		pod(tableNSB, "web-0", "node-0", map[string]string{"app": "web"}),
		pod(tableNSB, "worker-0", "node-2", map[string]string{"app": "worker", "tier": "be"}),
	}
	withInit := pod(tableNSA, "init-0", "node-0", map[string]string{"app": "db"})
	withInit.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "busybox"},
		{Name: "sidecar", Image: "busybox", RestartPolicy: &always},
	}
	pods = append(pods, withInit,
		pod(tableNSA, "restarted-0", "node-0", map[string]string{"app": "web"}),
		pod(tableNSB, "restarted-1", "node-2", map[string]string{"app": "worker"}),
		pod(tableNSA, "done-0", "node-1", map[string]string{"app": "job"}),
		pod(tableNSB, "failed-0", "node-2", map[string]string{"app": "job"}),
	)
	for _, p := range pods {
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		mustCreate("pod "+p.Name, err)
	}
	running := func(restarts int32, finished time.Duration) corev1.ContainerStatus {
		s := corev1.ContainerStatus{Name: "c", Image: "busybox", ImageID: "docker.io/library/busybox@sha256:0", ContainerID: "containerd://c", Ready: true, Started: new(bool),
			RestartCount: restarts, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(finished - 10*time.Second)}}}
		*s.Started = true
		if restarts > 0 {
			s.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: ago(finished + time.Minute), FinishedAt: ago(finished), ContainerID: "containerd://old"}}
		}
		return s
	}
	terminated := func(code int32, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "c", Image: "busybox", ImageID: "docker.io/library/busybox@sha256:0", ContainerID: "containerd://c",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: ago(5 * time.Minute), FinishedAt: ago(4 * time.Minute)}}}
	}
	statuses := []struct {
		ns, name string
		status   corev1.PodStatus
	}{
		{tableNSA, "web-0", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.10", StartTime: &metav1.Time{Time: now.Add(-3 * time.Minute)},
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ago(2 * time.Minute)}},
			ContainerStatuses: []corev1.ContainerStatus{running(0, time.Minute)}}},
		{tableNSA, "restarted-0", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.11", StartTime: &metav1.Time{Time: now.Add(-time.Hour)},
			ContainerStatuses: []corev1.ContainerStatus{running(3, 5*time.Minute)}}},
		{tableNSB, "restarted-1", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.12", StartTime: &metav1.Time{Time: now.Add(-time.Hour)},
			ContainerStatuses: []corev1.ContainerStatus{running(1, 40*time.Second)}}},
		{tableNSA, "init-0", corev1.PodStatus{Phase: corev1.PodPending, StartTime: &metav1.Time{Time: now.Add(-2 * time.Minute)},
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, LastTransitionTime: ago(2 * time.Minute)}},
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "setup", Image: "busybox", RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(30 * time.Second)}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: ago(35 * time.Second)}}},
				{Name: "sidecar", Image: "busybox", RestartCount: 1, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: ago(90 * time.Second)}}},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "busybox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}},
		{tableNSA, "done-0", corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &metav1.Time{Time: now.Add(-6 * time.Minute)},
			ContainerStatuses: []corev1.ContainerStatus{terminated(0, "Completed")}}},
		{tableNSB, "failed-0", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory.", StartTime: &metav1.Time{Time: now.Add(-6 * time.Minute)},
			ContainerStatuses: []corev1.ContainerStatus{terminated(137, "OOMKilled")}}},
	}
	for _, s := range statuses {
		p, err := cs.CoreV1().Pods(s.ns).Get(ctx, s.name, metav1.GetOptions{})
		mustCreate("pod "+s.name, err)
		p.Status = s.status
		_, err = cs.CoreV1().Pods(s.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		mustCreate("status of pod "+s.ns+"/"+s.name, err)
	}

	// Jobs: one running (startTime, no completionTime), one complete.
	never := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{container}}}
	for _, j := range []struct {
		name   string
		status batchv1.JobStatus
	}{
		{"running", batchv1.JobStatus{StartTime: &metav1.Time{Time: now.Add(-90 * time.Second)}, Active: 1}},
		{"complete", batchv1.JobStatus{StartTime: &metav1.Time{Time: now.Add(-10 * time.Minute)}, CompletionTime: &metav1.Time{Time: now.Add(-8*time.Minute - 20*time.Second)}, Succeeded: 1,
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: ago(8*time.Minute + 20*time.Second)},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: ago(8*time.Minute + 20*time.Second)},
			}}},
	} {
		job, err := cs.BatchV1().Jobs(tableNSA).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.name, Labels: map[string]string{"app": "job"}}, Spec: batchv1.JobSpec{Template: never}}, metav1.CreateOptions{})
		mustCreate("job "+j.name, err)
		job.Status = j.status
		_, err = cs.BatchV1().Jobs(tableNSA).UpdateStatus(ctx, job, metav1.UpdateOptions{})
		if apierrors.IsInvalid(err) && len(j.status.Conditions) > 1 {
			// Releases before SuccessCriteriaMet was required refuse it
			// on a job without a success policy.
			job.Status.Conditions = job.Status.Conditions[1:]
			_, err = cs.BatchV1().Jobs(tableNSA).UpdateStatus(ctx, job, metav1.UpdateOptions{})
		}
		mustCreate("status of job "+j.name, err)
	}

	// CronJobs: one never scheduled, one with lastScheduleTime.
	for _, c := range []struct {
		name, schedule string
		last           *metav1.Time
	}{
		{"nightly", "0 3 * * *", nil},
		{"hourly", "0 * * * *", &metav1.Time{Time: now.Add(-20 * time.Minute)}},
	} {
		cj, err := cs.BatchV1().CronJobs(tableNSA).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: batchv1.CronJobSpec{Schedule: c.schedule, JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: never}}}}, metav1.CreateOptions{})
		mustCreate("cronjob "+c.name, err)
		if c.last != nil {
			cj.Status.LastScheduleTime = c.last
			cj.Status.LastSuccessfulTime = c.last
			_, err = cs.BatchV1().CronJobs(tableNSA).UpdateStatus(ctx, cj, metav1.UpdateOptions{})
			mustCreate("status of cronjob "+c.name, err)
		}
	}

	// Core events (firstTimestamp/lastTimestamp; one with a series) and
	// events.k8s.io events (eventTime; one with a fractional second).
	regarding := corev1.ObjectReference{Kind: "Pod", Namespace: tableNSA, Name: "restarted-0", APIVersion: "v1", FieldPath: "spec.containers{c}"}
	coreEvents := []*corev1.Event{
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "restarted-0.started"}, InvolvedObject: regarding, Reason: "Started", Message: "Started container c",
			Source: corev1.EventSource{Component: "kubelet", Host: "node-0"}, FirstTimestamp: ago(10 * time.Minute), LastTimestamp: ago(2 * time.Minute), Count: 3, Type: corev1.EventTypeNormal},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "restarted-0.backoff"}, InvolvedObject: regarding, Reason: "BackOff", Message: "Back-off restarting failed container c",
			EventTime: microAgo(3 * time.Minute), Series: &corev1.EventSeries{Count: 5, LastObservedTime: microAgo(30 * time.Second)},
			ReportingController: "kubelet", ReportingInstance: "node-0", Action: "Restarting", Type: corev1.EventTypeWarning},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSB, Name: "web-0.scheduled"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: tableNSB, Name: "web-0", APIVersion: "v1"},
			Reason: "Scheduled", Message: "Successfully assigned tbl-b/web-0 to node-0", Source: corev1.EventSource{Component: "default-scheduler"},
			FirstTimestamp: ago(3 * time.Hour), LastTimestamp: ago(3 * time.Hour), Count: 1, Type: corev1.EventTypeNormal},
	}
	for _, e := range coreEvents {
		_, err := cs.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		mustCreate("event "+e.Name, err)
	}
	deployRef := corev1.ObjectReference{Kind: "Deployment", Namespace: tableNSA, Name: "web", APIVersion: "apps/v1"}
	newEvents := []*eventsv1.Event{
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "web.scaled"}, EventTime: microAgo(time.Minute), ReportingController: "deployment-controller", ReportingInstance: "kcm-0",
			Action: "Scale", Reason: "ScalingReplicaSet", Regarding: deployRef, Note: "Scaled up replica set web-7d4b9 to 2", Type: corev1.EventTypeNormal},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "web.unhealthy"}, EventTime: microAgo(20 * time.Minute), ReportingController: "kubelet", ReportingInstance: "node-1",
			Action: "Probe", Reason: "Unhealthy", Regarding: deployRef, Note: "Readiness probe failed", Type: corev1.EventTypeWarning,
			Series: &eventsv1.EventSeries{Count: 4, LastObservedTime: microAgo(7 * time.Minute)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSB, Name: fracEventName}, EventTime: metav1.NewMicroTime(w.fracEventTime), ReportingController: "example.com/ctl", ReportingInstance: "ctl-0",
			Action: "Sync", Reason: "Synced", Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: tableNSB, Name: "worker-0", APIVersion: "v1"}, Note: "synced", Type: corev1.EventTypeNormal},
	}
	for _, e := range newEvents {
		_, err := cs.EventsV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		mustCreate("events.k8s.io event "+e.Name, err)
	}

	// RBAC, configmaps, services, deployments, storage classes.
	for _, ns := range []string{tableNSA, tableNSB} {
		for i, name := range []string{"reader", "writer"} {
			_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tbl": "yes", "idx": fmt.Sprint(i)}},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{})
			mustCreate("role "+name, err)
		}
		for i := range 3 {
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("settings-%d", i), Labels: map[string]string{"tbl": "yes", "idx": fmt.Sprint(i)}},
				Data: map[string]string{"k": "<&> ✓"}}, metav1.CreateOptions{})
			mustCreate("configmap", err)
		}
	}
	for i, name := range []string{"tbl-viewer", "tbl-editor", "tbl-admin"} {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tbl": "yes", "idx": fmt.Sprint(i)}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
		mustCreate("clusterrole "+name, err)
	}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSA, Name: "db", Labels: map[string]string{"app": "db"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: tableNSB, Name: "ext"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
	} {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		mustCreate("service "+s.Name, err)
	}
	replicas := int32(2)
	_, err = cs.AppsV1().Deployments(tableNSA).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}}}}, metav1.CreateOptions{})
	mustCreate("deployment web", err)
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "fast", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}}, Provisioner: "example.com/fast"},
		{ObjectMeta: metav1.ObjectMeta{Name: "slow"}, Provisioner: "example.com/slow"},
	} {
		_, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		mustCreate("storageclass "+sc.Name, err)
	}

	// Custom resources.
	installTableCRDs(ctx, t, cp, tableCRDs)
	for i, ns := range []string{tableNSA, tableNSA, tableNSB} {
		spec := map[string]any{"color": colors[i], "size": int64(i), "note": fmt.Sprintf("note %d", i), "firedAt": now.Add(-time.Duration(i+1) * 7 * time.Minute).UTC().Format(time.RFC3339)}
		for _, gvr := range []schema.GroupVersionResource{gadgetGVR, plainthingGVR, timerGVR} {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": gvr.GroupVersion().String(),
				"kind":       tableCRDKinds[gvr.Resource],
				"metadata":   map[string]any{"namespace": ns, "name": fmt.Sprintf("%s-%d", gvr.Resource[:len(gvr.Resource)-1], i), "labels": map[string]any{"app": []string{"web", "db"}[i%2]}},
				"spec":       spec,
			}}
			_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
			mustCreate(gvr.Resource, err)
		}
	}
	return w
}

var tableCRDKinds = map[string]string{"gadgets": "Gadget", "plainthings": "Plainthing", "timers": "Timer"}

// tableCRDs are the custom resources of the Table fixtures.
var tableCRDs = []schema.GroupVersionResource{gadgetGVR, plainthingGVR, timerGVR}

// installTableCRDs creates the CRDs of gvrs, of tableCRDs, and waits until
// each is served.
func installTableCRDs(ctx context.Context, t *testing.T, cp *framework.ControlPlane, gvrs []schema.GroupVersionResource) {
	t.Helper()
	client := apiextensionsclient.NewForConfigOrDie(cp.AdminConfig)
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig)
	columns := map[string][]apiextensionsv1.CustomResourceColumnDefinition{
		"gadgets": {
			{Name: "Color", Type: "string", JSONPath: ".spec.color"},
			{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
			{Name: "Note", Type: "string", JSONPath: ".spec.note", Priority: 1},
			{Name: "Created", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
		"plainthings": nil,
		"timers": {
			{Name: "Color", Type: "string", JSONPath: ".spec.color"},
			{Name: "Fired", Type: "date", JSONPath: ".spec.firedAt"},
		},
	}
	for _, gvr := range gvrs {
		kind := tableCRDKinds[gvr.Resource]
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: gvr.Resource + "." + gvr.Group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: gvr.Group,
				Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: gvr.Resource, Singular: gvr.Resource[:len(gvr.Resource)-1], Kind: kind, ListKind: kind + "List"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: gvr.Version, Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"color": {Type: "string"}, "size": {Type: "integer"}, "note": {Type: "string"}, "firedAt": {Type: "string"},
						}}},
					}},
					AdditionalPrinterColumns: columns[gvr.Resource],
				}},
			},
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD %s: %v", crd.Name, err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not served: %v", crd.Name, err)
		}
	}
}
