// Package framework runs a real control plane — etcd, kube-apiserver and
// optionally kube-controller-manager — on free loopback ports for e2e tests
// and for `make run`. Nothing here is a mock: the binaries are the pinned
// builds of the release KUBE_VERSION selects, in _output/kube-vVERSION/bin
// (see hack/build-deps.sh and package binaries).
package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework/binaries"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// Users with static tokens. Admin is in system:masters; the others are
// ordinary users with no groups beyond system:authenticated and no RBAC grants.
const (
	UserAdmin = "admin"
	UserAlice = "alice"
	UserBob   = "bob"
)

// startTimeout bounds each wait for a component to become ready.
const startTimeout = 60 * time.Second

// etcdStopGrace bounds etcd's graceful stop. With kube-apiserver connected,
// etcd waits its full request timeout (7 s, measured) for watch streams
// before exiting; a kill is as good for tests, since etcd is crash-safe.
const etcdStopGrace = 2 * time.Second

// clientQPS and clientBurst are set on every rest.Config handed out: tests
// and seeding create thousands of objects, and client-go's default of 5 QPS
// would make them crawl.
const (
	clientQPS   = 500
	clientBurst = 1000
)

// User is an extra static-token user for ControlPlaneConfig.ExtraUsers.
type User struct {
	Name   string
	Groups []string
}

// ControlPlaneConfig configures StartControlPlane.
type ControlPlaneConfig struct {
	// Dir holds data, certificates and logs. It is created if missing.
	Dir string
	// Controllers also runs kube-controller-manager with the namespace,
	// serviceaccount, serviceaccount-token and garbagecollector controllers.
	Controllers bool
	// ExtraAPIServerArgs are appended to the kube-apiserver command line.
	ExtraAPIServerArgs []string
	// ExtraUsers get static tokens in addition to admin, alice and bob.
	ExtraUsers []User
	// EtcdMembers is the size of the etcd cluster: 0 or 1 runs one member;
	// 3 runs a cluster as an HA control plane does, and kube-apiserver is
	// given every member.
	EtcdMembers int
	// Log receives progress lines. Nil means discard.
	Log io.Writer
}

// ControlPlane is a running etcd + kube-apiserver (+ controllers). All
// processes listen on 127.0.0.1 only. Stop must be called to end them.
type ControlPlane struct {
	Dir          string
	EtcdEndpoint string // the first member's http://127.0.0.1:PORT
	// EtcdEndpoints are every member's client URL, in member order.
	EtcdEndpoints []string
	APIServerURL  string // https://127.0.0.1:PORT
	CAFile        string // CA of the apiserver serving certificate and client certificates
	AuditLogFile  string // JSON lines, one audit.k8s.io/v1 Event per line, level Metadata
	// AdminConfig is user "admin" (group system:masters), token auth.
	AdminConfig *rest.Config

	cfg    ControlPlaneConfig
	binDir string
	log    io.Writer
	ca     *ca
	tokens map[string]string // user name -> bearer token

	etcdArgs      [][]string // per member
	apiserverArgs []string
	kcmArgs       []string

	mu        sync.Mutex
	etcd      []*Process // per member, guarded by mu; nil when stopped
	apiserver *Process   // guarded by mu; nil when stopped
	kcm       *Process   // guarded by mu; nil when stopped or not configured
}

// BinDir returns the directory holding the selected Kubernetes release's
// etcd, kube-apiserver, kube-controller-manager and kubectl (see
// binaries.KubeDir: KUBE_VERSION picks the release).
func BinDir() (string, error) {
	return binaries.KubeDir()
}

// KubeVersion returns the selected Kubernetes release, e.g. "1.37.2" (see
// binaries.KubeVersion).
func KubeVersion() (string, error) {
	return binaries.KubeVersion()
}

// ToolsBinDir returns the directory holding the version-independent tools
// (listproxy, prometheus, promtool, helm; see binaries.ToolsDir).
func ToolsBinDir() (string, error) {
	return binaries.ToolsDir()
}

// Kubectl returns the path of the pinned kubectl that `make deps` builds into
// BinDir, the same version as the control plane. It is an error, not a reason
// to skip, when it is missing: the e2e tests that drive kubectl are the proof
// that a real client works through listproxy.
func Kubectl() (string, error) {
	binDir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(binDir, "kubectl")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("pinned kubectl missing (run `make deps`): %w", err)
	}
	return path, nil
}

// RepoRoot returns the main module's root (see binaries.RepoRoot).
func RepoRoot() (string, error) {
	return binaries.RepoRoot()
}

