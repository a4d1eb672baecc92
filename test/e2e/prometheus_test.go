package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/freeport"
)

// Scrape and rule intervals of the test's Prometheus, and what the
// dashboard's $__rate_interval becomes (Grafana uses four scrape intervals).
const (
	promScrapeInterval = "1s"
	promRateInterval   = "4s"
)

// The labels prometheus-operator puts on listproxy's targets, which the
// dashboard's variables select by.
const (
	promNamespace = "listproxy-e2e"
	promJob       = "listproxy"
	promAPIJob    = "apiserver"
)

// TestDashboardAndAlertsInPrometheus runs the pinned Prometheus on loopback,
// scraping two live listproxy replicas (service mode, as the chart installs
// it; one proves freshness with etcd, the other, given no etcd address,
// through the apiserver) and the apiserver's /metrics, with the chart's alert rules loaded. While traffic
// flows it checks through Prometheus's HTTP API that every query of the
// Grafana dashboard (panels and variables) parses and returns data, with
// all resources selected and with one selected, and that every alert rule
// evaluates without error.
func TestDashboardAndAlertsInPrometheus(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := framework.ToolsBinDir()
	if err != nil {
		t.Fatal(err)
	}
	promBin := filepath.Join(binDir, "prometheus")
	if _, err := os.Stat(promBin); err != nil {
		t.Fatalf("pinned prometheus missing (run make deps): %v", err)
	}

	cp := framework.Start(t, framework.ControlPlaneConfig{})
	seedWorld(t, cp, 2, 30, 0, 2)
	seedConfigMaps(t, cp.Clientset(framework.UserAdmin), "ns-0", "cm", 20)
	// configmaps get a wrong etcd key prefix, so their consistent reads fall
	// back and the fallback panels have data.
	lp := framework.StartListproxy(t, cp, "--etcd-servers="+cp.EtcdEndpoint,
		"--authentication=delegated", "--client-ca-file="+cp.CAFile,
		"--etcd-resource-prefix=configmaps=/registry/not-configmaps")
	lpc := newRawClient(t, lp.UserConfig(framework.UserAdmin))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	warmUp(ctx, t, lpc, []target{{path: "/api/v1/pods"}, {path: "/api/v1/configmaps"}})
	// The replica without etcd: its consistent reads are proven through
	// the apiserver, by the stores' feeds or by auxiliary watches.
	bare := framework.StartListproxy(t, cp, "--authentication=delegated", "--client-ca-file="+cp.CAFile)
	barec := newRawClient(t, bare.UserConfig(framework.UserAdmin))
	warmUp(ctx, t, barec, []target{{path: "/api/v1/pods"}, {path: "/api/v1/configmaps"}})
	var traffic sync.WaitGroup
	traffic.Go(func() { driveTraffic(ctx, lpc) })
	traffic.Go(func() { driveTraffic(ctx, barec) })
	traffic.Go(func() { driveWatches(ctx, lpc, cp.Clientset(framework.UserAdmin)) })
	defer traffic.Wait()
	defer cancel()

	rulesFile := filepath.Join(root, "charts", "listproxy", "rules", "listproxy-alerts.yaml")
	prom := startPrometheus(t, promBin, cp, []*framework.Listproxy{lp, bare}, rulesFile)

	dash := loadDashboard(t, filepath.Join(root, "charts", "listproxy", "dashboards", "listproxy.json"))
	all := map[string]string{"namespace": ".*", "job": ".*", "resource": ".*", "apiserver_job": ".*"}

	t.Run("variables", func(t *testing.T) {
		checks := map[string]func() (bool, string){}
		for _, v := range dash.variables {
			checks["variable "+v.name] = func() (bool, string) {
				values, err := prom.labelValues(ctx, v.label, expand(v.match, all))
				if err != nil {
					return false, err.Error()
				}
				return len(values) > 0, fmt.Sprint(values)
			}
		}
		awaitAll(t, checks)
	})

	// With "All" selected and with one resource selected: a panel that
	// filters by a label its metric lacks shows nothing once a value is
	// picked.
	for _, sel := range []struct {
		name string
		vars map[string]string
	}{
		{"all", all},
		{"resource_configmaps", map[string]string{"namespace": promNamespace, "job": promJob, "resource": "configmaps", "apiserver_job": promAPIJob}},
	} {
		t.Run("panels_"+sel.name, func(t *testing.T) {
			checks := map[string]func() (bool, string){}
			for _, q := range dash.queries {
				query := expand(q.expr, sel.vars)
				checks[q.name] = func() (bool, string) {
					n, err := prom.query(ctx, query)
					if err != nil {
						return false, err.Error()
					}
					return n > 0, fmt.Sprintf("%d series for %s", n, query)
				}
			}
			awaitAll(t, checks)
		})
	}

	t.Run("alert_rules", func(t *testing.T) {
		awaitAll(t, map[string]func() (bool, string){"alert rules": func() (bool, string) {
			rules, err := prom.alertRules(ctx)
			if err != nil {
				return false, err.Error()
			}
			var bad []string
			for _, r := range rules {
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: health %q %s", r.Name, r.Health, r.LastError))
				}
			}
			return len(rules) == alertCount(t, rulesFile) && len(bad) == 0, fmt.Sprintf("%d rules loaded; %s", len(rules), strings.Join(bad, "; "))
		}})
	})
}

