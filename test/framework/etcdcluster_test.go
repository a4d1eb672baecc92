package framework_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/test/framework"
)

// A control plane with a 3-member etcd survives its leader's crash: a new
// leader is elected, kube-apiserver (given every member) keeps accepting
// writes, and the crashed member rejoins with what it missed.
func TestEtcdCluster(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{EtcdMembers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if got := len(cp.EtcdEndpoints); got != 3 {
		t.Fatalf("%d etcd endpoints, want 3", got)
	}
	leader, err := cp.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.KillEtcdMember(leader); err != nil {
		t.Fatal(err)
	}
	// A write in flight while etcd elects a new leader can fail ("request
	// timed out, possibly due to previous leader failure"), as it does in a
	// real cluster; clients retry.
	client := cp.Clientset(framework.UserAdmin)
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("during-%d", i)}}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Logf("create %s with the leader down: %v", cm.Name, err)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("create %s with the leader down: %v", cm.Name, err)
		}
	}
	next, err := cp.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Errorf("leader is still member %d after it was killed", leader)
	}
	if err := cp.StartEtcdMember(ctx, leader); err != nil {
		t.Fatal(err)
	}
	// The restarted member alone: a linearizable read through it must see
	// the writes made while it was down.
	member, err := clientv3.New(clientv3.Config{Endpoints: []string{cp.EtcdEndpoints[leader]}, DialTimeout: 2 * time.Second})
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
}
