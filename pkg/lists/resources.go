package lists

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// resourceInfo is what discovery says about one cacheable resource version.
type resourceInfo struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// Custom is true for resources served by a CustomResourceDefinition.
	Custom bool
	// Aggregated is true for resources of an API group that an APIService
	// delegates to another server: they are not in the apiserver's etcd.
	Aggregated bool
	// Warnings are the deprecation warnings the apiserver sends with every
	// response of this version (a CRD version marked deprecated, or a
	// built-in API deprecated in the apiserver's release).
	Warnings []string
	Fields   selectableFields
	// fingerprint changes when anything that shapes stored entries changes
	// (a CRD recreated or its selectable fields edited); stores built for an
	// older fingerprint are dropped.
	fingerprint string
}

// ResourceFilter selects the resources listproxy caches: "*" or
// RESOURCE[.GROUP] names as given to --resources.
type ResourceFilter []string

// Allows reports whether gr is selected.
func (f ResourceFilter) Allows(gr schema.GroupResource) bool {
	for _, name := range f {
		if name == "*" || name == gr.String() {
			return true
		}
	}
	return false
}

// registry holds the cacheable resources, refreshed from discovery.
type registry struct {
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	filter    ResourceFilter

	mu        sync.RWMutex
	resources map[schema.GroupVersionResource]*resourceInfo // guarded by mu
	major     int                                           // guarded by mu; the apiserver's release, 0 when unknown
	minor     int                                           // guarded by mu
}

var crdGVR = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

func (r *registry) lookup(gvr schema.GroupVersionResource) (*resourceInfo, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	info, ok := r.resources[gvr]
	return info, ok
}

// refresh re-reads discovery and the CRDs. It returns the resources whose
// stores must be dropped: gone or changed.
func (r *registry) refresh(ctx context.Context) ([]schema.GroupVersionResource, error) {
	_, lists, err := r.discovery.ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	partial := err != nil
	if partial {
		// Some API group is unavailable: keep what was found, and keep the
		// previous view of the rest rather than dropping its stores.
		klog.V(2).InfoS("Partial discovery", "err", err)
	}
	crds, err := r.customResources(ctx)
	if err != nil {
		return nil, err
	}
	aggregated, err := r.aggregatedGroups(ctx)
	if err != nil {
		// Not fatal: prefix verification still refuses a prefix that does
		// not hold a resource's objects, and an empty resource is never
		// verified.
		klog.ErrorS(err, "Cannot tell aggregated APIs apart (grant list on apiservices.apiregistration.k8s.io)")
	}
	major, minor := r.serverMajorMinor()
	next := map[schema.GroupVersionResource]*resourceInfo{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range list.APIResources {
			if strings.Contains(res.Name, "/") || !slices.Contains(res.Verbs, "list") || !slices.Contains(res.Verbs, "watch") {
				continue
			}
			gvr := gv.WithResource(res.Name)
			if !r.filter.Allows(gvr.GroupResource()) {
				continue
			}
			info := &resourceInfo{GVR: gvr, Kind: res.Kind, Namespaced: res.Namespaced}
			crd, custom := crds[gvr]
			info.Custom = custom
			info.Aggregated = !custom && aggregated[gvr.GroupVersion()]
			if custom {
				info.Warnings = crd.warnings
			} else {
				info.Warnings = builtinDeprecation(gv.WithKind(res.Kind), major, minor)
			}
			info.Fields = fieldsFor(gvr.GroupResource(), custom, res.Namespaced, crd.selectable)
			info.fingerprint = fmt.Sprintf("%s/%v/%v/%s/%v/%v", res.Kind, res.Namespaced, custom, crd.uid, crd.selectable, info.Aggregated)
			next[gvr] = info
		}
	}
	r.mu.Lock()
	r.major, r.minor = major, minor
	if partial {
		for gvr, old := range r.resources {
			if _, ok := next[gvr]; !ok {
				next[gvr] = old
			}
		}
	}
	var dropped []schema.GroupVersionResource
	for gvr, old := range r.resources {
		if n, ok := next[gvr]; !ok || n.fingerprint != old.fingerprint {
			dropped = append(dropped, gvr)
		}
	}
	r.resources = next
	r.mu.Unlock()
	return dropped, nil
}

type crdVersion struct {
	uid        string
	selectable []string
	// warnings is the deprecation warning of a deprecated version.
	warnings []string
}