// StartControlPlane starts etcd, kube-apiserver and, if cfg.Controllers,
// kube-controller-manager, and waits until they are ready. ctx bounds the
// start-up only; the processes run until Stop. On error nothing is left running.
func StartControlPlane(ctx context.Context, cfg ControlPlaneConfig) (*ControlPlane, error) {
	begin := time.Now()
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("control-plane binary missing (run `make deps`): %w", err)
		}
	}
	if cfg.Dir == "" {
		return nil, errors.New("ControlPlaneConfig.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("control-plane dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("control-plane dir: %w", err)
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	cp := &ControlPlane{
		Dir:          dir,
		CAFile:       filepath.Join(dir, "ca.crt"),
		AuditLogFile: filepath.Join(dir, "audit.log"),
		cfg:          cfg,
		binDir:       binDir,
		log:          logw,
		tokens:       map[string]string{},
	}
	if err := cp.prepare(); err != nil {
		return nil, err
	}

	// On a start failure, stop what did start; the start error is what the
	// caller needs, and a Stop failure would only hide it.
	if err := cp.StartEtcd(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if cfg.Controllers {
		if err := cp.startControllers(ctx); err != nil {
			_ = cp.Stop()
			return nil, err
		}
	}
	cp.logf("control plane ready in %s (dir %s)", time.Since(begin).Round(time.Millisecond), dir)
	return cp, nil
}

// prepare picks ports and writes certificates, keys, tokens and policies.
func (cp *ControlPlane) prepare() error {
	members := max(cp.cfg.EtcdMembers, 1)
	nports := 2*members + 1
	if cp.cfg.Controllers {
		nports++
	}
	ports, err := freeport.Ports(nports)
	if err != nil {
		return err
	}
	etcdPorts, ports := ports[:2*members], ports[2*members:]
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])

	cp.ca, err = newCA()
	if err != nil {
		return err
	}
	servingCert, servingKey, err := cp.ca.issue("kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
	if err != nil {
		return fmt.Errorf("apiserver serving certificate: %w", err)
	}
	path := func(name string) string { return filepath.Join(cp.Dir, name) }
	saKey := path("service-account.key")
	files := map[string][]byte{
		"ca.crt":            cp.ca.pem,
		"apiserver.crt":     servingCert,
		"apiserver.key":     servingKey,
		"audit-policy.yaml": []byte(auditPolicy),
	}
	users := append([]User{
		{Name: UserAdmin, Groups: []string{"system:masters"}},
		{Name: UserAlice},
		{Name: UserBob},
	}, cp.cfg.ExtraUsers...)
	var csv strings.Builder
	for _, u := range users {
		token, err := randomToken()
		if err != nil {
			return err
		}
		cp.tokens[u.Name] = token
		fmt.Fprintf(&csv, "%s,%s,%s", token, u.Name, u.Name)
		if len(u.Groups) > 0 {
			fmt.Fprintf(&csv, ",%q", strings.Join(u.Groups, ","))
		}
		csv.WriteString("\n")
	}
	files["tokens.csv"] = []byte(csv.String())
	for name, data := range files {
		if err := os.WriteFile(path(name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if err := writeServiceAccountKey(saKey); err != nil {
		return err
	}
	cp.AdminConfig = cp.UserConfig(UserAdmin)

	cp.prepareEtcd(members, etcdPorts)
	cp.apiserverArgs = append([]string{
		"--etcd-servers=" + strings.Join(cp.EtcdEndpoints, ","),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + path("apiserver-certs"),
		"--tls-cert-file=" + path("apiserver.crt"),
		"--tls-private-key-file=" + path("apiserver.key"),
		"--client-ca-file=" + cp.CAFile,
		"--token-auth-file=" + path("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--audit-policy-file=" + path("audit-policy.yaml"),
		"--audit-log-path=" + cp.AuditLogFile,
		"--audit-log-format=json",
		// The endpoint reconciler rejects a loopback advertise address
		// ("may not be in the loopback range") and logs the error every 10 s;
		// nothing here needs Endpoints for service "kubernetes".
		"--endpoint-reconciler-type=none",
		// Without this the HTTP server waits up to --request-timeout (60 s)
		// for open watches on SIGTERM; with it, at most 2 s.
		"--shutdown-send-retry-after=true",
	}, cp.cfg.ExtraAPIServerArgs...)
	if cp.cfg.Controllers {
		kubeconfig := path("admin.kubeconfig")
		if err := cp.WriteKubeconfig(kubeconfig, "", UserAdmin, false); err != nil {
			return err
		}
		cp.kcmArgs = []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=namespace,serviceaccount,serviceaccount-token,garbagecollector",
			"--service-account-private-key-file=" + saKey,
			"--root-ca-file=" + cp.CAFile,
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[1]),
			"--cert-dir=" + path("kcm-certs"),
		}
	}
	return nil
}

// prepareEtcd sets the endpoints and command lines of an etcd cluster of
// members, given two ports per member (client, peer). One member keeps the
// names a single etcd always had (member "default", etcd-data, etcd.log).
func (cp *ControlPlane) prepareEtcd(members int, ports []int) {
	var cluster []string
	peers := make([]string, members)
	for i := range members {
		cp.EtcdEndpoints = append(cp.EtcdEndpoints, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		cluster = append(cluster, cp.etcdMemberName(i)+"="+peers[i])
	}
	cp.EtcdEndpoint = cp.EtcdEndpoints[0]
	cp.etcd = make([]*Process, members)
	for i := range members {
		dataDir := "etcd-data"
		if members > 1 {
			dataDir = cp.etcdMemberName(i) + "-data"
		}
		cp.etcdArgs = append(cp.etcdArgs, []string{
			"--name=" + cp.etcdMemberName(i),
			"--data-dir=" + filepath.Join(cp.Dir, dataDir),
			"--listen-client-urls=" + cp.EtcdEndpoints[i],
			"--advertise-client-urls=" + cp.EtcdEndpoints[i],
			"--listen-peer-urls=" + peers[i],
			"--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(cluster, ","),
			"--initial-cluster-state=new",
			"--quota-backend-bytes=" + strconv.Itoa(8<<30),
			"--unsafe-no-fsync",
			"--log-level=warn",
		})
	}
}

// etcdMemberName is member i's name, which is also its process and log name.
func (cp *ControlPlane) etcdMemberName(i int) string {
	if max(cp.cfg.EtcdMembers, 1) == 1 {
		return "default"
	}
	return fmt.Sprintf("etcd-%d", i)
}

// etcdProcessName is the process (and log file) name of member i.
func (cp *ControlPlane) etcdProcessName(i int) string {
	if len(cp.EtcdEndpoints) == 1 {
		return "etcd"
	}
	return cp.etcdMemberName(i)
}

// auditPolicy records every request at Metadata level (who did what to which
// object), without the RequestReceived stage that would double each entry.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// StartEtcd starts every etcd member on its ports and data dir and waits
// until each serves a linearizable read (which needs the cluster's quorum,
// so all members start before the first wait). ctx bounds the wait.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	begin := time.Now()
	procs := make([]*Process, len(cp.EtcdEndpoints))
	for i := range cp.EtcdEndpoints {
		p, err := cp.startProcess(&cp.etcd[i], cp.etcdProcessName(i), "etcd", cp.etcdArgs[i], etcdStopGrace)
		if err != nil {
			return err
		}
		procs[i] = p
	}
	for i, p := range procs {
		if err := cp.waitEtcdMember(ctx, i, p); err != nil {
			return err
		}
	}
	cp.logf("etcd ready at %s in %s", strings.Join(cp.EtcdEndpoints, ","), time.Since(begin).Round(time.Millisecond))
	return nil
}

// StartEtcdMember starts member i again (its data dir is kept) and waits
// until it serves a linearizable read. ctx bounds the wait.
func (cp *ControlPlane) StartEtcdMember(ctx context.Context, i int) error {
	p, err := cp.startProcess(&cp.etcd[i], cp.etcdProcessName(i), "etcd", cp.etcdArgs[i], etcdStopGrace)
	if err != nil {
		return err
	}
	return cp.waitEtcdMember(ctx, i, p)
}

func (cp *ControlPlane) waitEtcdMember(ctx context.Context, i int, p *Process) error {
	return waitFor(ctx, p, p.Name, func(ctx context.Context) error {
		return etcdHealthy(ctx, cp.EtcdEndpoints[i])
	})
}

// etcdHealthy checks the quiet HTTP /health endpoint first, so the etcd
// client does not log retries while etcd is still starting, then does a
// linearizable Get as the real readiness test.
func etcdHealthy(ctx context.Context, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s", resp.Status)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 2 * time.Second,
		Context:     ctx,
	})
	if err != nil {
		return err
	}
	// A probe client: closing it cannot change the health verdict.
	defer func() { _ = client.Close() }()
	_, err = client.Get(ctx, "/", clientv3.WithCountOnly())
	return err
}

// StopEtcd stops every etcd member; ports and data dirs are kept for
// StartEtcd.
func (cp *ControlPlane) StopEtcd() error {
	var errs []error
	for i := range cp.etcd {
		errs = append(errs, cp.StopEtcdMember(i))
	}
	return errors.Join(errs...)
}

// StopEtcdMember stops member i; its port and data dir are kept for
// StartEtcdMember.
func (cp *ControlPlane) StopEtcdMember(i int) error { return cp.stopProcess(&cp.etcd[i]) }

// KillEtcdMember ends member i with SIGKILL, as a crash, and waits for the
// exit; StartEtcdMember starts it again.
func (cp *ControlPlane) KillEtcdMember(i int) error { return cp.killProcess(&cp.etcd[i]) }

// EtcdLeader returns the index of the member that is the etcd cluster's
// leader, as the members that answer within a second see it.
func (cp *ControlPlane) EtcdLeader(ctx context.Context) (int, error) {
	var errs []error
	ids := make([]uint64, len(cp.EtcdEndpoints))
	var leader uint64
	for i, ep := range cp.EtcdEndpoints {
		id, l, err := etcdStatus(ctx, ep)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		ids[i] = id
		if l != 0 {
			leader = l
		}
	}
	for i, id := range ids {
		if id != 0 && id == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no etcd leader among %d members: %w", len(ids), errors.Join(errs...))
}

// etcdStatus asks the member at endpoint for its id and the leader it
// follows, within a second.
func etcdStatus(ctx context.Context, endpoint string) (id, leader uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Context: ctx})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = client.Close() }()
	st, err := client.Status(ctx, endpoint)
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

