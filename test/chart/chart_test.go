// Package chart_test checks charts/listproxy and the sidecar example with the
// pinned helm (hack/tools/helm) and a real kube-apiserver: lint, rendering of
// each supported configuration, server-side dry-run of every rendered object,
// and that the continue-token key survives upgrades.
package chart_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/listproxy/listproxy/test/framework"
)

const (
	release   = "lp"
	fullname  = "lp-listproxy"
	keysName  = fullname + "-continue-token-keys"
	keyBytes  = 32 // AES-256: pkg/paging.KeySize
	chartPath = "charts/listproxy"
)

// variant is one configuration of the chart, rendered with 'helm template'.
type variant struct {
	name  string
	args  []string // helm --set flags
	check func(t *testing.T, r rendered)
}

var variants = []variant{
	{
		name: "default_service",
		check: func(t *testing.T, r rendered) {
			d := r.deployment(t)
			if got := d.Spec.Replicas; got == nil || *got != 2 {
				t.Errorf("replicas = %v, want 2", got)
			}
			c := listproxyContainer(t, d)
			wantArgs(t, c, []string{
				"--listen-address=0.0.0.0:8443",
				"--authentication=delegated",
				"--resources=*",
				"--preload=pods,nodes,configmaps,secrets,services,endpointslices.discovery.k8s.io",
				"--shutdown-delay=5s",
				"--shutdown-grace-period=20s",
				"--continue-token-keys-file=/etc/listproxy/continue-token-keys/keys",
				// Half the 2Gi memory limit.
				"--max-store-bytes=1073741824",
				// No etcd values (a managed cluster): auto proves
				// consistent reads through the apiserver.
				"--consistent-proof=auto",
			}, []string{"--etcd-servers", "--tls-cert-file", "--authentication=none", "--warm-from"})
			if got := d.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != 30 {
				t.Errorf("terminationGracePeriodSeconds = %v, want 30 (above the shutdown delay and grace period)", got)
			}
			checkHardening(t, d, c)
			checkProbes(t, c)
			checkAntiAffinity(t, d)
			checkKeysVolume(t, d, keysName)
			r.mustHave(t, "Service", fullname)
			r.mustHave(t, "ServiceAccount", fullname)
			r.mustHave(t, "PodDisruptionBudget", fullname)
			r.mustNotHave(t, "HorizontalPodAutoscaler", fullname)
			r.mustNotHave(t, "ServiceMonitor", fullname)
			r.mustNotHave(t, "PrometheusRule", fullname)
			// No client CA: no caller is ever impersonated, so no
			// impersonation right.
			checkRules(t, r, append(cacheAll(), serviceModeRules()...))
			checkKeysSecret(t, r)
			checkDashboardConfigMap(t, r)
		},
	},
	{
		name: "service_tls_etcd",
		args: []string{
			"--set", "tls.secretName=listproxy-tls",
			"--set", "tls.clientCAConfigMapName=client-ca",
			"--set", "etcd.servers={https://10.0.0.10:2379,https://10.0.0.11:2379}",
			"--set", "etcd.tlsSecretName=etcd-client",
		},
		check: func(t *testing.T, r rendered) {
			d := r.deployment(t)
			c := listproxyContainer(t, d)
			wantArgs(t, c, []string{
				"--tls-cert-file=/etc/listproxy/tls/tls.crt",
				"--tls-private-key-file=/etc/listproxy/tls/tls.key",
				"--client-ca-file=/etc/listproxy/client-ca/ca.crt",
				"--etcd-servers=https://10.0.0.10:2379,https://10.0.0.11:2379",
				"--etcd-cafile=/etc/listproxy/etcd/ca.crt",
				"--etcd-certfile=/etc/listproxy/etcd/tls.crt",
				"--etcd-keyfile=/etc/listproxy/etcd/tls.key",
				"--consistent-proof=auto",
				// Peers are verified with the serving Secret's CA.
				"--warm-from=https://" + fullname + ".listproxy.svc:443",
				"--warm-from-ca-file=/etc/listproxy/tls/ca.crt",
			}, nil)
			for vol, secret := range map[string]string{"tls": "listproxy-tls", "etcd-tls": "etcd-client"} {
				v := findVolume(d, vol)
				if v == nil || v.Secret == nil || v.Secret.SecretName != secret {
					t.Errorf("volume %q = %+v, want Secret %q", vol, v, secret)
				}
			}
			if v := findVolume(d, "client-ca"); v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "client-ca" {
				t.Errorf("volume client-ca = %+v, want ConfigMap client-ca", v)
			}
			rules := append(cacheAll(), serviceModeRules()...)
			checkRules(t, r, append(rules, constrainedImpersonationRules()...))
		},
	},
	{
		name: "service_client_ca_legacy_impersonation",
		args: []string{
			"--set", "tls.clientCAConfigMapName=client-ca",
			"--set", "rbac.impersonation=legacy",
		},
		check: func(t *testing.T, r rendered) {
			rules := append(cacheAll(), serviceModeRules()...)
			checkRules(t, r, append(rules, legacyImpersonationRules()...))
		},
	},
	{
		name: "service_resource_list",
		args: []string{"--set", "cache.resources={pods,configmaps,deployments.apps,replicasets.apps,widgets.example.com}"},
		check: func(t *testing.T, r rendered) {
			// Only the preloaded resources that are cached.
			wantArgs(t, listproxyContainer(t, r.deployment(t)),
				[]string{"--resources=pods,configmaps,deployments.apps,replicasets.apps,widgets.example.com", "--preload=pods,configmaps"}, nil)
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"list", "watch"}},
			}
			want = append(want, registryRules()...)
			checkRules(t, r, append(want, serviceModeRules()...))
		},
	},
	{
		name: "service_store_budget_follows_memory_limit",
		args: []string{"--set", "resources.limits.memory=3000Mi"},
		check: func(t *testing.T, r rendered) {
			wantArgs(t, listproxyContainer(t, r.deployment(t)), []string{"--max-store-bytes=1572864000"}, nil)
		},
	},
	{
		name: "service_store_budget_unbounded",
		args: []string{"--set", "cache.maxStoreBytes=0"},
		check: func(t *testing.T, r rendered) {
			wantArgs(t, listproxyContainer(t, r.deployment(t)), []string{"--max-store-bytes=0"}, nil)
		},
	},
	{
		name: "service_store_budget_given",
		args: []string{"--set", "cache.maxStoreBytes=5000000000"},
		check: func(t *testing.T, r rendered) {
			wantArgs(t, listproxyContainer(t, r.deployment(t)), []string{"--max-store-bytes=5000000000"}, nil)
		},
	},
	{
		name: "sidecar_single_tenant",
		args: []string{"--set", "mode=sidecar", "--set", "cache.resources={pods,nodes}", "--set", "cache.preload=null"},
		check: func(t *testing.T, r rendered) {
			d := r.deployment(t)
			c := listproxyContainer(t, d)
			wantArgs(t, c, []string{
				"--listen-address=127.0.0.1:8001",
				"--authentication=none",
				"--resources=pods,nodes",
			}, []string{"--authentication=delegated", "--listen-address=0.0.0.0:8443", "--preload", "--max-store-bytes"})
			checkHardening(t, d, c)
			if c.LivenessProbe != nil || c.ReadinessProbe != nil {
				t.Error("sidecar mode sets HTTP probes; kubelet cannot reach a loopback listener")
			}
			r.mustNotHave(t, "Service", fullname)
			r.mustHave(t, "ConfigMap", fullname+"-kubeconfig")
			// Exactly list/watch on the cached resources: no authn/authz
			// reviews and no impersonation.
			checkRules(t, r, append([]rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"list", "watch"}},
			}, registryRules()...))
			cfg, err := clientcmd.Load([]byte(r.configMapData(t, fullname+"-kubeconfig", "kubeconfig")))
			if err != nil {
				t.Fatalf("kubeconfig ConfigMap: %v", err)
			}
			if got := cfg.Clusters["listproxy"].Server; got != "http://127.0.0.1:8001" {
				t.Errorf("kubeconfig server = %q, want http://127.0.0.1:8001", got)
			}
		},
	},
	{
		name: "hpa",
		args: []string{"--set", "autoscaling.enabled=true", "--set", "autoscaling.targetMemoryUtilizationPercentage=80"},
		check: func(t *testing.T, r rendered) {
			if d := r.deployment(t); d.Spec.Replicas != nil {
				t.Errorf("replicas = %d with autoscaling on; the HPA owns the count", *d.Spec.Replicas)
			}
			hpa := r.mustHave(t, "HorizontalPodAutoscaler", fullname)
			if got := hpa.GetAPIVersion(); got != "autoscaling/v2" {
				t.Errorf("HPA apiVersion = %s, want autoscaling/v2", got)
			}
			metrics, _, _ := unstructured.NestedSlice(hpa.Object, "spec", "metrics")
			if len(metrics) != 2 {
				t.Errorf("HPA has %d metrics, want cpu and memory", len(metrics))
			}
		},
	},
	{
		name: "service_monitor",
		args: []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prometheus"},
		check: func(t *testing.T, r rendered) {
			sm := r.mustHave(t, "ServiceMonitor", fullname)
			if got := sm.GetAPIVersion(); got != "monitoring.coreos.com/v1" {
				t.Errorf("ServiceMonitor apiVersion = %s", got)
			}
			if got := sm.GetLabels()["release"]; got != "prometheus" {
				t.Errorf("ServiceMonitor label release = %q, want prometheus", got)
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["port"] != "https" || eps[0].(map[string]any)["path"] != "/metrics" {
				t.Errorf("ServiceMonitor endpoints = %v, want port https path /metrics", eps)
			}
			checkPrometheusRule(t, r, map[string]string{"release": "prometheus"})
		},
	},
	{
		name: "service_monitor_rule_labels",
		args: []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.namespace=monitoring",
			"--set", "metrics.prometheusRule.labels.role=alert-rules"},
		check: func(t *testing.T, r rendered) {
			pr := checkPrometheusRule(t, r, map[string]string{"role": "alert-rules"})
			if got := pr.GetNamespace(); got != "monitoring" {
				t.Errorf("PrometheusRule namespace = %q, want the ServiceMonitor's (monitoring)", got)
			}
		},
	},
	{
		name: "service_monitor_without_rules",
		args: []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=false"},
		check: func(t *testing.T, r rendered) {
			r.mustHave(t, "ServiceMonitor", fullname)
			r.mustNotHave(t, "PrometheusRule", fullname)
		},
	},
	{
		name: "extra_args_logging",
		args: []string{"--set", "extraArgs={--logging-format=json,--v=2}"},
		check: func(t *testing.T, r rendered) {
			wantArgs(t, listproxyContainer(t, r.deployment(t)), []string{"--logging-format=json", "--v=2"}, nil)
		},
	},
	{
		name: "consistent_proof_off",
		args: []string{"--set", "consistentProof=off"},
		check: func(t *testing.T, r rendered) {
			wantArgs(t, listproxyContainer(t, r.deployment(t)), []string{"--consistent-proof=off"}, []string{"--etcd-servers"})
		},
	},
	{
		name: "existing_keys_secret",
		args: []string{"--set", "continueTokenKeys.existingSecret=my-keys"},
		check: func(t *testing.T, r rendered) {
			r.mustNotHave(t, "Secret", keysName)
			checkKeysVolume(t, r.deployment(t), "my-keys")
		},
	},
}