// customResources lists the CRDs' served versions with their selectable fields.
func (r *registry) customResources(ctx context.Context) (map[schema.GroupVersionResource]crdVersion, error) {
	list, err := r.dynamic.Resource(crdGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list customresourcedefinitions: %w", err)
	}
	out := map[schema.GroupVersionResource]crdVersion{}
	for _, u := range list.Items {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtimeConverter.FromUnstructured(u.Object, &crd); err != nil {
			klog.ErrorS(err, "Unreadable CustomResourceDefinition", "name", u.GetName())
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			cv := crdVersion{uid: string(crd.UID)}
			if v.Deprecated {
				cv.warnings = []string{crdDeprecationWarning(crd.Spec, v)}
			}
			for _, f := range v.SelectableFields {
				cv.selectable = append(cv.selectable, strings.TrimPrefix(f.JSONPath, "."))
			}
			out[schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}] = cv
		}
	}
	return out, nil
}

// crdDeprecationWarning is the warning the apiserver sends for a deprecated
// CRD version: its deprecationWarning, or "<group>/<version> <Kind> is
// deprecated", naming the newest served version that is not deprecated and
// is newer than this one, if any (apiextensions-apiserver's
// customresource_handler.go).
func crdDeprecationWarning(spec apiextensionsv1.CustomResourceDefinitionSpec, v apiextensionsv1.CustomResourceDefinitionVersion) string {
	if v.DeprecationWarning != nil {
		return *v.DeprecationWarning
	}
	msg := fmt.Sprintf("%s/%s %s is deprecated", spec.Group, v.Name, spec.Names.Kind)
	newest := ""
	for _, other := range spec.Versions {
		if !other.Served || other.Deprecated || version.CompareKubeAwareVersionStrings(v.Name, other.Name) >= 0 {
			continue
		}
		if newest == "" || version.CompareKubeAwareVersionStrings(other.Name, newest) > 0 {
			newest = other.Name
		}
	}
	if newest != "" {
		msg += fmt.Sprintf("; use %s/%s %s", spec.Group, newest, spec.Names.Kind)
	}
	return msg
}

// builtinDeprecation returns the warning the apiserver sends for a built-in
// kind deprecated in its release major.minor (k8s.io/apiserver/pkg/endpoints
// deprecation), or nil.
func builtinDeprecation(gvk schema.GroupVersionKind, major, minor int) []string {
	obj, err := clientscheme.Scheme.New(gvk)
	if err != nil {
		return nil // not a kind client-go knows: not a built-in API
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	if !deprecation.IsDeprecated(obj, major, minor) {
		return nil
	}
	return []string{deprecation.WarningMessage(obj)}
}

// serverMajorMinor returns the apiserver's release, or 0, 0 when unknown
// (every kind with a deprecation version then counts as deprecated, as in
// the apiserver).
func (r *registry) serverMajorMinor() (int, int) {
	info, err := r.discovery.ServerVersion()
	if err != nil {
		klog.V(2).InfoS("Reading the apiserver's version failed", "err", err)
		return 0, 0
	}
	major, minor, err := deprecation.MajorMinor(*info)
	if err != nil {
		return 0, 0
	}
	return major, minor
}

// watchListDefaults reports whether the apiserver's release turns a watch
// from resourceVersion "" or "0" without sendInitialEvents into a watch-list:
// its WatchList feature is on by default in 1.32 and from 1.34
// (k8s.io/apiserver/pkg/features). An unknown release reports false, so
// such watches pass through and the apiserver gives its own semantics.
func (r *registry) watchListDefaults() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return watchListOnByDefault(r.major, r.minor)
}

// watchListOnByDefault is the WatchList feature's default in release
// major.minor.
func watchListOnByDefault(major, minor int) bool {
	return major == 1 && (minor == 32 || minor >= 34) || major > 1
}

// watchListGzip reports whether the apiserver's release gzips a watch-list's
// response for a client that accepts gzip: its WatchListCompression feature
// is on by default from 1.37.
func (r *registry) watchListGzip() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.major == 1 && r.minor >= 37 || r.major > 1
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// aggregatedGroups returns the group versions that APIServices delegate to
// another server (spec.service set); the others are served by the
// apiserver itself from its etcd.
func (r *registry) aggregatedGroups(ctx context.Context) (map[schema.GroupVersion]bool, error) {
	list, err := r.dynamic.Resource(apiServiceGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list apiservices: %w", err)
	}
	out := map[schema.GroupVersion]bool{}
	for _, u := range list.Items {
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		version, _, _ := unstructured.NestedString(u.Object, "spec", "version")
		if svc, found, _ := unstructured.NestedMap(u.Object, "spec", "service"); found && svc != nil {
			out[schema.GroupVersion{Group: group, Version: version}] = true
		}
	}
	return out, nil
}

// refreshLoop refreshes the registry every interval until ctx is done and
// calls drop with resources whose stores are stale.
func (r *registry) refreshLoop(ctx context.Context, interval time.Duration, drop func([]schema.GroupVersionResource)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dropped, err := r.refresh(ctx)
		if err != nil {
			klog.ErrorS(err, "Refreshing discovery failed; keeping the previous view")
			continue
		}
		if len(dropped) > 0 {
			drop(dropped)
		}
	}
}
