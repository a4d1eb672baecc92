package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/listproxy/listproxy/test/framework/seed"
)

// The shape of the seeded cluster.
const (
	numNamespaces = 50
	numNodes      = 500
	appsPerNS     = 12
	seedWorkers   = 32
)

var teams = []string{
	"checkout", "payments", "catalog", "search", "recommendations",
	"cart", "shipping", "inventory", "accounts", "notifications",
	"analytics", "ingest", "reporting", "auth", "gateway",
	"media", "reviews", "pricing", "fraud", "support",
	"billing", "ledger", "identity", "messaging", "ads",
}

var components = []string{"api", "web", "worker", "consumer", "scheduler", "grpc", "admin", "indexer", "cache", "sync", "export", "webhook"}

type podRef struct{ namespace, name string }

func namespaceName(i int) string {
	return fmt.Sprintf("%s-%s", teams[i%len(teams)], []string{"prod", "staging"}[i/len(teams)%2])
}

func nodeName(i int) string {
	return fmt.Sprintf("ip-10-20-%d-%d.eu-west-1.compute.internal", i/250, 10+i%250)
}

// seed creates the namespaces, their default service accounts (there is no
// controller manager) and the pods, concurrently through the apiserver
// (test/framework/seed).
func (e *env) seed(ctx context.Context) error {
	begin := time.Now()
	nss := make([]*corev1.Namespace, numNamespaces)
	for i := range nss {
		nss[i] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(i), Labels: map[string]string{"team": teams[i%len(teams)]}}}
	}
	if err := seed.Namespaces(ctx, e.cp, nss, seed.Options{Workers: seedWorkers}); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(7, 11)) // the same data every run
	pods := make([]*corev1.Pod, e.cfg.pods)
	hashes := map[string]string{}
	for i := range pods {
		ns := namespaceName(i % numNamespaces)
		app := components[(i/numNamespaces)%appsPerNS]
		key := ns + "/" + app
		if hashes[key] == "" {
			hashes[key] = seed.RandomName(rng, 10)
		}
		pods[i] = benchPod(rng, i, ns, app, hashes[key])
	}
	e.pods = make([]podRef, len(pods))
	for i, p := range pods {
		e.pods[i] = podRef{p.Namespace, p.Name}
	}

	logf("seeding %d pods (%d namespaces, %d nodes, %d workers)", len(pods), numNamespaces, numNodes, seedWorkers)
	var created atomic.Int64
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				n := created.Load()
				logf("  %d/%d pods (%.0f/s)", n, len(pods), float64(n)/time.Since(begin).Seconds())
			}
		}
	}()
	err := seed.Pods(ctx, e.client, pods, seed.Options{
		Workers: seedWorkers, FieldManager: "kube-controller-manager",
		Created: func() { created.Add(1) },
	})
	close(stopProgress)
	if err != nil {
		return err
	}

	// Measure what one object weighs in the apiserver's JSON list.
	res, err := e.direct.do(ctx, request{path: "/api/v1/pods?limit=100", accept: acceptJSON})
	if err != nil {
		return err
	}
	e.objectBytes = int(res.bytes / 100)
	// Keep one object, as a record of what was measured.
	one, err := e.direct.do(ctx, request{path: "/api/v1/namespaces/" + pods[0].Namespace + "/pods/" + pods[0].Name, accept: acceptJSON, keep: true})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.cfg.out, "pod.json"), one.body, 0o644); err != nil {
		return err
	}
	logf("seeded %d pods in %s (%.0f/s), ~%d bytes of JSON each", len(pods), time.Since(begin).Round(time.Millisecond),
		float64(len(pods))/time.Since(begin).Seconds(), e.objectBytes)
	return nil
}

// benchPod is a Deployment's pod as a real cluster holds it: recommended
// labels, scrape and checksum annotations, an owner reference, an
// application container with probes, resources and a dozen environment
// variables, and a proxy sidecar. With the service-account volume that
// admission adds, and managedFields, it lists at about 4 KB of JSON.
func benchPod(rng *rand.Rand, i int, ns, app, hash string) *corev1.Pod {
	team := strings.SplitN(ns, "-", 2)[0]
	env := strings.SplitN(ns, "-", 2)[1]
	full := team + "-" + app
	version := fmt.Sprintf("v2.%d.%d", rng.IntN(40), rng.IntN(10))
	image := fmt.Sprintf("123456789012.dkr.ecr.eu-west-1.amazonaws.com/%s/%s:%s", team, app, version)
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	t := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:         fmt.Sprintf("%s-%s-%s", app, hash, indexName(i)),
			GenerateName: fmt.Sprintf("%s-%s-", app, hash),
			Namespace:    ns,
			Labels: map[string]string{
				"app.kubernetes.io/name":     app,
				"app.kubernetes.io/instance": full,
				"app.kubernetes.io/version":  version,
				"app.kubernetes.io/part-of":  team,
				"pod-template-hash":          hash,
				"team":                       team,
			},
			Annotations: map[string]string{
				"prometheus.io/scrape":                    "true",
				"prometheus.io/port":                      "8080",
				"kubectl.kubernetes.io/default-container": app,
				"checksum/config":                         randomHex(rng, 64),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash,
				UID:        types.UID(fmt.Sprintf("%s-%s-4%s-a%s-%s", randomHex(rng, 8), randomHex(rng, 4), randomHex(rng, 3), randomHex(rng, 3), randomHex(rng, 12))),
				Controller: &t, BlockOwnerDeletion: &t,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName(rng.IntN(numNodes)),
			TerminationGracePeriodSeconds: ptr(int64(30)),
			Containers: []corev1.Container{{
				Name:  app,
				Image: image,
				Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				},
				Env: []corev1.EnvVar{
					fieldEnv("POD_NAME", "metadata.name"),
					fieldEnv("POD_NAMESPACE", "metadata.namespace"),
					{Name: "APP_ENV", Value: env},
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "DATABASE_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: full + "-db"}, Key: "url"}}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}, PeriodSeconds: 5},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/" + app, ReadOnly: true}},
			}, {
				Name:  "envoy",
				Image: "docker.io/envoyproxy/envoy:v1.33.2",
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: full + "-config"}}}},
			},
		},
	}
}

// patchPod sets an annotation of p to value, as a controller's metadata
// update; a value the pod already has is a no-op for the apiserver.
func patchPod(ctx context.Context, client kubernetes.Interface, p podRef, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.listproxy.io/generation":%q}}}`, value)
	_, err := client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
	return err
}

func ptr[T any](v T) *T { return &v }

// indexName is a unique five-character suffix for i (27^5 > 14 million).
func indexName(i int) string {
	var b [5]byte
	for k := range b {
		b[k] = seed.NameAlphabet[i%len(seed.NameAlphabet)]
		i /= len(seed.NameAlphabet)
	}
	return string(b[:])
}

func randomHex(rng *rand.Rand, n int) string {
	const hex = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = hex[rng.IntN(16)]
	}
	return string(b)
}
