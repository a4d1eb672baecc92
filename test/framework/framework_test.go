package framework_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/test/framework"
)

func TestControlPlane(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{Controllers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cp.Clientset(framework.UserAdmin)

	t.Run("admin_lists_namespaces", func(t *testing.T) {
		list, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list namespaces: %v", err)
		}
		found := false
		for _, ns := range list.Items {
			found = found || ns.Name == metav1.NamespaceDefault
		}
		if !found {
			t.Errorf("namespace %q not listed in %d namespaces", metav1.NamespaceDefault, len(list.Items))
		}
	})

	t.Run("alice_forbidden_to_list_pods", func(t *testing.T) {
		_, err := cp.Clientset(framework.UserAlice).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("alice lists pods: got err %v, want Forbidden", err)
		}
	})

	t.Run("version", func(t *testing.T) {
		v, err := admin.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("server version: %v", err)
		}
		want, err := framework.KubeVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v"+want {
			t.Errorf("gitVersion = %q, want v%s (KUBE_VERSION)", v.GitVersion, want)
		}
	})

	t.Run("create_pod_in_new_namespace", func(t *testing.T) {
		if err := cp.CreateNamespace(ctx, "e2e", nil); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if _, err := admin.CoreV1().Pods("e2e").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if !auditSaw(t, cp, "create", "pods", framework.UserAdmin) {
			t.Errorf("audit log has no create of pods by %s", framework.UserAdmin)
		}
	})

	t.Run("restart_apiserver", func(t *testing.T) {
		if err := cp.StopAPIServer(); err != nil {
			t.Fatalf("stop apiserver: %v", err)
		}
		if err := cp.StartAPIServer(ctx); err != nil {
			t.Fatalf("start apiserver: %v", err)
		}
		if _, err := admin.CoreV1().Pods("e2e").Get(ctx, "p", metav1.GetOptions{}); err != nil {
			t.Errorf("get pod after restart: %v", err)
		}
	})

	t.Run("restart_etcd", func(t *testing.T) {
		if err := cp.StopEtcd(); err != nil {
			t.Fatalf("stop etcd: %v", err)
		}
		if err := cp.StartEtcd(ctx); err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		// The apiserver reconnects on its own; give it a moment.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := admin.CoreV1().Pods("e2e").Get(ctx, "p", metav1.GetOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("get pod after etcd restart: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func auditSaw(t *testing.T, cp *framework.ControlPlane, verb, resource, user string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		events, err := cp.AuditEvents()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ev.Verb == verb && ev.ObjectRef != nil && ev.ObjectRef.Resource == resource && ev.User.Username == user {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubectl: the kubectl the e2e tests drive is the pinned one in BinDir,
// and a missing one is an error (the tests fail), never a silent skip or a
// fall-back to whatever kubectl the machine has.
func TestKubectl(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		t.Setenv("LISTPROXY_KUBE_BIN_DIR", t.TempDir())
		if path, err := framework.Kubectl(); err == nil {
			t.Errorf("Kubectl() with an empty bin dir = %q, want an error", path)
		}
	})
	t.Run("pinned", func(t *testing.T) {
		path, err := framework.Kubectl()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(path, "version", "--client", "-o", "json").Output()
		if err != nil {
			t.Fatalf("%s version --client: %v", path, err)
		}
		var v struct {
			ClientVersion struct {
				GitVersion string `json:"gitVersion"`
			} `json:"clientVersion"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("decode kubectl version: %v\n%s", err, out)
		}
		want, err := framework.KubeVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.ClientVersion.GitVersion != "v"+want {
			t.Errorf("kubectl client version = %q, want the pinned v%s", v.ClientVersion.GitVersion, want)
		}
	})
}