// alertCount counts the alerting rules in a rule file.
func alertCount(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(regexp.MustCompile(`(?m)^\s*- alert: `).FindAll(data, -1))
}

// driveTraffic sends the requests whose metrics the dashboard plots until
// ctx ends: consistent, resourceVersion=0 and paginated LISTs served from
// snapshots, consistent LISTs of configmaps that fall back, Table LISTs and
// GETs that pass through.
func driveTraffic(ctx context.Context, lpc rawClient) {
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, path := range []string{"/api/v1/pods", "/api/v1/configmaps"} {
			_, _, _, _ = lpc.get(ctx, path, nil, acceptJSON)
			_, _, body, err := lpc.get(ctx, path, url.Values{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}, "limit": {"7"}}, acceptJSON)
			if err == nil {
				if p, err := decodePage(wire.JSON, body); err == nil && p.env.ListMeta.Continue != "" {
					_, _, _, _ = lpc.get(ctx, path, url.Values{"continue": {p.env.ListMeta.Continue}, "limit": {"7"}}, acceptJSON)
				}
			}
			_, _, _, _ = lpc.get(ctx, path, nil, table)
		}
		_, _, _, _ = lpc.get(ctx, "/api/v1/namespaces/default", nil, acceptJSON)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// driveWatches sends the watches whose metrics the dashboard plots until ctx
