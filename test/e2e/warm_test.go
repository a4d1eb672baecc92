package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
)

// TestWarmStartFromPeer: replicas started with --warm-from their balancer
// (the Helm chart's Service) read each preloaded store's first list from a
// ready peer and only watch the apiserver. A replica restarted while
// configmaps are being written costs the apiserver no LIST at all, and its
// stores then hold exactly the apiserver's state, in both formats. The
// first replica, with no ready peer, is declined at once and lists from the
// apiserver.
func TestWarmStartFromPeer(t *testing.T) {
	const ns, objects = "warm", 200
	cp, ctx := startWithNamespace(t, ns, 4*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	for i := range objects {
		scaleCreate(ctx, t, cs, ns, fmt.Sprintf("warm-%03d", i), "0")
	}
	rs := startReplicaSet(ctx, t, cp, 2,
		"--etcd-servers="+cp.EtcdEndpoint, "--resources=configmaps", "--preload=configmaps,configmaps/json",
		"--consistency-check-interval=0", "--shutdown-delay=0s")
	peerLists := func(i int, result string) float64 {
		m := framework.Scrape(t, nil, rs.Replicas[i].URL()+"/metrics")
		return m.Sum("listproxy_snapshot_peer_lists_total", `resource="configmaps"`, `result="`+result+`"`)
	}
	if ok, failed := peerLists(0, "ok"), peerLists(0, "failed"); ok != 0 || failed != 2 {
		t.Errorf("first replica: %v stores filled from a peer, %v declined; want 0 and 2 (no peer was ready)", ok, failed)
	}

	// Writes go on while replica 1 restarts: the changes between the peer's
	// list and the apiserver watch must reach it. Stopping them lets the
	// write in flight finish (under ctx): a patch cancelled on the client
	// side may still be committed after the apiserver's state is read.
	writeCtx, stopWrites := context.WithCancel(ctx)
	var writes sync.WaitGroup
	writes.Go(func() {
		for v := 1; writeCtx.Err() == nil; v++ {
			patch := fmt.Sprintf(`{"data":{"v":"%d"}}`, v)
			name := fmt.Sprintf("warm-%03d", v%objects)
			if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Errorf("patch %s: %v", name, err)
				return
			}
		}
	})
	// The peer is in the balancer's rotation, as a ready pod is in its
	// Service's endpoints.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return rs.Balancer.Ready(0), nil
	}); err != nil {
		t.Fatalf("replica 0 never ready behind the balancer: %v", err)
	}
	before := apiserverLists(t, cp, "configmaps")
	if err := rs.Terminate(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := apiserverLists(t, cp, "configmaps") - before; got != 0 {
		t.Errorf("the restarted replica cost the apiserver %d LISTs of configmaps, want 0", got)
	}
	if ok, failed := peerLists(1, "ok"), peerLists(1, "failed"); ok != 2 || failed != 0 {
		t.Errorf("restarted replica: %v stores filled from a peer, %v declined; want 2 and 0", ok, failed)
	}
	stopWrites()
	writes.Wait()

	// A consistent read from the restarted replica, in each format,
	// equals the apiserver's state.
	want := configMapValues(t, ctx, cs, ns)
	for _, contentType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		cfg := &rest.Config{Host: rs.Replicas[1].URL(), ContentConfig: rest.ContentConfig{ContentType: contentType}}
		rec := &servedFromRecorder{}
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			rec.next = rt
			return rec
		}
		got := configMapValues(t, ctx, kubernetes.NewForConfigOrDie(cfg), ns)
		if served := rec.get(); len(served) != 1 || served[0] != "snapshot" {
			t.Errorf("%s: LIST served from %q, want snapshot", contentType, served)
		}
		if len(got) != len(want) {
			t.Errorf("%s: the restarted replica lists %d configmaps, the apiserver %d", contentType, len(got), len(want))
		}
		for name, w := range want {
			if g := got[name]; g != w {
				t.Errorf("%s: configmap %s is %v on the restarted replica, %v on the apiserver", contentType, name, g, w)
			}
		}
	}
}

// configMapValues lists ns's configmaps (a consistent read) and returns each
// one's resourceVersion and data by name.
func configMapValues(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) map[string][2]string {
	t.Helper()
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, cm := range list.Items {
		out[cm.Name] = [2]string{cm.ResourceVersion, fmt.Sprint(cm.Data)}
	}
	return out
}

