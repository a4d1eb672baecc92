package framework

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// QuickStartKubectl are the kubectl commands 'make run' offers as answered
// from listproxy's snapshots (kubectl asks for JSON for these outputs and
// pages with limit=500). test/e2e's TestQuickStart runs them and checks that
// they are.
var QuickStartKubectl = [][]string{
	{"get", "pods", "-A"},
	{"get", "pods", "-A", "-o", "wide", "--show-labels"},
	{"get", "pods", "-A", "-o", "json"},
}

// QuickStartCurl returns the arguments of the curl that 'make run' prints to
// show who answered a LIST: it prints the response headers. The user agent
// is not curl's: the apiserver pretty-prints JSON for curl, wget and
// browsers, and listproxy passes pretty-printed LISTs through.
func QuickStartCurl(baseURL string) []string {
	return []string{"-s", "-D", "-", "-o", "/dev/null", "-A", "kubectl", baseURL + "/api/v1/pods?limit=1"}
}

// QuickStartOffloadPattern selects the lines of listproxy's /metrics that
// show LISTs answered from snapshots next to those passed through
// ('make run' prints it as a grep pattern).
const QuickStartOffloadPattern = `^listproxy_http_requests_total{.*verb="list"`

// WarmList polls a JSON LIST of path (e.g. /api/v1/pods) at resourceVersion 0
// through the listproxy at baseURL until a snapshot answers it: listproxy
// fills a resource's store on its first LIST, which waits for that (up to
// --cold-store-wait) and passes through past it (limit=1, no selector). It
// gives up after a minute or when ctx ends.
func WarmList(ctx context.Context, client *http.Client, baseURL, path string) error {
	return warm(ctx, client, baseURL, path, "application/json")
}

// WarmTable is WarmList for the Table store of path's resource (what
// plain kubectl get asks for).
func WarmTable(ctx context.Context, client *http.Client, baseURL, path string) error {
	return warm(ctx, client, baseURL, path, "application/json;as=Table;v=v1;g=meta.k8s.io")
}

func warm(ctx context.Context, client *http.Client, baseURL, path, accept string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path+"?resourceVersion=0&limit=1", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Accept", accept)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status + ", served from " + resp.Header.Get("X-Listproxy-Served-From")
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Listproxy-Served-From") == "snapshot", nil
	})
	if err != nil {
		return fmt.Errorf("LIST %s never answered from a snapshot (last: %s): %w", path, last, err)
	}
	return nil
}