// ends, each ending after a second: watch-lists of pods served from
// snapshots (consistent and at resourceVersion=0), of configmaps served at
// resourceVersion=0, and consistent ones of configmaps, which cannot be
// proven fresh and pass through. While they are open a pod and a
// configmap change, so that the served ones carry live events.
func driveWatches(ctx context.Context, lpc rawClient, cs kubernetes.Interface) {
	watchList := func(rv string) url.Values {
		q := url.Values{
			"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
			"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"1"},
		}
		if rv != "" {
			q.Set("resourceVersion", rv)
		}
		return q
	}
	tick := time.NewTicker(500 * time.Millisecond) // paces the loop should a watch fail at once
	defer tick.Stop()
	for {
		var wg sync.WaitGroup
		for _, path := range []string{"/api/v1/pods", "/api/v1/configmaps"} {
			for _, rv := range []string{"", "0"} {
				wg.Go(func() { _, _, _, _ = lpc.get(ctx, path, watchList(rv), acceptJSON) })
			}
		}
		touch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"touched":"%d"}}}`, time.Now().UnixNano()))
		_, _ = cs.CoreV1().Pods("ns-0").Patch(ctx, "pod-0", types.MergePatchType, touch, metav1.PatchOptions{})
		_, _ = cs.CoreV1().ConfigMaps("ns-0").Patch(ctx, "cm-00", types.MergePatchType, touch, metav1.PatchOptions{})
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// awaitAll polls every check until each has reported true once, and fails
// the test naming those that never did, with their last detail, after a
// minute: the scrapes and rule evaluations they wait for happen every second.
func awaitAll(t *testing.T, checks map[string]func() (bool, string)) {
	t.Helper()
	pending := map[string]string{}
	for name := range checks {
		pending[name] = "not run"
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for name := range pending {
			if ok, detail := checks[name](); ok {
				delete(pending, name)
			} else {
				pending[name] = detail
			}
		}
		return len(pending) == 0, nil
	})
	names := make([]string, 0, len(pending))
	for name := range pending {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Errorf("%s: no data within a minute; last: %s", name, pending[name])
	}
}

// --- the dashboard ---------------------------------------------------------

type dashboardQuery struct {
	name string // panel title and refId
	expr string
}

type dashboardVariable struct {
	name  string
	label string // label_values(match, label)
	match string
}

type dashboard struct {
	queries   []dashboardQuery
	variables []dashboardVariable
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

func loadDashboard(t *testing.T, path string) dashboard {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var d dashboard
	for _, p := range raw.Panels {
		for _, tg := range p.Targets {
			d.queries = append(d.queries, dashboardQuery{name: p.Title + " " + tg.RefID, expr: tg.Expr})
		}
	}
	for _, v := range raw.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValuesRE.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(selector, label)", v.Name, s)
		}
		d.variables = append(d.variables, dashboardVariable{name: v.Name, match: m[1], label: m[2]})
	}
	if len(d.queries) == 0 || len(d.variables) == 0 {
		t.Fatalf("%s: %d queries, %d variables", path, len(d.queries), len(d.variables))
	}
	return d
}

// expand substitutes Grafana's variables in a query.
func expand(expr string, vars map[string]string) string {
	expr = strings.ReplaceAll(expr, "$__rate_interval", promRateInterval)
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) }) // $job after $apiserver_job
	for _, k := range names {
		expr = strings.ReplaceAll(expr, "$"+k, vars[k])
	}
	return expr
}

// --- Prometheus --------------------------------------------------------------

type promServer struct {
	url    string
	client *http.Client
}

// startPrometheus writes a configuration that scrapes the listproxy replicas
// lps (as pods of one job) and cp's apiserver every second with the admin's
// token, loads the rule file and starts the pinned Prometheus on a loopback
// port; it is stopped when the test ends.
func startPrometheus(t *testing.T, bin string, cp *framework.ControlPlane, lps []*framework.Listproxy, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(cp.UserToken(framework.UserAdmin)), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	apiURL, err := url.Parse(cp.APIServerURL)
	if err != nil {
		t.Fatal(err)
	}
	// scrape is one target, under its own scrape config (each replica has
	// its own CA) but with the job label given.
	scrape := func(job, pod, host, ca string) map[string]any {
		return map[string]any{
			"job_name":      pod,
			"scheme":        "https",
			"tls_config":    map[string]any{"ca_file": ca},
			"authorization": map[string]any{"credentials_file": token},
			"static_configs": []any{map[string]any{
				"targets": []string{host},
				"labels":  map[string]string{"namespace": promNamespace, "job": job, "pod": pod},
			}},
		}
	}
	scrapes := []any{scrape(promAPIJob, promAPIJob+"-0", apiURL.Host, cp.CAFile)}
	for i, lp := range lps {
		lpURL, err := url.Parse(lp.URL)
		if err != nil {
			t.Fatal(err)
		}
		scrapes = append(scrapes, scrape(promJob, fmt.Sprintf("%s-%d", promJob, i), lpURL.Host, lp.CAFile))
	}
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     promScrapeInterval,
			"scrape_timeout":      promScrapeInterval,
			"evaluation_interval": promScrapeInterval,
		},
		"rule_files":     []string{rules},
		"scrape_configs": scrapes,
	}
	data, err := json.Marshal(cfg) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "prometheus.log")
	p, err := framework.StartProcess("prometheus", bin, []string{
		"--config.file=" + cfgFile,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop prometheus: %v\n%s", err, framework.LogTail(logFile, 20))
		}
	})
	prom := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, _ := p.Exited(); exited {
			return false, fmt.Errorf("prometheus exited")
		}
		resp, err := prom.client.Get(prom.url + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("prometheus not ready: %v\n%s", err, framework.LogTail(logFile, 30))
	}
	return prom
}

// api GETs a Prometheus HTTP API path and decodes its data into out; an
// error answer (e.g. a query that does not parse) is returned as an error.
func (p *promServer) api(ctx context.Context, path string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// query runs an instant query and returns how many series it returned.
func (p *promServer) query(ctx context.Context, expr string) (int, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType != "vector" && data.ResultType != "scalar" {
		return 0, fmt.Errorf("result type %s", data.ResultType)
	}
	return len(data.Result), nil
}

// labelValues returns the values of label on the series matching match.
func (p *promServer) labelValues(ctx context.Context, label, match string) ([]string, error) {
	var values []string
	err := p.api(ctx, "/api/v1/label/"+label+"/values", url.Values{"match[]": {match}}, &values)
	return values, err
}

type promRule struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

// alertRules returns the loaded alerting rules with their health.
func (p *promServer) alertRules(ctx context.Context) ([]promRule, error) {
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api(ctx, "/api/v1/rules", url.Values{"type": {"alert"}}, &data); err != nil {
		return nil, err
	}
	var rules []promRule
	for _, g := range data.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules, nil
}