// TestWarmStartFromPeerServiceMode: in service mode a replica warms over
// https from a peer it verifies with --warm-from-ca-file, presenting its own
// upstream bearer token, which the peer authenticates and authorizes like
// any caller's; it costs the apiserver no LIST. A peer it cannot verify
// (its self-signed certificate is not signed by the CA given) is never sent
// a request that succeeds: the replica lists from the apiserver.
func TestWarmStartFromPeerServiceMode(t *testing.T) {
	const ns = "warm-service"
	cp, ctx := startWithNamespace(t, ns, 3*time.Minute)
	cs := cp.Clientset(framework.UserAdmin)
	for i := range 50 {
		scaleCreate(ctx, t, cs, ns, fmt.Sprintf("warm-%02d", i), "0")
	}
	args := []string{"--authentication=delegated", "--client-ca-file=" + cp.CAFile, "--etcd-servers=" + cp.EtcdEndpoint,
		"--resources=configmaps", "--preload=configmaps", "--consistency-check-interval=0"}
	peer := framework.StartListproxy(t, cp, args...)
	peerLists := func(lp *framework.Listproxy, result string) float64 {
		client, err := rest.HTTPClientFor(lp.UserConfig(framework.UserAdmin))
		if err != nil {
			t.Fatal(err)
		}
		m := framework.Scrape(t, client, lp.URL+"/metrics")
		return m.Sum("listproxy_snapshot_peer_lists_total", `resource="configmaps"`, `result="`+result+`"`)
	}

	before := apiserverLists(t, cp, "configmaps")
	warm := framework.StartListproxy(t, cp, append(args, "--warm-from="+peer.URL, "--warm-from-ca-file="+peer.CAFile)...)
	if got := apiserverLists(t, cp, "configmaps") - before; got != 0 {
		t.Errorf("the replica warmed over https cost the apiserver %d LISTs of configmaps, want 0", got)
	}
	if ok := peerLists(warm, "ok"); ok != 1 {
		t.Errorf("%v stores filled from the https peer, want 1", ok)
	}

	unverified := framework.StartListproxy(t, cp, append(args, "--warm-from="+peer.URL, "--warm-from-ca-file="+cp.CAFile)...)
	if ok, failed := peerLists(unverified, "ok"), peerLists(unverified, "failed"); ok != 0 || failed != 1 {
		t.Errorf("peer with a certificate the CA given did not sign: %v stores filled from it, %v failed; want 0 and 1", ok, failed)
	}
	// Both serve the apiserver's configmaps.
	want := configMapValues(t, ctx, cs, ns)
	for name, lp := range map[string]*framework.Listproxy{"warm": warm, "unverified": unverified} {
		got := configMapValues(t, ctx, kubernetes.NewForConfigOrDie(lp.UserConfig(framework.UserAdmin)), ns)
		if len(got) != len(want) {
			t.Errorf("%s: %d configmaps, the apiserver %d", name, len(got), len(want))
		}
		for n, w := range want {
			if got[n] != w {
				t.Errorf("%s: configmap %s is %v, %v on the apiserver", name, n, got[n], w)
			}
		}
	}
}

// TestWarmStartFromPeerOfAnotherCluster: a peer in front of another cluster
// (its own etcd and apiserver) holding configmaps of the same names is not
// trusted, even at a resourceVersion this cluster has passed: the apiserver
// does not hold the first object of its list (another uid), so the replica
// counts the peer's list as rejected and lists from its own apiserver, and
// serves exactly that apiserver's configmaps.
func TestWarmStartFromPeerOfAnotherCluster(t *testing.T) {
	const ns, objects = "warm-other", 20
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	other := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, otherCS := cp.Clientset(framework.UserAdmin), other.Clientset(framework.UserAdmin)
	for _, c := range []struct {
		cp *framework.ControlPlane
		cs kubernetes.Interface
		v  string
	}{{cp, cs, "here"}, {other, otherCS, "there"}} {
		if err := c.cp.CreateNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
		for i := range objects {
			scaleCreate(ctx, t, c.cs, ns, fmt.Sprintf("same-%02d", i), c.v)
		}
	}
	// This cluster passes the other's resourceVersion, so that a check of
	// the peer's resourceVersion alone would not tell them apart.
	otherRV := listRV(ctx, t, otherCS)
	for v := 0; listRV(ctx, t, cs) <= otherRV; v++ {
		patch := fmt.Sprintf(`{"data":{"w":"%d"}}`, v)
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "same-00", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	args := []string{"--resources=configmaps", "--preload=configmaps/json", "--consistency-check-interval=0"}
	peer := framework.StartListproxy(t, other, append(args, "--etcd-servers="+other.EtcdEndpoint)...)
	before := apiserverLists(t, cp, "configmaps")
	replica := framework.StartListproxy(t, cp, append(args, "--etcd-servers="+cp.EtcdEndpoint, "--warm-from="+peer.URL)...)
	m := framework.Scrape(t, nil, replica.URL+"/metrics")
	peerLists := func(result string) float64 {
		return m.Sum("listproxy_snapshot_peer_lists_total", `resource="configmaps"`, `result="`+result+`"`)
	}
	if ok, failed, rejected := peerLists("ok"), peerLists("failed"), peerLists("rejected"); ok != 0 || failed != 0 || rejected != 1 {
		t.Errorf("peer of another cluster: %v stores filled from it, %v failed, %v rejected; want 0, 0 and 1", ok, failed, rejected)
	}
	if got := apiserverLists(t, cp, "configmaps") - before; got < 1 {
		t.Errorf("the replica listed configmaps from its apiserver %d times, want at least once", got)
	}
	// The oracle: the replica's preloaded snapshot holds its apiserver's
	// configmaps.
	want := configMapValues(t, ctx, cs, ns)
	cfg := &rest.Config{Host: replica.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	rec := &servedFromRecorder{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		rec.next = rt
		return rec
	}
	got := configMapValues(t, ctx, kubernetes.NewForConfigOrDie(cfg), ns)
	if served := rec.get(); len(served) != 1 || served[0] != "snapshot" {
		t.Errorf("LIST served from %q, want snapshot", served)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configmaps through the replica (-apiserver +replica):\n%s", diff)
	}
}

// listRV returns the resourceVersion of a consistent LIST of configmaps.
func listRV(ctx context.Context, t *testing.T, cs kubernetes.Interface) uint64 {
	t.Helper()
	list, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}
