package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/test/framework"
)

// tableCapture is one resource's rows as the apiserver wrote them: fed
// (the feed's includeObject) and with includeObject=Metadata in v1, and
// when each was requested and received. pkg/table/testdata holds them.
type tableCapture struct {
	Group    string    `json:"group"`
	Resource string    `json:"resource"`
	Feed     []string  `json:"feed"`
	FeedAt   time.Time `json:"feedAt"`
	Want     []string  `json:"want"`
	WantFrom time.Time `json:"wantFrom"`
	WantTo   time.Time `json:"wantTo"`
}

func rowStrings(rows []json.RawMessage) []string {
	var s []string
	for _, r := range rows {
		s = append(s, string(r))
	}
	return s
}

// TestTableRowsFromAPIServer: the rows pkg/table stores from the
// apiserver's Table feed render as the apiserver's own includeObject=
// Metadata rows, in meta.k8s.io v1 and v1beta1, and as its None rows.
// With LISTPROXY_TABLE_TESTDATA set to a directory, the rows are written
// there for pkg/table's tests.
func TestTableRowsFromAPIServer(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	seedTableObjects(ctx, t, cp)
	release := apiserverRelease(t, cp)
	minor, err := strconv.Atoi(strings.TrimPrefix(release, "1."))
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, gv, include string) ([]json.RawMessage, time.Time, time.Time) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.APIServerURL+path+"?includeObject="+include, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/json;as=Table;v="+gv+";g=meta.k8s.io")
		from := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		to := time.Now()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
		}
		var tbl struct{ Rows []json.RawMessage }
		if err := json.Unmarshal(body, &tbl); err != nil {
			t.Fatal(err)
		}
		return tbl.Rows, from, to
	}

	var captures []tableCapture
	for _, tc := range []struct {
		gr   schema.GroupResource
		path string
	}{
		{gr: schema.GroupResource{Resource: "pods"}, path: "/api/v1/namespaces/table/pods"},
		{gr: schema.GroupResource{Group: "batch", Resource: "jobs"}, path: "/apis/batch/v1/namespaces/table/jobs"},
		{gr: schema.GroupResource{Group: "batch", Resource: "cronjobs"}, path: "/apis/batch/v1/namespaces/table/cronjobs"},
		{gr: schema.GroupResource{Resource: "events"}, path: "/api/v1/namespaces/table/events"},
		{gr: schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, path: "/apis/events.k8s.io/v1/namespaces/table/events"},
		{gr: schema.GroupResource{Resource: "configmaps"}, path: "/api/v1/namespaces/table/configmaps"},
		{gr: schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}, path: "/apis/rbac.authorization.k8s.io/v1/namespaces/table/roles"},
	} {
		t.Run(tc.gr.String(), func(t *testing.T) {
			rules, ok := table.For(minor, tc.gr)
			if !ok {
				t.Fatalf("%v is not served on %s", tc.gr, release)
			}
			feedInclude := "Metadata"
			if rules.Object {
				feedInclude = "Object"
			}
			feed, _, feedAt := get(tc.path, "v1", feedInclude)
			want, wantFrom, wantTo := get(tc.path, "v1", "Metadata")
			beta, betaFrom, betaTo := get(tc.path, "v1beta1", "Metadata")
			none, noneFrom, noneTo := get(tc.path, "v1", "None")
			if len(feed) == 0 || len(feed) != len(want) {
				t.Fatalf("%d rows fed, %d with Metadata", len(feed), len(want))
			}
			captures = append(captures, tableCapture{Group: tc.gr.Group, Resource: tc.gr.Resource,
				Feed: rowStrings(feed), FeedAt: feedAt, Want: rowStrings(want), WantFrom: wantFrom, WantTo: wantTo})
			for i := range feed {
				stored, _, row, err := rules.Parse(feed[i], feedAt)
				if err != nil {
					t.Fatalf("Parse(%s): %v", feed[i], err)
				}
				for _, w := range []struct {
					row      json.RawMessage
					from, to time.Time
					include  table.IncludeObject
					gv       string
				}{
					{want[i], wantFrom, wantTo, table.IncludeMetadata, "v1"},
					{beta[i], betaFrom, betaTo, table.IncludeMetadata, "v1beta1"},
					{none[i], noneFrom, noneTo, table.IncludeNone, "v1"},
				} {
					from := row.Append(nil, stored, w.from, w.include, w.gv)
					to := row.Append(nil, stored, w.to, w.include, w.gv)
					if string(from) != string(w.row) && string(to) != string(w.row) {
						t.Errorf("row %d, %s %v (-apiserver +ours):\n%s", i, w.gv, w.include, cmp.Diff(string(w.row), string(to)))
					}
				}
			}
		})
	}
	if dir := os.Getenv("LISTPROXY_TABLE_TESTDATA"); dir != "" {
		b, err := json.MarshalIndent(captures, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rows-"+release+".json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// seedTableObjects creates in namespace "table" objects whose rows take
// every branch of the clock cells: pods with restartable and regular init
// containers and restarts, running and complete jobs, a scheduled
// cronjob, events with legacy timestamps and with a series.
func seedTableObjects(ctx context.Context, t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	cs := cp.Clientset(framework.UserAdmin)
	if err := cp.CreateNamespace(ctx, "table", nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d).Truncate(time.Second)) }
	finished := func(d time.Duration) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: ago(d)}}
	}

	pods := []struct {
		name   string
		status corev1.PodStatus
	}{
		{name: "initialized", status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "init", RestartCount: 4, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}, LastTerminationState: finished(2 * time.Second)},
				{Name: "sidecar", RestartCount: 1, Started: ptr.To(true), LastTerminationState: finished(3 * time.Minute)},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 2, LastTerminationState: finished(70 * time.Second)}},
		}},
		{name: "initializing", status: corev1.PodStatus{
			Phase:      corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionFalse}},
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "init", RestartCount: 3, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: finished(5 * time.Second)},
				{Name: "sidecar"},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 9, LastTerminationState: finished(time.Second)}},
		}},
		{name: "succeeded", status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
	}
	for _, p := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "<web> & co"}},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{
					{Name: "init", Image: "i"},
					{Name: "sidecar", Image: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
				},
				Containers: []corev1.Container{{Name: "c", Image: "c"}},
			},
		}
		created, err := cs.CoreV1().Pods("table").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = p.status
		if _, err := cs.CoreV1().Pods("table").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for _, name := range []string{"running", "not-started"} {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{
				Suspend: ptr.To(true),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "c"}},
				}},
			},
		}
		created, err := cs.BatchV1().Jobs("table").Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "running" {
			start := ago(150 * time.Second)
			created.Status.StartTime = &start
			if _, err := cs.BatchV1().Jobs("table").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "scheduled"},
		Spec: batchv1.CronJobSpec{Schedule: "*/5 * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "c"}},
			}},
		}}},
	}
	for _, name := range []string{"scheduled", "never"} {
		c := cron.DeepCopy()
		c.Name = name
		created, err := cs.BatchV1().CronJobs("table").Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "scheduled" {
			last := ago(4 * time.Minute)
			created.Status.LastScheduleTime = &last
			if _, err := cs.BatchV1().CronJobs("table").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	legacy := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "legacy"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "table", Name: "initialized"},
		Reason:         "Pulled", Message: "pulled <image>", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "kubelet", Host: "n"},
		FirstTimestamp: ago(3 * time.Hour), LastTimestamp: ago(9 * time.Second), Count: 3,
	}
	if _, err := cs.CoreV1().Events("table").Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, series := range []*eventsv1.EventSeries{nil, {Count: 2, LastObservedTime: metav1.NewMicroTime(now.Add(-2700 * time.Millisecond))}} {
		ev := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("new-%d", i)},
			EventTime:           metav1.NewMicroTime(now.Add(-61400 * time.Millisecond)),
			Series:              series,
			ReportingController: "example.com/c", ReportingInstance: "c-1",
			Action: "Act", Reason: "Done", Type: corev1.EventTypeWarning, Note: "note",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "table", Name: "initialized"},
		}
		if _, err := cs.EventsV1().Events("table").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := cs.CoreV1().ConfigMaps("table").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Annotations: map[string]string{"a": "x<y>&z"}},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles("table").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
