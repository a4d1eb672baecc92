package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/listproxy/listproxy/test/framework"
	"github.com/listproxy/listproxy/test/framework/seed"
)

// Demo data sizes.
const (
	numNamespaces = 20
	numNodes      = 10
	numPods       = 3000
	numConfigMaps = 500
	numWidgets    = 200
	workers       = 32
)

var namespaces = []string{
	"checkout", "payments", "catalog", "search", "recommendations",
	"cart", "shipping", "inventory", "accounts", "notifications",
	"analytics", "ingest", "reporting", "auth", "gateway",
	"media", "reviews", "pricing", "fraud", "support",
}

// apps are the workloads in every namespace; each gets numPods/numNamespaces/len(apps) pods.
var apps = []struct{ name, tier, image string }{
	{"web", "frontend", "registry.k8s.io/e2e-test-images/agnhost:2.53"},
	{"api", "backend", "registry.k8s.io/e2e-test-images/agnhost:2.53"},
	{"worker", "backend", "registry.k8s.io/e2e-test-images/agnhost:2.53"},
	{"redis", "cache", "docker.io/library/redis:7.4"},
	{"postgres", "database", "docker.io/library/postgres:17"},
	{"exporter", "monitoring", "quay.io/prometheus/node-exporter:v1.9.0"},
}

// seedDemo creates the demo data through the apiserver as admin.
func seedDemo(ctx context.Context, cp *framework.ControlPlane) error {
	begin := time.Now()
	client := cp.Clientset(framework.UserAdmin)
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same data every run
	opts := seed.Options{Workers: workers}

	nss := make([]*corev1.Namespace, numNamespaces)
	for i := range nss {
		nss[i] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaces[i], Labels: map[string]string{"team": namespaces[i]}}}
	}
	if err := seed.Namespaces(ctx, cp, nss, opts); err != nil {
		return err
	}
	if err := seed.ReadyNodes(ctx, client, demoNodes(), opts); err != nil {
		return err
	}
	logf("seeded %d namespaces, %d nodes", numNamespaces, numNodes)

	pods := demoPods(rng)
	if err := seed.Pods(ctx, client, pods, opts); err != nil {
		return err
	}
	logf("seeded %d pods", len(pods))

	cms := make([]*corev1.ConfigMap, numConfigMaps)
	for i := range cms {
		cms[i] = demoConfigMap(i)
	}
	if err := seed.ConfigMaps(ctx, client, cms, opts); err != nil {
		return err
	}
	logf("seeded %d configmaps", numConfigMaps)

	if err := seed.InstallWidgetCRD(ctx, cp.AdminConfig); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	if err := seed.Widgets(ctx, dyn, demoWidgets(rng), opts); err != nil {
		return err
	}
	logf("seeded CRD widgets.demo.listproxy.io and %d widgets; seeding took %s", numWidgets, time.Since(begin).Round(time.Millisecond))
	return nil
}

// demoNodes returns numNodes nodes as a kubelet reports them, spread over
// three zones (seed.ReadyNodes makes them Ready).
func demoNodes() []*corev1.Node {
	nodes := make([]*corev1.Node, numNodes)
	for i := range nodes {
		name := fmt.Sprintf("node-%02d", i)
		zone := fmt.Sprintf("zone-%c", 'a'+i%3)
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("330"),
		}
		nodes[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					"kubernetes.io/hostname":           name,
					"kubernetes.io/os":                 "linux",
					"kubernetes.io/arch":               "amd64",
					"topology.kubernetes.io/zone":      zone,
					"topology.kubernetes.io/region":    "local",
					"node.kubernetes.io/instance-type": "demo-8x32",
				},
			},
			Status: corev1.NodeStatus{
				Capacity:    capacity,
				Allocatable: capacity,
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.1.0.%d", 10+i)},
					{Type: corev1.NodeHostName, Address: name},
				},
				NodeInfo: corev1.NodeSystemInfo{
					KubeletVersion:          "v1.36.3",
					OperatingSystem:         "linux",
					Architecture:            "amd64",
					ContainerRuntimeVersion: "containerd://2.1.0",
				},
			},
		}
	}
	return nodes
}

// demoPods returns numPods pods: in every namespace, each app has the same
// number of replicas, named like a Deployment's pods, spread over the nodes.
func demoPods(rng *rand.Rand) []*corev1.Pod {
	perApp := numPods / numNamespaces / len(apps)
	pods := make([]*corev1.Pod, 0, numPods)
	for len(pods) < numPods {
		for _, ns := range namespaces {
			for _, app := range apps {
				hash := seed.RandomName(rng, 10)
				for range perApp {
					pods = append(pods, demoPod(rng, ns, app.name, app.tier, app.image, hash))
				}
			}
		}
		perApp = 1 // top up if numPods does not divide evenly
	}
	return pods[:numPods]
}

func demoPod(rng *rand.Rand, ns, app, tier, image, hash string) *corev1.Pod {
	containers := []corev1.Container{{
		Name:  app,
		Image: image,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Env: []corev1.EnvVar{
			{Name: "APP", Value: app},
			{Name: "LOG_LEVEL", Value: "info"},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("256Mi"),
			},
		},
	}}
	if tier == "frontend" || tier == "backend" {
		containers = append(containers, corev1.Container{
			Name:  "log-shipper",
			Image: "docker.io/fluent/fluent-bit:3.2",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("32Mi"),
				},
			},
		})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%s-%s", app, hash, seed.RandomName(rng, 5)),
			Namespace: ns,
			Labels: map[string]string{
				"app":               app,
				"tier":              tier,
				"pod-template-hash": hash,
			},
		},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%02d", rng.IntN(numNodes)),
			Containers: containers,
		},
	}
}

func demoConfigMap(i int) *corev1.ConfigMap {
	ns := namespaces[i%numNamespaces]
	app := apps[(i/numNamespaces)%len(apps)].name
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-config-%03d", app, i),
			Namespace: ns,
			Labels:    map[string]string{"app": app},
		},
		Data: map[string]string{
			"LOG_LEVEL":   "info",
			"FEATURES":    "search,recommendations,checkout-v2",
			"config.yaml": strings.Repeat(fmt.Sprintf("# %s settings\nkey-%d: value-%d\n", app, i, i), 8),
		},
	}
}

// demoWidgets returns numWidgets widgets spread over the namespaces.
func demoWidgets(rng *rand.Rand) []*unstructured.Unstructured {
	colors := []string{"red", "green", "blue", "yellow", "purple"}
	widgets := make([]*unstructured.Unstructured, numWidgets)
	for i := range widgets {
		size := int64(1 + rng.IntN(100))
		widgets[i] = seed.Widget(namespaces[i%numNamespaces], fmt.Sprintf("widget-%03d", i),
			map[string]string{"app": apps[i%len(apps)].name}, colors[rng.IntN(len(colors))], size)
	}
	return widgets
}
