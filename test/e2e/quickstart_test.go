package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/listproxy/listproxy/test/framework"
)

// TestQuickStart checks what 'make run' and the README's quick start promise
// a newcomer, with the machine's kubectl against a listproxy configured as
// 'make run' configures it: the kubectl commands offered, plain
// 'kubectl get pods -A' (a Table) first, are answered from snapshots, a
// Table of whole objects (--sort-by) passes through, the curl shows the
// response header, and the /metrics pattern shows the offload.
func TestQuickStart(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 30, 0, 2)
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint)
	ctx := context.Background()
	if err := framework.WarmList(ctx, http.DefaultClient, lp.URL, "/api/v1/pods"); err != nil {
		t.Fatal(err)
	}
	if err := framework.WarmTable(ctx, http.DefaultClient, lp.URL, "/api/v1/pods"); err != nil {
		t.Fatal(err)
	}
	kubectl := newKubectlRunner(t, cp, lp.URL)

	lists := func(source string) float64 {
		return framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_http_requests_total", `verb="list"`, `source="`+source+`"`)
	}
	// run runs kubectl and waits until listproxy has counted its LISTs (a
	// request is counted as its handler returns, which may be after kubectl
	// read the answer); it returns how many each source answered.
	run := func(t *testing.T, args []string, wantSource string) (snapshot, apiserver float64) {
		t.Helper()
		snap0, api0 := lists("snapshot"), lists("apiserver")
		out := kubectl.run(t, args...)
		if !strings.Contains(out, "pod-") && !strings.Contains(out, "pod/") {
			t.Fatalf("kubectl %s printed no pods:\n%.500s", strings.Join(args, " "), out)
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			snapshot, apiserver = lists("snapshot")-snap0, lists("apiserver")-api0
			if wantSource == "snapshot" {
				return snapshot > 0, nil
			}
			return apiserver > 0, nil
		})
		if err != nil {
			t.Fatalf("kubectl %s: LISTs from snapshots %v, from the apiserver %v; want some from %s: %v",
				strings.Join(args, " "), snapshot, apiserver, wantSource, err)
		}
		return snapshot, apiserver
	}

	for _, args := range framework.QuickStartKubectl {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			if _, apiserver := run(t, args, "snapshot"); apiserver != 0 {
				t.Errorf("kubectl %s: %v LISTs passed through, want all from snapshots", strings.Join(args, " "), apiserver)
			}
		})
	}

	// The README says a Table of whole objects passes through.
	t.Run("sort_by_passes_through", func(t *testing.T) {
		if snapshot, _ := run(t, []string{"get", "pods", "-A", "--sort-by=.metadata.name"}, "apiserver"); snapshot != 0 {
			t.Errorf("kubectl get pods -A --sort-by: %v LISTs from snapshots; the README says Tables of whole objects pass through", snapshot)
		}
	})

	t.Run("curl_header", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skipf("curl not found: %v", err)
		}
		out, err := exec.CommandContext(t.Context(), curl, framework.QuickStartCurl(lp.URL)...).Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		if !regexp.MustCompile(`(?im)^x-listproxy-served-from: snapshot\r?$`).Match(out) {
			t.Errorf("curl %s headers do not say snapshot:\n%s", strings.Join(framework.QuickStartCurl(lp.URL), " "), out)
		}
	})

	t.Run("metrics_offload_line", func(t *testing.T) {
		_, body := httpGetCode(t, lp.URL+"/metrics")
		re := regexp.MustCompile(framework.QuickStartOffloadPattern)
		var matched []string
		for _, line := range strings.Split(body, "\n") {
			if re.MatchString(line) {
				matched = append(matched, line)
			}
		}
		joined := strings.Join(matched, "\n")
		if !strings.Contains(joined, `source="snapshot"`) || !strings.Contains(joined, `source="apiserver"`) {
			t.Errorf("grep '%s' shows no snapshot-vs-apiserver split:\n%s", framework.QuickStartOffloadPattern, joined)
		}
	})
}