// TestLint runs 'helm lint --strict' with every variant's values.
func TestLint(t *testing.T) {
	h := newHelm(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "--namespace", "listproxy", h.chart}, v.args...)
			if out, err := h.run(t, args...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestTemplate renders every variant and checks what each must contain.
func TestTemplate(t *testing.T) {
	h := newHelm(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			v.check(t, h.template(t, "listproxy", v.args...))
		})
	}
}

// TestTemplateRejects checks that invalid combinations fail to render with a
// message instead of producing a broken install.
func TestTemplateRejects(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown_mode", []string{"--set", "mode=shared"}, "mode"},
		{"unknown_value", []string{"--set", "replicas=3"}, "additional properties 'replicas' not allowed"},
		{"short_key", []string{"--set", "continueTokenKeys.keys={c2hvcnQ=}"}, "continueTokenKeys/keys/0"},
		{"sidecar_service_monitor", []string{"--set", "mode=sidecar", "--set", "metrics.serviceMonitor.enabled=true"}, "needs mode=service"},
		{"etcd_tls_without_servers", []string{"--set", "etcd.tlsSecretName=etcd-client"}, "etcd.servers is empty"},
		{"unknown_consistent_proof", []string{"--set", "consistentProof=quorum"}, "consistentProof"},
		{"etcd_proof_without_servers", []string{"--set", "consistentProof=etcd"}, "consistentProof=etcd needs etcd.servers"},
		{"apiserver_proof_with_etcd", []string{"--set", "consistentProof=apiserver", "--set", "etcd.servers={https://10.0.0.10:2379}"}, "etcd.servers is set"},
		{"no_proof_with_etcd", []string{"--set", "consistentProof=off", "--set", "etcd.servers={https://10.0.0.10:2379}"}, "etcd.servers is set"},
		{"pdb_both_bounds", []string{"--set", "podDisruptionBudget.minAvailable=1"}, "only one of minAvailable and maxUnavailable"},
		{"unparsable_memory_limit", []string{"--set", "resources.limits.memory=lots"}, "or set cache.maxStoreBytes"},
		{"negative_store_budget", []string{"--set", "cache.maxStoreBytes=-1"}, "maxStoreBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", release, h.chart}, tc.args...)
			out, err := h.run(t, args...)
			if err == nil {
				t.Fatalf("helm template succeeded, want an error mentioning %q", tc.want)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("helm template error does not mention %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestTemplateKeyIsRandomWithoutCluster documents why upgrades rely on lookup:
// without a cluster (helm template, GitOps renderers) each render makes a new
// key, so those installs must use continueTokenKeys.existingSecret.
func TestTemplateKeyIsRandomWithoutCluster(t *testing.T) {
	h := newHelm(t)
	a := h.template(t, "listproxy").secretKeys(t, keysName)
	b := h.template(t, "listproxy").secretKeys(t, keysName)
	if a == b {
		t.Fatalf("two renders without a cluster made the same key %q; is the key hard-coded?", a)
	}
}

var metricName = regexp.MustCompile(`listproxy_[a-z_]+`)

// exportedMetrics are the series the code exports (docs/metrics.md).
// The dashboard must query only these; docs/metrics.md is checked elsewhere.
var exportedMetrics = []string{
	"listproxy_freshness_apiserver_probe_duration_seconds_bucket",
	"listproxy_freshness_apiserver_proofs_total",
	"listproxy_freshness_aux_watches_total",
	"listproxy_freshness_consistent_reads_total",
	"listproxy_freshness_wait_duration_seconds_bucket",
	"listproxy_http_request_duration_seconds_bucket",
	"listproxy_http_requests_total",
	"listproxy_lists_inflight",
	"listproxy_lists_queued",
	"listproxy_lists_rejected_total",
	"listproxy_lists_total",
	"listproxy_lists_write_timeouts_total",
	"listproxy_paging_continue_tokens_total",
	"listproxy_proxy_authz_decisions_total",
	"listproxy_snapshot_bytes",
	"listproxy_snapshot_feed_bytes",
	"listproxy_snapshot_gzip_bytes",
	"listproxy_snapshot_history_bytes",
	"listproxy_snapshot_history_depth",
	"listproxy_snapshot_objects",
	"listproxy_snapshot_relists_total",
	"listproxy_snapshot_resource_version",
	"listproxy_snapshot_watch_restarts_total",
	"listproxy_watch_ended_total",
	"listproxy_watch_events_total",
	"listproxy_watch_fanout_delay_seconds_bucket",
	"listproxy_watch_initial_bytes_total",
	"listproxy_watch_open",
	"listproxy_watch_passed_through_total",
	"listproxy_watch_sent_bytes_total",
	"listproxy_watch_served_total",
}

// TestDashboard checks the Grafana dashboard: valid JSON, every panel query
// uses only exported metric names, every panel has a unique id and a
// Prometheus datasource, and every expected topic has a panel.
func TestDashboard(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, chartPath, "dashboards", "listproxy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string           `json:"uid"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	if dash.UID == "" {
		t.Error("dashboard has no uid")
	}
	used := map[string]bool{}
	var exprs []string
	collectExprs(dash.Panels, &exprs)
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			used[m] = true
		}
	}
	var got []string
	for m := range used {
		got = append(got, m)
	}
	sort.Strings(got)
	if diff := cmp.Diff(exportedMetrics, got); diff != "" {
		t.Errorf("metrics queried by the dashboard differ from the exported ones (-want +got):\n%s", diff)
	}
	for _, want := range []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes"} {
		if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no panel queries %s", want)
		}
	}
	ids := map[float64]string{}
	for _, p := range dash.Panels {
		title, _ := p["title"].(string)
		id, _ := p["id"].(float64)
		if prev, dup := ids[id]; dup {
			t.Errorf("panels %q and %q share id %v", prev, title, id)
		}
		ids[id] = title
		if p["type"] == "row" {
			continue
		}
		ds, _ := p["datasource"].(map[string]any)
		if ds["type"] != "prometheus" {
			t.Errorf("panel %q datasource = %v, want prometheus", title, p["datasource"])
		}
	}
}

func collectExprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			collectExprs(x, out)
		}
	case []map[string]any:
		for _, x := range v {
			collectExprs(x, out)
		}
	case []any:
		for _, x := range v {
			collectExprs(x, out)
		}
	}
}

// TestAgainstAPIServer runs the checks that need a real kube-apiserver on one
// shared control plane.
func TestAgainstAPIServer(t *testing.T) {
	h := newHelm(t)
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, cp.APIServerURL, "admin", false); err != nil {
		t.Fatal(err)
	}
	h.kubeconfig = kubeconfig
	k := newKube(t, cp)

	// Every rendered object must pass the apiserver's own validation, as
	// 'kubectl apply --dry-run=server' would: a dry-run create with strict
	// field validation (unknown or duplicate fields are errors, as kubectl's
	// default --validate=strict makes them).
	t.Run("server_dry_run", func(t *testing.T) {
		k.createFile(t, filepath.Join("testdata", "servicemonitor-crd.yaml"))
		k.createFile(t, filepath.Join("testdata", "prometheusrule-crd.yaml"))
		k.waitCRD(t, "servicemonitors.monitoring.coreos.com")
		k.waitCRD(t, "prometheusrules.monitoring.coreos.com")
		ns := "listproxy"
		k.createNamespace(t, ns)
		k.createNamespace(t, "monitoring")
		for _, v := range variants {
			t.Run(v.name, func(t *testing.T) {
				for _, obj := range h.template(t, ns, v.args...).objs {
					k.create(t, obj, true)
				}
			})
		}
	})

	// What the chart's ServiceAccount may impersonate, asked of the
	// apiserver itself with the ServiceAccount's token: nothing without a
	// client CA (no caller is ever impersonated then), never system:masters
	// with constrained impersonation (the default), and anyone with legacy
	// impersonation, which is why that is opt-in.
	t.Run("impersonation_rights", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			args        []string
			wantUser    bool // may impersonate an ordinary user and group
			wantMasters bool // may impersonate the group system:masters
		}{
			{name: "no-client-ca"},
			{name: "constrained", args: []string{"--set", "tls.clientCAConfigMapName=client-ca"}, wantUser: true},
			{name: "legacy", args: []string{"--set", "tls.clientCAConfigMapName=client-ca", "--set", "rbac.impersonation=legacy"}, wantUser: true, wantMasters: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ns, name := "imp-"+tc.name, "imp-"+tc.name
				k.createNamespace(t, ns)
				r := h.template(t, ns, append(tc.args, "--set", "fullnameOverride="+name)...)
				for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
					k.create(t, r.mustHave(t, kind, name), false)
				}
				sa := k.serviceAccountConfig(t, ns, name)
				// The binding is in effect once the ServiceAccount may do
				// what every service-mode listproxy may.
				k.awaitAllowed(t, sa, "create", "authorization.k8s.io", "subjectaccessreviews")
				impersonates := func(groups ...string) (bool, string) {
					cfg := rest.CopyConfig(sa)
					cfg.Impersonate = rest.ImpersonationConfig{UserName: "carol", Groups: groups}
					ssr, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
					switch {
					case apierrors.IsForbidden(err):
						return false, err.Error()
					case err != nil:
						t.Fatalf("SelfSubjectReview impersonating carol %v: %v", groups, err)
					}
					if got := ssr.Status.UserInfo.Username; got != "carol" {
						t.Fatalf("SelfSubjectReview impersonating carol says %q", got)
					}
					return true, ""
				}
				if got, msg := impersonates("team"); got != tc.wantUser {
					t.Errorf("ServiceAccount may impersonate user carol in group team = %v, want %v %s", got, tc.wantUser, msg)
				}
				if got, msg := impersonates("system:masters"); got != tc.wantMasters {
					t.Errorf("ServiceAccount may impersonate group system:masters = %v, want %v %s", got, tc.wantMasters, msg)
				}
			})
		}
	})

	// The sidecar example is applied as written: its Pod must be accepted
	// once the objects it refers to (ServiceAccount, ConfigMap) exist.
	t.Run("sidecar_example", func(t *testing.T) {
		root := repoRoot(t)
		objs := decodeFile(t, filepath.Join(root, "docs", "examples", "sidecar-pod.yaml"))
		k.createNamespace(t, "demo")
		checkSidecarExample(t, objs)
		for _, obj := range objs {
			if obj.GetKind() == "Pod" {
				continue
			}
			k.create(t, withNamespace(obj, "demo"), true)
			k.create(t, withNamespace(obj, "demo"), false)
		}
		for _, obj := range objs {
			if obj.GetKind() == "Pod" {
				k.create(t, withNamespace(obj, "demo"), true)
			}
		}
	})

	// Upgrade safety is proved on the real path: 'helm install', then
	// 'helm upgrade' against a live apiserver, where the chart's lookup
	// sees the Secret the install created. (helm template cannot show
	// this: lookup returns nothing without a cluster.)
	t.Run("upgrade_keeps_continue_token_keys", func(t *testing.T) {
		ns := "listproxy-upgrade"
		k.createNamespace(t, ns)
		h.mustRun(t, "install", release, h.chart, "--namespace", ns)
		first := k.secretKeys(t, ns, keysName)
		checkKeyFile(t, first, 1)

		h.mustRun(t, "upgrade", release, h.chart, "--namespace", ns, "--set", "replicaCount=3")
		if got := k.deploymentReplicas(t, ns, fullname); got != 3 {
			t.Fatalf("after upgrade replicas = %d, want 3 (did the upgrade apply?)", got)
		}
		if got := k.secretKeys(t, ns, keysName); got != first {
			t.Fatalf("upgrade changed the continue-token keys:\nbefore %q\nafter  %q", first, got)
		}

		// Rotation: explicit keys replace the file; a later upgrade without
		// them keeps the rotated keys.
		newKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, keyBytes))
		oldKey := strings.TrimSpace(first)
		h.mustRun(t, "upgrade", release, h.chart, "--namespace", ns,
			"--set", "continueTokenKeys.keys={"+newKey+","+oldKey+"}")
		rotated := k.secretKeys(t, ns, keysName)
		if want := newKey + "\n" + oldKey + "\n"; rotated != want {
			t.Fatalf("after rotation keys = %q, want %q", rotated, want)
		}
		h.mustRun(t, "upgrade", release, h.chart, "--namespace", ns)
		if got := k.secretKeys(t, ns, keysName); got != rotated {
			t.Fatalf("upgrade after rotation changed the keys:\nbefore %q\nafter  %q", rotated, got)
		}

		// A server-side dry run renders through lookup too: it must show
		// the kept key, not a new one.
		out := h.mustRun(t, "upgrade", release, h.chart, "--namespace", ns, "--dry-run=server")
		if !strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(rotated))) {
			t.Errorf("helm upgrade --dry-run=server does not render the kept keys")
		}
	})
}

