package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/test/framework"
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

var widgetGVR = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "widgets"}

// seed creates the demo data through the apiserver as admin.
func seed(ctx context.Context, cp *framework.ControlPlane) error {
	begin := time.Now()
	client := cp.Clientset(framework.UserAdmin)
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same data every run

	if err := framework.Parallel(ctx, workers, numNamespaces, func(ctx context.Context, i int) error {
		return cp.CreateNamespace(ctx, namespaces[i], map[string]string{"team": namespaces[i]})
	}); err != nil {
		return err
	}
	if err := seedNodes(ctx, client); err != nil {
		return err
	}
	logf("seeded %d namespaces, %d nodes", numNamespaces, numNodes)

	pods := demoPods(rng)
	if err := framework.Parallel(ctx, workers, len(pods), func(ctx context.Context, i int) error {
		_, err := client.CoreV1().Pods(pods[i].Namespace).Create(ctx, pods[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod %s/%s: %w", pods[i].Namespace, pods[i].Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	logf("seeded %d pods", len(pods))

	if err := framework.Parallel(ctx, workers, numConfigMaps, func(ctx context.Context, i int) error {
		cm := demoConfigMap(i)
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	logf("seeded %d configmaps", numConfigMaps)

	if err := seedWidgets(ctx, cp, rng); err != nil {
		return err
	}
	logf("seeded CRD widgets.demo.listproxy.io and %d widgets; seeding took %s", numWidgets, time.Since(begin).Round(time.Millisecond))
	return nil
}

// seedNodes creates Ready nodes without taints. There is no kubelet: the
// status is set here, and the not-ready taint that the TaintNodesByCondition
// admission plugin adds on create is removed.
func seedNodes(ctx context.Context, client kubernetes.Interface) error {
	return framework.Parallel(ctx, workers, numNodes, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("node-%02d", i)
		zone := fmt.Sprintf("zone-%c", 'a'+i%3)
		node := &corev1.Node{
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
		}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("330"),
		}
		created.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "kubelet is posting ready status",
				LastHeartbeatTime:  now,
				LastTransitionTime: now,
			}},
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
		}
		updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update node %s status: %w", name, err)
		}
		if len(updated.Spec.Taints) > 0 {
			updated.Spec.Taints = nil
			if _, err := client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("remove node %s taints: %w", name, err)
			}
		}
		return nil
	})
}

// demoPods returns numPods pods: in every namespace, each app has the same
// number of replicas, named like a Deployment's pods, spread over the nodes.
func demoPods(rng *rand.Rand) []*corev1.Pod {
	perApp := numPods / numNamespaces / len(apps)
	pods := make([]*corev1.Pod, 0, numPods)
	for len(pods) < numPods {
		for _, ns := range namespaces {
			for _, app := range apps {
				hash := randomName(rng, 10)
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
			Name:      fmt.Sprintf("%s-%s-%s", app, hash, randomName(rng, 5)),
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

// seedWidgets creates the Widget CRD, waits for it to be established and
// served, and creates the widgets.
func seedWidgets(ctx context.Context, cp *framework.ControlPlane, rng *rand.Rand) error {
	extClient, err := apiextensionsclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.demo.listproxy.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "demo.listproxy.io",
			Scope: apiextensionsv1.NamespaceScoped,
			// Unknown fields are pruned. Do not also set the schema's
			// x-kubernetes-preserve-unknown-fields to false: a schema with it
			// is not structural, and kube-apiserver v1.36.3 then panics
			// (nil pointer, HTTP/2 INTERNAL_ERROR) validating selectableFields.
			PreserveUnknownFields: false,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural:   "widgets",
				Singular: "widget",
				Kind:     "Widget",
				ListKind: "WidgetList",
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:    "v1",
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"spec": {
								Type: "object",
								Properties: map[string]apiextensionsv1.JSONSchemaProps{
									"size":  {Type: "integer"},
									"color": {Type: "string"},
								},
							},
						},
					},
				},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
					{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
				},
			}},
		},
	}
	if _, err := extClient.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create CRD: %w", err)
	}
	if err := waitEstablished(ctx, extClient, crd.Name); err != nil {
		return err
	}

	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	colors := []string{"red", "green", "blue", "yellow", "purple"}
	widgets := make([]*unstructured.Unstructured, numWidgets)
	for i := range widgets {
		widgets[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "demo.listproxy.io/v1",
			"kind":       "Widget",
			"metadata": map[string]any{
				"name":      fmt.Sprintf("widget-%03d", i),
				"namespace": namespaces[i%numNamespaces],
				"labels":    map[string]any{"app": apps[i%len(apps)].name},
			},
			"spec": map[string]any{
				"size":  int64(1 + rng.IntN(100)),
				"color": colors[rng.IntN(len(colors))],
			},
		}}
	}
	// The first create may 404 for a moment after Established while the
	// apiserver installs the CRD's handler.
	if err := retryNotFound(ctx, func() error {
		_, err := dyn.Resource(widgetGVR).Namespace(widgets[0].GetNamespace()).Create(ctx, widgets[0], metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create widget %s: %w", widgets[0].GetName(), err)
	}
	return framework.Parallel(ctx, workers, numWidgets-1, func(ctx context.Context, i int) error {
		w := widgets[i+1]
		if _, err := dyn.Resource(widgetGVR).Namespace(w.GetNamespace()).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create widget %s/%s: %w", w.GetNamespace(), w.GetName(), err)
		}
		return nil
	})
}

func waitEstablished(ctx context.Context, client apiextensionsclient.Interface, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get CRD %s: %w", name, err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after 30s: %+v", name, crd.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func retryNotFound(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if err == nil || !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// randomName returns n characters from the alphabet Kubernetes uses for
// generated name suffixes.
func randomName(rng *rand.Rand, n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}
