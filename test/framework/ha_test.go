package framework_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/test/framework"
)

// An HA control plane — a 3-member etcd, two kube-apiservers behind the
// balancer — keeps serving clients of the balancer through each fault the
// HA tests inject: the etcd leader killed (a new one is elected, and the
// member rejoins with what it missed), a kube-apiserver killed, one paused.
func TestHA(t *testing.T) {
	h := framework.StartHA(t, framework.ControlPlaneConfig{}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if got := len(h.CP.EtcdEndpoints); got != 3 {
		t.Fatalf("%d etcd endpoints, want 3", got)
	}
	// A write in flight while etcd elects a leader or an apiserver dies can
	// fail ("request timed out, possibly due to previous leader failure",
	// a reset connection), and one on a connection to a paused apiserver
	// hangs, as in a real cluster; clients retry, here each time on a new
	// connection (a custom dialer keeps client-go from sharing transports).
	write := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cfg := h.UserConfig(framework.UserAdmin)
			cfg.Dial = (&net.Dialer{Timeout: time.Second}).DialContext
			cfg.Timeout = 3 * time.Second
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return false, err
			}
			_, err = client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Logf("create %s: %v", name, err)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	t.Run("etcd_leader_killed", func(t *testing.T) {
		leader, err := h.KillEtcdLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			write(fmt.Sprintf("during-%d", i))
		}
		next, err := h.CP.EtcdLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if next == leader {
			t.Errorf("leader is still member %d after it was killed", leader)
		}
		if err := h.CP.StartEtcdMember(ctx, leader); err != nil {
			t.Fatal(err)
		}
		// A linearizable read through the restarted member must see the
		// writes made while it was down.
		member, err := clientv3.New(clientv3.Config{Endpoints: []string{h.CP.EtcdEndpoints[leader]}, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = member.Close() }()
		resp, err := member.Get(ctx, "/registry/configmaps/default/during-", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 3 {
			t.Errorf("the restarted member holds %d of the 3 configmaps written while it was down", resp.Count)
		}
	})

	t.Run("apiserver_killed_then_another_paused", func(t *testing.T) {
		if err := h.KillAPIServer(0); err != nil {
			t.Fatal(err)
		}
		write("apiserver-0-killed")
		if err := h.StartAPIServer(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.PauseAPIServer(ctx, 1); err != nil {
			t.Fatal(err)
		}
		write("apiserver-1-paused")
		if err := h.ResumeAPIServer(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if h.Balancer.BackendConnections(1) == 0 {
			t.Errorf("the balancer never sent a connection to kube-apiserver 1")
		}
	})
}
