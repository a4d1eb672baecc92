package freshness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/listproxy/listproxy/test/framework/binaries"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// etcdBinary is the etcd the integration tests run: $LISTPROXY_ETCD, else the
// selected release's (make deps builds it; see package binaries).
var etcdBinary = func() string {
	if p := os.Getenv("LISTPROXY_ETCD"); p != "" {
		return p
	}
	dir, err := binaries.KubeDir()
	if err != nil {
		return "etcd"
	}
	return filepath.Join(dir, "etcd")
}()

// lockedBuffer collects etcd's output for failure reports.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startEtcd runs a single-member etcd in t.TempDir() on free loopback ports
// and returns a client for it; both are torn down when the test ends. It
// skips the test in -short mode and fails it when the etcd binary is missing
// (`make deps` builds it): a skipped integration test proves nothing.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs etcd")
	}
	if _, err := os.Stat(etcdBinary); err != nil {
		t.Fatalf("etcd binary not available (run make deps, set LISTPROXY_ETCD, or use -short): %v", err)
	}
	ports, err := freeport.Ports(2)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	out := &lockedBuffer{}
	cmd := exec.Command(etcdBinary,
		"--name", "default",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{clientURL},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })

	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.Get(ctx, "health")
		cancel()
		if err == nil {
			return client
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not ready: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
