package binaries

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeDir: the control-plane directory follows KUBE_VERSION, the listed
// default when it is unset, and an explicit directory over both.
func TestKubeDir(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	def, err := listedVersion("default")
	if err != nil {
		t.Fatal(err)
	}
	explicit := t.TempDir()
	tests := []struct {
		name, version, dir, want string
	}{
		{name: "default", want: filepath.Join(root, "_output", "kube-v"+def, "bin")},
		{name: "version", version: "1.31.14", want: filepath.Join(root, "_output", "kube-v1.31.14", "bin")},
		{name: "leading v", version: "v1.31.14", want: filepath.Join(root, "_output", "kube-v1.31.14", "bin")},
		{name: "explicit dir", version: "1.31.14", dir: explicit, want: explicit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvKubeVersion, tt.version)
			t.Setenv(EnvKubeBinDir, tt.dir)
			got, err := KubeDir()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("KubeDir() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestListedVersions: hack/kube-versions names a default and a compat release.
func TestListedVersions(t *testing.T) {
	for _, key := range []string{"default", "compat"} {
		v, err := listedVersion(key)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(v, "1.") || strings.Count(v, ".") != 2 {
			t.Errorf("%s version = %q, want MAJOR.MINOR.PATCH", key, v)
		}
	}
	if _, err := listedVersion("nonesuch"); err == nil {
		t.Error("listedVersion(nonesuch) succeeded, want an error")
	}
}