// checkSidecarExample checks the recipe's wiring: loopback listener, no
// authentication, the app's kubeconfig pointing at it, and RBAC granting
// list/watch on exactly the resources listproxy caches.
func checkSidecarExample(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	r := rendered{objs: objs}
	pod := r.mustHave(t, "Pod", "app")
	var p corev1.Pod
	fromUnstructured(t, pod, &p)
	var lp, app *corev1.Container
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == "listproxy" {
			lp = &p.Spec.InitContainers[i]
		}
	}
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "listproxy" {
			lp = &p.Spec.Containers[i]
		} else {
			app = &p.Spec.Containers[i]
		}
	}
	if lp == nil || app == nil {
		t.Fatalf("pod needs a listproxy and an app container")
	}
	wantArgs(t, *lp, []string{"--listen-address=127.0.0.1:8001", "--authentication=none"}, nil)

	var kubeconfigPath string
	for _, e := range app.Env {
		if e.Name == "KUBECONFIG" {
			kubeconfigPath = e.Value
		}
	}
	mounted := false
	for _, m := range app.VolumeMounts {
		v := findVolumeIn(p.Spec.Volumes, m.Name)
		if v != nil && v.ConfigMap != nil && strings.HasPrefix(kubeconfigPath, m.MountPath+"/") {
			mounted = true
			key := strings.TrimPrefix(kubeconfigPath, m.MountPath+"/")
			cfg, err := clientcmd.Load([]byte(r.configMapData(t, v.ConfigMap.Name, key)))
			if err != nil {
				t.Fatalf("kubeconfig in ConfigMap %s: %v", v.ConfigMap.Name, err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.Clusters[ctx.Cluster].Server != "http://127.0.0.1:8001" {
				t.Errorf("app kubeconfig does not point at http://127.0.0.1:8001")
			}
		}
	}
	if !mounted {
		t.Errorf("KUBECONFIG=%q is not a file of a mounted ConfigMap", kubeconfigPath)
	}

	var resources []string
	for _, a := range lp.Args {
		if v, ok := strings.CutPrefix(a, "--resources="); ok {
			resources = strings.Split(v, ",")
		}
	}
	if len(resources) == 0 {
		t.Fatal("listproxy has no --resources")
	}
	var role rbacv1.ClusterRole
	fromUnstructured(t, r.mustHave(t, "ClusterRole", "app-listproxy"), &role)
	for _, res := range resources {
		name, group, _ := strings.Cut(res, ".")
		for _, verb := range []string{"list", "watch"} {
			if !allows(role.Rules, verb, group, name) {
				t.Errorf("ClusterRole app-listproxy does not allow %s on %q in group %q", verb, name, group)
			}
		}
	}
	var binding rbacv1.ClusterRoleBinding
	fromUnstructured(t, r.mustHave(t, "ClusterRoleBinding", "app-listproxy"), &binding)
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != p.Spec.ServiceAccountName {
		t.Errorf("ClusterRoleBinding subjects = %+v, want the pod's ServiceAccount %q", binding.Subjects, p.Spec.ServiceAccountName)
	}
}

// registryRules are what every discovery refresh lists besides the cached
// resources: CustomResourceDefinitions (selectable fields) and APIServices
// (which APIs are aggregated).
func registryRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: []string{"list"}},
		featureGatesRule(),
	}
}

