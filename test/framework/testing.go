package framework

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Start starts a control plane for a test in a new temporary directory and
// registers a cleanup that stops it. If the test failed, the directory is
// kept and the cleanup logs where it is and the tail of each log; otherwise
// it is removed, unless $LISTPROXY_KEEP_E2E_DIR is set. cfg.Dir is ignored; a nil cfg.Log logs progress with t.Logf.
func Start(t testing.TB, cfg ControlPlaneConfig) *ControlPlane {
	t.Helper()
	dir, err := os.MkdirTemp("", "listproxy-e2e-")
	if err != nil {
		t.Fatalf("control plane dir: %v", err)
	}
	cfg.Dir = dir
	if cfg.Log == nil {
		cfg.Log = testLogWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := StartControlPlane(ctx, cfg)
	if err != nil {
		t.Fatalf("start control plane (logs kept in %s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
		if !t.Failed() {
			if os.Getenv("LISTPROXY_KEEP_E2E_DIR") == "" {
				if err := os.RemoveAll(dir); err != nil {
					t.Logf("remove control plane dir: %v", err)
				}
			} else {
				t.Logf("control plane dir kept in %s", dir)
			}
			return
		}
		t.Logf("control plane logs kept in %s", dir)
		for _, f := range cp.LogFiles() {
			t.Logf("==== last lines of %s:\n%s", f, LogTail(f, 50))
		}
	})
	return cp
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Scrape is ScrapeMetrics for a test, which it fails on an error. A nil
// client is http.DefaultClient.
func Scrape(t testing.TB, client *http.Client, url string) Metrics {
	t.Helper()
	m, err := ScrapeMetrics(context.Background(), client, url)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