// CompactEtcd compacts etcd (any of endpoints, its members) physically at
// its current revision and returns that revision. With asAPIServer it first
// records the revision under compact_rev_key, as kube-apiserver's own
// compaction does (every apiserver watches that key to learn of
// compactions); the record is a write, so the compacted revision is then one
// below the current one.
func CompactEtcd(ctx context.Context, endpoints []string, asAPIServer bool) (int64, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	resp, err := client.Get(ctx, "compact_rev_key", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	if asAPIServer {
		if _, err := client.Put(ctx, "compact_rev_key", strconv.FormatInt(rev, 10)); err != nil {
			return 0, err
		}
	}
	if _, err := client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compact at %d: %w", rev, err)
	}
	return rev, nil
}

// StartAPIServer starts kube-apiserver on its port with the same flags and
// waits until /readyz is 200 and the default namespace and RBAC bootstrap
// roles exist. ctx bounds the wait.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	p, err := cp.startProcess(&cp.apiserver, "kube-apiserver", "kube-apiserver", cp.apiserverArgs, 0)
	if err != nil {
		return err
	}
	begin := time.Now()
	if err := cp.waitAPIServer(ctx, p, cp.APIServerURL); err != nil {
		return err
	}
	cp.logf("kube-apiserver ready at %s in %s", cp.APIServerURL, time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitAPIServer waits until the kube-apiserver p serving at serverURL
// answers /readyz with 200 and the default namespace and RBAC bootstrap
// roles exist.
func (cp *ControlPlane) waitAPIServer(ctx context.Context, p *Process, serverURL string) error {
	cfg := cp.UserConfig(UserAdmin)
	cfg.Host = serverURL
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("apiserver client: %w", err)
	}
	defer httpClient.CloseIdleConnections()
	client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("apiserver client: %w", err)
	}
	return waitFor(ctx, p, p.Name, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, serverURL+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
		}
		if _, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
			return err
		}
		for _, role := range []string{"cluster-admin", "admin", "edit", "view"} {
			if _, err := client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// StopAPIServer stops kube-apiserver; its port and flags are kept for
// StartAPIServer.
func (cp *ControlPlane) StopAPIServer() error { return cp.stopProcess(&cp.apiserver) }

// KillAPIServer ends kube-apiserver with SIGKILL, as a crash, and waits
// for the exit; StartAPIServer starts it again.
func (cp *ControlPlane) KillAPIServer() error { return cp.killProcess(&cp.apiserver) }

// startControllers starts kube-controller-manager and waits until the
// serviceaccount controller has created "default" in namespace default.
func (cp *ControlPlane) startControllers(ctx context.Context) error {
	p, err := cp.startProcess(&cp.kcm, "kube-controller-manager", "kube-controller-manager", cp.kcmArgs, 0)
	if err != nil {
		return err
	}
	begin := time.Now()
	client := cp.Clientset(UserAdmin)
	err = waitFor(ctx, p, "kube-controller-manager", func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err != nil {
		return err
	}
	cp.logf("kube-controller-manager ready in %s", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Stop stops the controllers, kube-apiserver and etcd, in that order, and
// waits for them to exit. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	return errors.Join(
		cp.stopProcess(&cp.kcm),
		cp.stopProcess(&cp.apiserver),
		cp.StopEtcd(),
	)
}

// LogFiles returns the paths of the component logs.
func (cp *ControlPlane) LogFiles() []string {
	var files []string
	for i := range cp.EtcdEndpoints {
		files = append(files, filepath.Join(cp.Dir, cp.etcdProcessName(i)+".log"))
	}
	files = append(files, filepath.Join(cp.Dir, "kube-apiserver.log"))
	if cp.cfg.Controllers {
		files = append(files, filepath.Join(cp.Dir, "kube-controller-manager.log"))
	}
	return files
}

// Processes returns the running processes, for callers that record their ids.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var ps []*Process
	for _, p := range append(append([]*Process{}, cp.etcd...), cp.apiserver, cp.kcm) {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// UserToken returns the bearer token of a static-token user. It panics for
// an unknown user.
func (cp *ControlPlane) UserToken(user string) string {
	token, ok := cp.tokens[user]
	if !ok {
		panic(fmt.Sprintf("framework: unknown user %q", user))
	}
	return token
}

// UserConfig returns a new rest.Config for the apiserver as user, with token
// auth and QPS raised for tests. It panics for an unknown user.
func (cp *ControlPlane) UserConfig(user string) *rest.Config {
	return &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     cp.UserToken(user),
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.CAFile},
		QPS:             clientQPS,
		Burst:           clientBurst,
	}
}

// ClientCertConfig returns a new rest.Config that authenticates with a
// client certificate for user and groups, signed by the apiserver's client CA.
func (cp *ControlPlane) ClientCertConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.ca.issue(user, groups, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", user, err)
	}
	return &rest.Config{
		Host: cp.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   cp.CAFile,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		QPS:   clientQPS,
		Burst: clientBurst,
	}, nil
}