// featureGatesRule lets listproxy read the apiserver's feature gates from
// its /metrics.
func featureGatesRule() rbacv1.PolicyRule {
	return rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}
}

func allows(rules []rbacv1.PolicyRule, verb, group, resource string) bool {
	match := func(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
	for _, r := range rules {
		if match(r.Verbs, verb) && match(r.APIGroups, group) && match(r.Resources, resource) {
			return true
		}
	}
	return false
}

// --- helm -------------------------------------------------------------------

type helm struct {
	bin        string
	chart      string
	env        []string
	kubeconfig string // "" for commands that need no cluster
}

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// newHelm returns the pinned helm, building it with hack/install-tools.sh
// (a no-op when current). LISTPROXY_SKIP_HELM=1 skips instead.
func newHelm(t *testing.T) *helm {
	t.Helper()
	if os.Getenv("LISTPROXY_SKIP_HELM") == "1" {
		t.Skip("LISTPROXY_SKIP_HELM=1: not building or running helm")
	}
	root := repoRoot(t)
	helmOnce.Do(func() {
		cmd := exec.Command(filepath.Join(root, "hack", "install-tools.sh"), "helm")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			helmErr = fmt.Errorf("hack/install-tools.sh helm: %w\n%s", err, out)
			return
		}
		helmBin = filepath.Join(root, "_output", "bin", "helm")
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	home := t.TempDir()
	return &helm{
		bin:   helmBin,
		chart: filepath.Join(root, chartPath),
		// Keep helm's cache, config and data out of the developer's home.
		env: []string{
			"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
			"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		},
	}
}

func (h *helm) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if h.kubeconfig != "" {
		args = append(args, "--kubeconfig", h.kubeconfig)
	}
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(os.Environ(), h.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

func (h *helm) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := h.run(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// template renders the chart without a cluster (lookup sees nothing).
func (h *helm) template(t *testing.T, namespace string, args ...string) rendered {
	t.Helper()
	noCluster := *h
	noCluster.kubeconfig = ""
	out := noCluster.mustRun(t, append([]string{"template", release, h.chart, "--namespace", namespace}, args...)...)
	return rendered{objs: decode(t, strings.NewReader(out))}
}

// --- rendered objects ---------------------------------------------------------

type rendered struct{ objs []*unstructured.Unstructured }

func (r rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (r rendered) mustHave(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := r.find(kind, name)
	if o == nil {
		t.Fatalf("no %s %q rendered", kind, name)
	}
	return o
}

func (r rendered) mustNotHave(t *testing.T, kind, name string) {
	t.Helper()
	if r.find(kind, name) != nil {
		t.Errorf("%s %q rendered, want none", kind, name)
	}
}

func (r rendered) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	fromUnstructured(t, r.mustHave(t, "Deployment", fullname), &d)
	return &d
}

func (r rendered) configMapData(t *testing.T, name, key string) string {
	t.Helper()
	v, ok, _ := unstructured.NestedString(r.mustHave(t, "ConfigMap", name).Object, "data", key)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %q", name, key)
	}
	return v
}

// secretKeys returns the decoded keys file of Secret name.
func (r rendered) secretKeys(t *testing.T, name string) string {
	t.Helper()
	v, ok, _ := unstructured.NestedString(r.mustHave(t, "Secret", name).Object, "data", "keys")
	if !ok {
		t.Fatalf("Secret %s has no key \"keys\"", name)
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("Secret %s data.keys: %v", name, err)
	}
	return string(raw)
}

func listproxyContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "listproxy" {
			return c
		}
	}
	t.Fatal("Deployment has no listproxy container")
	return corev1.Container{}
}

func wantArgs(t *testing.T, c corev1.Container, want, notPrefixes []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(c.Args, w) {
			t.Errorf("args %q lack %q", c.Args, w)
		}
	}
	for _, np := range notPrefixes {
		for _, a := range c.Args {
			if strings.HasPrefix(a, np) {
				t.Errorf("args contain %q, want no %q", a, np)
			}
		}
	}
}

func checkHardening(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
		t.Error("pod does not set runAsNonRoot")
	}
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod does not set seccompProfile RuntimeDefault")
	}
	cs := c.SecurityContext
	if cs == nil {
		t.Fatal("container has no securityContext")
	}
	if cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
		t.Error("container root filesystem is writable")
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Error("container allows privilege escalation")
	}
	if cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) != 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and no add", cs.Capabilities)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
}

