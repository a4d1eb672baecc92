// Command localup is `make run`: it starts etcd, kube-apiserver and
// kube-controller-manager under _output/local, seeds demo data, starts
// listproxy in front of the apiserver on 127.0.0.1:8001 and waits for Ctrl-C.
//
// Environment:
//
//	LISTPROXY_PORT=8001         listproxy's port
//	LOCALUP_SKIP_LISTPROXY=1    do not run listproxy (kubeconfig points at the apiserver)
//	LOCALUP_LISTPROXY_BIN=PATH  run this listproxy binary instead of _output/bin/listproxy
//
// Arguments after the command are passed to listproxy.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/listproxy/listproxy/test/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "localup: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	localDir := filepath.Join(root, "_output", "local")
	pidFile := filepath.Join(localDir, "pids")
	port := os.Getenv("LISTPROXY_PORT")
	if port == "" {
		port = "8001"
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("LISTPROXY_PORT=%q is not a port number", port)
	}
	skipListproxy := os.Getenv("LOCALUP_SKIP_LISTPROXY") != ""
	listproxyBin := os.Getenv("LOCALUP_LISTPROXY_BIN")
	if listproxyBin == "" {
		listproxyBin = filepath.Join(root, "_output", "bin", "listproxy")
	}
	if !skipListproxy {
		if _, err := os.Stat(listproxyBin); err != nil {
			return fmt.Errorf("listproxy binary missing (run `make build`): %w", err)
		}
	}

	if err := killPrevious(pidFile); err != nil {
		return err
	}
	if err := os.RemoveAll(localDir); err != nil {
		return fmt.Errorf("wipe %s: %w", localDir, err)
	}

	begin := time.Now()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneConfig{
		Dir:         localDir,
		Controllers: true,
		Log:         os.Stdout,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return err
	}
	procs := cp.Processes()
	var listproxy *framework.Process
	defer func() {
		logf("stopping")
		if listproxy != nil {
			if err := listproxy.Stop(); err != nil {
				logf("stop listproxy: %v", err)
			} else {
				logf("stopped listproxy")
			}
		}
		if err := cp.Stop(); err != nil {
			logf("stop control plane: %v", err)
		}
		// The file may not exist if writing it failed; a stale one is
		// checked against the running programs by the next run anyway.
		if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			logf("remove pid file: %v", err)
		}
	}()
	if err := writePIDs(pidFile, procs); err != nil {
		return err
	}

	if err := seedDemo(ctx, cp); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("seed demo data: %w", err)
	}

	adminKubeconfig := filepath.Join(localDir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(adminKubeconfig, "", framework.UserAdmin, false); err != nil {
		return err
	}
	kubeconfig := filepath.Join(localDir, "kubeconfig")
	listproxyURL := "http://127.0.0.1:" + port
	if skipListproxy {
		logf("LOCALUP_SKIP_LISTPROXY is set: not running listproxy")
		if err := cp.WriteKubeconfig(kubeconfig, "", framework.UserAdmin, false); err != nil {
			return err
		}
	} else {
		keysFile := filepath.Join(localDir, "continue-token-keys")
		if err := framework.WriteContinueTokenKeyFile(keysFile); err != nil {
			return err
		}
		args := append([]string{
			"--kubeconfig=" + adminKubeconfig,
			"--listen-address=127.0.0.1:" + port,
			// Consistent reads (what kubectl sends) are served from
			// snapshots once etcd proves them fresh.
			"--etcd-servers=" + cp.EtcdEndpoint,
			"--continue-token-keys-file=" + keysFile,
		}, os.Args[1:]...)
		logf("starting listproxy")
		listproxy, err = framework.StartProcess("listproxy", listproxyBin, args, filepath.Join(localDir, "listproxy.log"))
		if err != nil {
			return err
		}
		if err := writePIDs(pidFile, append(procs, listproxy)); err != nil {
			return err
		}
		if err := waitReady(ctx, listproxy, listproxyURL+"/readyz"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := cp.WriteKubeconfig(kubeconfig, listproxyURL, "", true); err != nil {
			return err
		}
		// Fill the pods stores (JSON and Table) now, so that the first
		// command tried is answered from them rather than waiting for
		// their first list.
		if err := framework.WarmList(ctx, http.DefaultClient, listproxyURL, "/api/v1/pods"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := framework.WarmTable(ctx, http.DefaultClient, listproxyURL, "/api/v1/pods"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	logf("ready in %s", time.Since(begin).Round(time.Millisecond))

	fmt.Println()
	if skipListproxy {
		fmt.Println("The local kube-apiserver is running (listproxy skipped).")
		fmt.Printf("  export KUBECONFIG=%s\n", kubeconfig)
	} else {
		printTryThis(os.Stdout, kubeconfig, listproxyURL)
	}
	fmt.Printf("(apiserver %s, etcd %s, logs in %s)\n", cp.APIServerURL, cp.EtcdEndpoint, localDir)
	fmt.Println("Press Ctrl-C to stop.")

	var listproxyDone <-chan struct{}
	if listproxy != nil {
		listproxyDone = listproxy.Done()
	}
	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case <-listproxyDone:
		return listproxy.ExitError()
	}
}

// printTryThis prints commands whose answers come from listproxy's
// snapshots, and how to see that they did. test/e2e's TestQuickStart runs
// the same commands (framework.QuickStartKubectl) and checks where their
// answers came from.
func printTryThis(w io.Writer, kubeconfig, listproxyURL string) {
	fmt.Fprintf(w, "listproxy is running in front of a local kube-apiserver. Try:\n\n")
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n\n", kubeconfig)
	fmt.Fprintf(w, "  # Answered from listproxy's snapshots (consistent reads, proven fresh via etcd):\n")
	for _, args := range framework.QuickStartKubectl {
		fmt.Fprintf(w, "  kubectl %s\n", strings.Join(args, " "))
	}
	fmt.Fprintf(w, "  # The response header says who answered (curl's own user agent would ask\n")
	fmt.Fprintf(w, "  # for pretty-printed JSON, which passes through):\n")
	curl := framework.QuickStartCurl(listproxyURL)
	last := len(curl) - 1
	fmt.Fprintf(w, "  curl %s '%s' | grep -i x-listproxy-served-from\n", strings.Join(curl[:last], " "), curl[last])
	fmt.Fprintf(w, "  # LISTs answered from snapshots (source=\"snapshot\") vs passed through (source=\"apiserver\"):\n")
	fmt.Fprintf(w, "  curl -s %s/metrics | grep '%s'\n\n", listproxyURL, framework.QuickStartOffloadPattern)
	fmt.Fprintf(w, "  # Also from snapshots: 'kubectl get pods -A -w' (a Table watch).\n")
	fmt.Fprintf(w, "  # Passes through: a Table of whole objects ('kubectl get pods -A --sort-by=...')\n")
	fmt.Fprintf(w, "  # (README, \"What passes through\").\n")
}

// waitReady polls url until it answers 200, p exits, two minutes pass or ctx ends.
func waitReady(ctx context.Context, p *framework.Process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		select {
		case <-p.Done():
			return p.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last error: %w)\n%s", p.Name, ctx.Err(), err, framework.LogTail(p.LogFile, 50))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writePIDs records this process and procs as "pid argv0" lines, so the next
// run can stop them if this one did not get to.
func writePIDs(path string, procs []*framework.Process) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s\n", os.Getpid(), os.Args[0])
	for _, p := range procs {
		fmt.Fprintf(&b, "%d %s\n", p.Pid(), p.Path)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	return nil
}

// killPrevious stops the processes a previous run recorded in path, if they
// are still alive and still run the recorded program (pids get reused). A
// previous localup is stopped first, so it can stop its children cleanly.
func killPrevious(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pid file: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		pidText, argv0, ok := strings.Cut(line, " ")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if !runs(pid, argv0) {
			continue
		}
		logf("stopping %s (pid %d) from a previous run", filepath.Base(argv0), pid)
		if err := terminate(pid); err != nil {
			return err
		}
	}
	return nil
}

// runs reports whether pid is alive (not a zombie) and its argv[0] is argv0.
func runs(pid int, argv0 string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	first, _, _ := strings.Cut(string(cmdline), "\x00")
	if first != argv0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// terminate sends SIGTERM to pid (to its whole group if it leads one), then
// SIGKILL after ten seconds, and waits for it to go.
func terminate(pid int) error {
	target := pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		target = -pid
	}
	argv0 := func() string {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		first, _, _ := strings.Cut(string(cmdline), "\x00")
		return first
	}()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(target, sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return fmt.Errorf("stop pid %d: %w", pid, err)
		}
		for range 100 {
			if !runs(pid, argv0) {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return fmt.Errorf("pid %d did not exit after SIGKILL", pid)
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}