// Clientset returns a typed client for user. It panics for an unknown user.
func (cp *ControlPlane) Clientset(user string) *kubernetes.Clientset {
	client, err := kubernetes.NewForConfig(cp.UserConfig(user))
	if err != nil {
		panic(fmt.Sprintf("framework: clientset for %s: %v", user, err))
	}
	return client
}

// CreateNamespace creates namespace name and makes sure its "default"
// service account exists (the ServiceAccount admission plugin rejects pods
// until it does; without Controllers nothing else creates it).
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	client := cp.Clientset(UserAdmin)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/default: %w", name, err)
	}
	return nil
}

// startProcess starts the component binary bin as name (its log is
// name.log) into slot; stopGrace 0 means the default.
func (cp *ControlPlane) startProcess(slot **Process, name, bin string, args []string, stopGrace time.Duration) (*Process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if *slot != nil {
		if exited, _ := (*slot).Exited(); !exited {
			return nil, fmt.Errorf("%s is already running (pid %d)", name, (*slot).Pid())
		}
	}
	cp.logf("starting %s", name)
	p, err := StartProcess(name, filepath.Join(cp.binDir, bin), args, filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	p.StopGrace = stopGrace
	*slot = p
	return p, nil
}

// takeProcess empties slot and returns what it held, nil when stopped.
func (cp *ControlPlane) takeProcess(slot **Process) *Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p := *slot
	*slot = nil
	return p
}

func (cp *ControlPlane) stopProcess(slot **Process) error {
	p := cp.takeProcess(slot)
	if p == nil {
		return nil
	}
	begin := time.Now()
	if err := p.Stop(); err != nil {
		return err
	}
	cp.logf("stopped %s in %s", p.Name, time.Since(begin).Round(time.Millisecond))
	return nil
}

func (cp *ControlPlane) killProcess(slot **Process) error {
	p := cp.takeProcess(slot)
	if p == nil {
		return nil
	}
	if err := p.Kill(); err != nil {
		return err
	}
	cp.logf("killed %s", p.Name)
	return nil
}

func (cp *ControlPlane) logf(format string, args ...any) {
	fmt.Fprintf(cp.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// waitFor polls check until it succeeds, p exits, startTimeout passes or ctx
// ends. Errors include the last check error and the tail of p's log.
func waitFor(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var last error
	for {
		checkCtx, cancelCheck := context.WithTimeout(ctx, 5*time.Second)
		last = check(checkCtx)
		cancelCheck()
		if last == nil {
			return nil
		}
		select {
		case <-p.Done():
			return p.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last error: %w)\n%s", what, ctx.Err(), last, LogTail(p.LogFile, 50))
		case <-ticker.C:
		}
	}
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
