package freshness

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdReadOnlyRole runs everything the Checker does against etcd as a
// user holding exactly the read-only role docs/rbac.md describes (read on
// the /registry/ prefix and on compact_rev_key), with etcd authentication
// on: the documented identity is enough, and it cannot write.
func TestEtcdReadOnlyRole(t *testing.T) {
	bootstrap := startEtcd(t)
	ctx := testContext(t)
	const role, user, password = "listproxy-read", "listproxy", "listproxy-password"
	steps := []func() error{
		func() error { _, err := bootstrap.RoleAdd(ctx, role); return err },
		func() error {
			_, err := bootstrap.RoleGrantPermission(ctx, role, "/registry/", clientv3.GetPrefixRangeEnd("/registry/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := bootstrap.RoleGrantPermission(ctx, role, DefaultProbeKey, "", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := bootstrap.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := bootstrap.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := bootstrap.UserAdd(ctx, user, password); return err },
		func() error { _, err := bootstrap.UserGrantRole(ctx, user, role); return err },
		func() error { _, err := bootstrap.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth set-up step %d: %v", i, err)
		}
	}
	login := func(name, password string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{
			Endpoints: bootstrap.Endpoints(), Username: name, Password: password,
			DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		})
		if err != nil {
			t.Fatalf("etcd client as %s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	root, ro := login("root", "root-password"), login(user, password)

	// The apiserver's compaction key and some history, then a compaction.
	put(t, root, DefaultProbeKey)
	put(t, root, "/registry/pods/default/a")
	compactAt := put(t, root, "/registry/pods/default/b")
	if _, err := root.Compact(ctx, compactAt); err != nil {
		t.Fatalf("compact: %v", err)
	}

	c := newEtcdChecker(t, ro)
	cur := currentRevision(t, c)
	if cur != compactAt {
		t.Errorf("CurrentRevision() = %d, want %d", cur, compactAt)
	}
	if got, err := c.RefreshCompaction(ctx); err != nil || got != compactAt {
		t.Errorf("RefreshCompaction() = %d, %v; want %d", got, err, compactAt)
	}
	if n, err := c.Count(ctx, "/registry/pods/", cur); err != nil || n != 2 {
		t.Errorf("Count(/registry/pods/) = %d, %v; want 2", n, err)
	}

	// Tracking a prefix: its watch, and progress requests to learn that a
	// revision made elsewhere changed nothing under it.
	tr := c.Track("/registry/pods/", cur)
	defer tr.Stop()
	changed := put(t, root, "/registry/pods/default/c")
	elsewhere := put(t, root, "/registry/services/specs/default/x")
	if got := lastChange(t, tr, elsewhere); got != changed {
		t.Errorf("LastChangeAtOrBefore(%d) = %d, want %d", elsewhere, got, changed)
	}

	// And it cannot write, there or anywhere.
	for _, key := range []string{"/registry/pods/default/evil", DefaultProbeKey, "/elsewhere"} {
		if _, err := ro.Put(ctx, key, "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("put %q as %s: err = %v, want permission denied", key, user, err)
		}
	}
}