func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for name, tc := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if tc.p == nil || tc.p.HTTPGet == nil || tc.p.HTTPGet.Path != tc.path || tc.p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe = %+v, want HTTPS GET %s", name, tc.p, tc.path)
		}
	}
}

func checkAntiAffinity(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatal("no preferred pod anti-affinity")
	}
	term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if diff := cmp.Diff(d.Spec.Selector.MatchLabels, term.LabelSelector.MatchLabels); diff != "" {
		t.Errorf("anti-affinity selects other pods than the Deployment (-want +got):\n%s", diff)
	}
}

func checkKeysVolume(t *testing.T, d *appsv1.Deployment, secret string) {
	t.Helper()
	v := findVolume(d, "continue-token-keys")
	if v == nil || v.Secret == nil || v.Secret.SecretName != secret {
		t.Errorf("continue-token-keys volume = %+v, want Secret %q", v, secret)
	}
}

func checkKeysSecret(t *testing.T, r rendered) {
	t.Helper()
	checkKeyFile(t, r.secretKeys(t, keysName), 1)
}

// checkKeyFile checks the --continue-token-keys-file format: n lines, each the
// standard base64 of exactly 32 bytes.
func checkKeyFile(t *testing.T, file string, n int) {
	t.Helper()
	var keys int
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		key, err := base64.StdEncoding.DecodeString(sc.Text())
		if err != nil || len(key) != keyBytes {
			t.Errorf("key line %q: %d bytes, err %v; want base64 of %d bytes", sc.Text(), len(key), err, keyBytes)
		}
		keys++
	}
	if keys != n {
		t.Errorf("key file has %d keys, want %d", keys, n)
	}
}

