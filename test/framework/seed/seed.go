// Package seed creates objects in a control plane through its apiserver,
// for e2e tests, hack/localup and hack/bench. The shapes of the objects are
// the caller's; the mechanics are here: creates run concurrently with a
// bound, an object that already exists counts as created (seeding can be
// repeated), errors name the object, nodes are made Ready without a
// kubelet, and the demo Widget CRD is installed and waited for until it is
// served. It imports test/framework and nothing of pkg/.
package seed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/listproxy/listproxy/test/framework"
)

// DefaultWorkers is the number of concurrent creates when Options.Workers
// is 0. Not measured; the apiserver's default --max-mutating-requests-inflight
// is 200.
const DefaultWorkers = 16

// Options tune one seeding call.
type Options struct {
	// Workers bounds the creates in flight; 0 is DefaultWorkers.
	Workers int
	// FieldManager is sent with every create.
	FieldManager string
	// Created, if set, is called after each object is created (progress
	// reports); it may be called concurrently.
	Created func()
}

// create creates objs with do, at most opts.Workers at once, and returns
// the first error.
func create[T metav1.Object](ctx context.Context, kind string, objs []T, opts Options, do func(context.Context, T, metav1.CreateOptions) error) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	return framework.Parallel(ctx, workers, len(objs), func(ctx context.Context, i int) error {
		o := objs[i]
		err := do(ctx, o, metav1.CreateOptions{FieldManager: opts.FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			name := o.GetName()
			if ns := o.GetNamespace(); ns != "" {
				name = ns + "/" + name
			}
			return fmt.Errorf("create %s %s: %w", kind, name, err)
		}
		if opts.Created != nil {
			opts.Created()
		}
		return nil
	})
}

// Namespaces creates namespaces (name and labels are used) with their
// default service accounts (framework.ControlPlane.CreateNamespace).
func Namespaces(ctx context.Context, cp *framework.ControlPlane, namespaces []*corev1.Namespace, opts Options) error {
	return create(ctx, "namespace", namespaces, opts, func(ctx context.Context, ns *corev1.Namespace, _ metav1.CreateOptions) error {
		return cp.CreateNamespace(ctx, ns.Name, ns.Labels)
	})
}

// Pods creates pods.
func Pods(ctx context.Context, client kubernetes.Interface, pods []*corev1.Pod, opts Options) error {
	return create(ctx, "pod", pods, opts, func(ctx context.Context, p *corev1.Pod, co metav1.CreateOptions) error {
		_, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, co)
		return err
	})
}

// ConfigMaps creates configmaps.
func ConfigMaps(ctx context.Context, client kubernetes.Interface, cms []*corev1.ConfigMap, opts Options) error {
	return create(ctx, "configmap", cms, opts, func(ctx context.Context, cm *corev1.ConfigMap, co metav1.CreateOptions) error {
		_, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, co)
		return err
	})
}

// PodTemplates creates pod templates.
func PodTemplates(ctx context.Context, client kubernetes.Interface, templates []*corev1.PodTemplate, opts Options) error {
	return create(ctx, "podtemplate", templates, opts, func(ctx context.Context, pt *corev1.PodTemplate, co metav1.CreateOptions) error {
		_, err := client.CoreV1().PodTemplates(pt.Namespace).Create(ctx, pt, co)
		return err
	})
}

// Nodes creates nodes as given. Without a kubelet they never become Ready:
// see ReadyNodes.
func Nodes(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, opts Options) error {
	return create(ctx, "node", nodes, opts, func(ctx context.Context, n *corev1.Node, co metav1.CreateOptions) error {
		_, err := client.CoreV1().Nodes().Create(ctx, n, co)
		return err
	})
}

// ReadyNodes creates nodes that look like ones a kubelet runs: each node's
// status (capacity, addresses, node info) is written as given plus a Ready
// condition, and the not-ready taint that the TaintNodesByCondition
// admission plugin adds on create is removed. A node that already exists
// is left as it is.
func ReadyNodes(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, opts Options) error {
	return create(ctx, "node", nodes, opts, func(ctx context.Context, n *corev1.Node, co metav1.CreateOptions) error {
		created, err := client.CoreV1().Nodes().Create(ctx, n, co)
		if err != nil {
			return err
		}
		uo := metav1.UpdateOptions{FieldManager: co.FieldManager}
		// Controllers running beside (kube-controller-manager) may change
		// the node in between: each step retries on the latest node.
		node := created
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			now := metav1.Now()
			node.Status = *n.Status.DeepCopy()
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "kubelet is posting ready status",
				LastHeartbeatTime:  now,
				LastTransitionTime: now,
			})
			updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, uo)
			if err == nil {
				node = updated
			} else if latest, getErr := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); getErr == nil {
				node = latest
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("update status: %w", err)
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if len(node.Spec.Taints) == 0 {
				return nil
			}
			node.Spec.Taints = nil
			_, err := client.CoreV1().Nodes().Update(ctx, node, uo)
			if latest, getErr := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil && getErr == nil {
				node = latest
			}
			if err != nil {
				return fmt.Errorf("remove taints: %w", err)
			}
			return nil
		})
	})
}

// WidgetGVR is the demo custom resource of WidgetCRD.
var WidgetGVR = schema.GroupVersionResource{Group: "demo.listproxy.io", Version: "v1", Resource: "widgets"}

// WidgetCRD returns the demo CRD: namespaced widgets.demo.listproxy.io/v1
// with spec.color (a selectable field) and spec.size (an integer).
func WidgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: WidgetGVR.Resource + "." + WidgetGVR.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: WidgetGVR.Group,
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
				Name:    WidgetGVR.Version,
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"spec": {
								Type: "object",
								Properties: map[string]apiextensionsv1.JSONSchemaProps{
									"color": {Type: "string"},
									"size":  {Type: "integer"},
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
}

// InstallWidgetCRD creates WidgetCRD (unless it exists) and waits, up to
// 30s, until widgets can be listed: the CRD is established and the
// apiserver serves it.
func InstallWidgetCRD(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	crd := WidgetCRD()
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, lastErr = dyn.Resource(WidgetGVR).List(ctx, metav1.ListOptions{Limit: 1})
		return lastErr == nil, nil
	})
	if err != nil {
		if lastErr != nil {
			err = lastErr // says more than the poll's timeout
		}
		return fmt.Errorf("CRD %s not served: %w", crd.Name, err)
	}
	return nil
}

// Widget returns a widget of WidgetCRD.
func Widget(namespace, name string, labels map[string]string, color string, size int64) *unstructured.Unstructured {
	meta := map[string]any{"namespace": namespace, "name": name}
	if len(labels) > 0 {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta["labels"] = l
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": WidgetGVR.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   meta,
		"spec":       map[string]any{"color": color, "size": size},
	}}
}

// Widgets creates widgets; install WidgetCRD first.
func Widgets(ctx context.Context, client dynamic.Interface, widgets []*unstructured.Unstructured, opts Options) error {
	return create(ctx, "widget", widgets, opts, func(ctx context.Context, w *unstructured.Unstructured, co metav1.CreateOptions) error {
		_, err := client.Resource(WidgetGVR).Namespace(w.GetNamespace()).Create(ctx, w, co)
		return err
	})
}

// NameAlphabet is the alphabet of the random suffixes of generated
// Kubernetes names (k8s.io/apimachinery/pkg/util/rand).
const NameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// RandomName returns n characters of NameAlphabet drawn from rng, so that
// a fixed seed gives the same names every run.
func RandomName(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = NameAlphabet[rng.IntN(len(NameAlphabet))]
	}
	return string(b)
}
