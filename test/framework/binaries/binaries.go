// Package binaries says where the pinned binaries the tests, `make run` and
// `make bench` execute are: the control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubectl) of the selected Kubernetes version, built
// per version by hack/build-deps.sh, and the version-independent tools
// (listproxy, prometheus, promtool, helm, golangci-lint). It is the one place
// that maps a version to a directory.
package binaries

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables that select binaries.
const (
	// EnvKubeVersion selects the control-plane release, e.g. "1.31.14".
	// Unset means the default in hack/kube-versions.
	EnvKubeVersion = "KUBE_VERSION"
	// EnvKubeBinDir, when set, is the control-plane directory itself and
	// overrides EnvKubeVersion.
	EnvKubeBinDir = "LISTPROXY_KUBE_BIN_DIR"
	// EnvToolsBinDir, when set, holds the version-independent tools.
	EnvToolsBinDir = "LISTPROXY_BIN_DIR"
)

// KubeVersion returns the selected control-plane release without a leading
// "v": $KUBE_VERSION if set, else the default line of hack/kube-versions.
func KubeVersion() (string, error) {
	if v := os.Getenv(EnvKubeVersion); v != "" {
		return strings.TrimPrefix(v, "v"), nil
	}
	return listedVersion("default")
}

// CompatVersion returns the old release of hack/kube-versions that the
// compatibility stage of `make test` runs against.
func CompatVersion() (string, error) {
	return listedVersion("compat")
}

// KubeDir returns the directory holding the selected release's etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kubectl:
// $LISTPROXY_KUBE_BIN_DIR if set, else <repo root>/_output/kube-vVERSION/bin.
func KubeDir() (string, error) {
	if dir := os.Getenv(EnvKubeBinDir); dir != "" {
		return filepath.Abs(dir)
	}
	v, err := KubeVersion()
	if err != nil {
		return "", err
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "kube-v"+v, "bin"), nil
}

// ToolsDir returns the directory holding the version-independent tools:
// $LISTPROXY_BIN_DIR if set, else <repo root>/_output/bin.
func ToolsDir() (string, error) {
	if dir := os.Getenv(EnvToolsBinDir); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "bin"), nil
}

// RepoRoot returns the nearest parent of the working directory that holds a
// go.mod. Test binaries run in their package directory, so this is the main
// module's root (hack/tools/* have their own go.mod but nothing runs from there).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// listedVersion reads the version on the line of hack/kube-versions that
// starts with key.
func listedVersion(key string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "hack", "kube-versions")
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("kube versions: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: a close error changes nothing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == key {
			return strings.TrimPrefix(fields[1], "v"), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("kube versions: %w", err)
	}
	return "", fmt.Errorf("kube versions: no %q line in %s", key, path)
}