func checkDashboardConfigMap(t *testing.T, r rendered) {
	t.Helper()
	cm := r.mustHave(t, "ConfigMap", fullname+"-dashboard")
	if got := cm.GetLabels()["grafana_dashboard"]; got != "1" {
		t.Errorf("dashboard ConfigMap label grafana_dashboard = %q, want \"1\"", got)
	}
	data := r.configMapData(t, fullname+"-dashboard", "listproxy.json")
	want, err := os.ReadFile(filepath.Join(repoRoot(t), chartPath, "dashboards", "listproxy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if data != strings.TrimRight(string(want), "\n") {
		t.Error("dashboard ConfigMap does not carry dashboards/listproxy.json verbatim")
	}
}

// checkPrometheusRule checks that the rendered PrometheusRule carries the
// given labels and exactly the chart's alerts, as in its rule file.
func checkPrometheusRule(t *testing.T, r rendered, labels map[string]string) *unstructured.Unstructured {
	t.Helper()
	pr := r.mustHave(t, "PrometheusRule", fullname)
	if got := pr.GetAPIVersion(); got != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion = %s", got)
	}
	for k, v := range labels {
		if got := pr.GetLabels()[k]; got != v {
			t.Errorf("PrometheusRule label %s = %q, want %q", k, got, v)
		}
	}
	var got []string
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, rule := range rules {
			got = append(got, rule.(map[string]any)["alert"].(string))
		}
	}
	var want []string
	for name := range alerts(t) {
		want = append(want, name)
	}
	sort.Strings(got)
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PrometheusRule alerts (-want +got):\n%s", diff)
	}
	return pr
}

