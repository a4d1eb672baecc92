package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runMainEnv makes the test binary run listproxy's command line instead of
// its tests, so that each case applies its logging flags in a fresh process
// (component-base applies a logging configuration once per process).
const runMainEnv = "LISTPROXY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// listproxy runs the command line with args and returns its exit code,
// stdout and stderr.
func listproxy(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestCommandLine(t *testing.T) {
	// A kubeconfig that does not exist stops listproxy right after it has
	// applied its logging configuration and logged its first lines.
	const missing = "--kubeconfig=/nonexistent/kubeconfig"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, stdout, stderr string)
	}{
		{
			name: "version",
			args: []string{"--version"},
			check: func(t *testing.T, stdout, _ string) {
				lines := strings.Split(stdout, "\n")
				if lines[0] != "listproxy 0.1.0" {
					t.Errorf("first line %q, want %q", lines[0], "listproxy 0.1.0")
				}
				for _, mod := range []string{"k8s.io/client-go v", "k8s.io/apimachinery v", "k8s.io/component-base v"} {
					if !strings.Contains(stdout, "\n"+mod) {
						t.Errorf("--version does not name %s...:\n%s", mod, stdout)
					}
				}
			},
		},
		{
			name:     "json_logs",
			args:     []string{"--logging-format=json", missing},
			wantCode: 1,
			check: func(t *testing.T, _, stderr string) {
				msgs := map[string]map[string]any{}
				for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
					var entry map[string]any
					if err := json.Unmarshal([]byte(line), &entry); err != nil {
						t.Fatalf("log line is not JSON: %q (%v)", line, err)
					}
					msg, _ := entry["msg"].(string)
					msgs[msg] = entry
				}
				if got := msgs["Starting listproxy"]["version"]; got != "0.1.0" {
					t.Errorf(`"Starting listproxy" version = %v, want 0.1.0`, got)
				}
				if got, _ := msgs["Cannot start"]["err"].(string); !strings.Contains(got, "--kubeconfig") {
					t.Errorf(`"Cannot start" err = %q, want it to name --kubeconfig`, got)
				}
			},
		},
		{
			name:     "text_logs",
			args:     []string{missing},
			wantCode: 1,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, `] "Cannot start" err="--kubeconfig: `) {
					t.Errorf("stderr lacks the klog text error line:\n%s", stderr)
				}
				if strings.Contains(stderr, "FLAG: ") {
					t.Errorf("flags logged without -v=1:\n%s", stderr)
				}
			},
		},
		{
			name:     "verbosity",
			args:     []string{"-v=1", missing},
			wantCode: 1,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, `FLAG: --kubeconfig="/nonexistent/kubeconfig"`) {
					t.Errorf("-v=1 does not log the flags:\n%s", stderr)
				}
			},
		},
		{
			name:     "unknown_logging_format",
			args:     []string{"--logging-format=yaml"},
			wantCode: 1,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, "--logging-format") {
					t.Errorf("error does not name --logging-format:\n%s", stderr)
				}
			},
		},
		{
			name:     "unknown_flag",
			args:     []string{"--no-such-flag"},
			wantCode: 2,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, "no-such-flag") {
					t.Errorf("error does not name the flag:\n%s", stderr)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := listproxy(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			tc.check(t, stdout, stderr)
		})
	}
}