func checkRules(t *testing.T, r rendered, want []rbacv1.PolicyRule) {
	t.Helper()
	var role rbacv1.ClusterRole
	fromUnstructured(t, r.mustHave(t, "ClusterRole", fullname), &role)
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	var binding rbacv1.ClusterRoleBinding
	fromUnstructured(t, r.mustHave(t, "ClusterRoleBinding", fullname), &binding)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: "listproxy"}}
	if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" {
		t.Errorf("ClusterRoleBinding subjects (-want +got):\n%s", diff)
	}
}

func cacheAll() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list", "watch"}}, featureGatesRule()}
}

// serviceModeRules are what delegated authentication and authorization need.
func serviceModeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
}

// constrainedImpersonationRules are what passing client-certificate callers
// through needs with constrained impersonation (rbac.impersonation=constrained).
func constrainedImpersonationRules() []rbacv1.PolicyRule {
	on := func(verbs ...string) []string {
		var out []string
		for _, v := range verbs {
			out = append(out, "impersonate-on:user-info:"+v)
		}
		return out
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"users", "groups", "uids", "userextras/*"}, Verbs: []string{"impersonate:user-info"}},
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: on("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")},
		{NonResourceURLs: []string{"*"}, Verbs: on("get", "head", "options", "post", "put", "patch", "delete")},
	}
}

// legacyImpersonationRules are the same with the impersonate verb
// (rbac.impersonation=legacy).
func legacyImpersonationRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"uids", "userextras/*"}, Verbs: []string{"impersonate"}},
	}
}

func findVolume(d *appsv1.Deployment, name string) *corev1.Volume {
	return findVolumeIn(d.Spec.Template.Spec.Volumes, name)
}

func findVolumeIn(vols []corev1.Volume, name string) *corev1.Volume {
	for i := range vols {
		if vols[i].Name == name {
			return &vols[i]
		}
	}
	return nil
}

// --- decoding ---------------------------------------------------------------

func decode(t *testing.T, r io.Reader) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode manifests: %v", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		// Unstructured's own JSON decoding keeps integers as int64, as the
		// typed converters and the apiserver expect.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatalf("decode manifest: %v\n%s", err, raw)
		}
		objs = append(objs, u)
	}
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return decode(t, f)
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func withNamespace(u *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	u = u.DeepCopy()
	if u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	return u
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// --- apiserver ----------------------------------------------------------------

type kube struct {
	cp     *framework.ControlPlane
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newKube(t *testing.T, cp *framework.ControlPlane) *kube {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{cp: cp, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

func (k *kube) resource(t *testing.T, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
	}
	if m.Scope.Name() == "namespace" {
		return k.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return k.dyn.Resource(m.Resource)
}

// create creates u; dryRun makes it a server-side dry run. Field validation is
// strict either way.
func (k *kube) create(t *testing.T, u *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := k.resource(t, u).Create(t.Context(), u, opts); err != nil {
		t.Errorf("create %s %s/%s (dry run %v): %v", u.GetKind(), u.GetNamespace(), u.GetName(), dryRun, err)
	}
}

func (k *kube) createFile(t *testing.T, path string) {
	t.Helper()
	for _, u := range decodeFile(t, path) {
		k.create(t, u, false)
	}
}

func (k *kube) createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := k.cp.CreateNamespace(t.Context(), name, nil); err != nil {
		t.Fatal(err)
	}
}

// waitCRD waits until the CRD is Established and its resource is in
// discovery.
func (k *kube) waitCRD(t *testing.T, name string) {
	t.Helper()
	crds := k.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			c := c.(map[string]any)
			if c["type"] == "Established" && c["status"] == "True" {
				k.mapper.Reset()
				group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
				kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
				_, err := k.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
				return err == nil, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

// serviceAccountConfig returns a client config for ServiceAccount ns/name,
// with a short-lived token from the TokenRequest API.
func (k *kube) serviceAccountConfig(t *testing.T, ns, name string) *rest.Config {
	t.Helper()
	ttl := int64(600)
	tr, err := k.cp.Clientset(framework.UserAdmin).CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(k.cp.AdminConfig)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// awaitAllowed waits until cfg's user may do verb on group/resource (RBAC
// changes reach the authorizer through an informer).
func (k *kube) awaitAllowed(t *testing.T, cfg *rest.Config, verb, group, resource string) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(cfg)
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}},
		}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("%s %s.%s never allowed: %v", verb, resource, group, err)
	}
}

func (k *kube) secretKeys(t *testing.T, ns, name string) string {
	t.Helper()
	s, err := k.cp.Clientset(framework.UserAdmin).CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data["keys"])
}

func (k *kube) deploymentReplicas(t *testing.T, ns, name string) int32 {
	t.Helper()
	d, err := k.cp.Clientset(framework.UserAdmin).AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil {
		return -1
	}
	return *d.Spec.Replicas
}
