package catalog

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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/table"
)

// Resource is what discovery says about one cacheable resource version.
type Resource struct {
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
	Fields   SelectableFields
	// NoWatchCache: the apiserver has no watch cache for the resource by
	// default (events, whose --watch-cache-sizes default is 0), so it
	// reads even resourceVersion="0" LISTs from etcd and honours their
	// limit.
	NoWatchCache bool
	// Table is how the resource's Table rows are served on the
	// apiserver's release; TableServed is false when they pass through
	// (an unknown release or resource, a page rule, a custom resource's
	// date column outside .metadata).
	Table       table.Rules
	TableServed bool
	// TableColumns are the names of a custom resource's Table columns as
	// its CRD defines them (Name, then its printer columns, or Age);
	// nil for built-in resources.
	TableColumns []string
	// fingerprint changes when anything that shapes stored entries changes
	// (a CRD recreated or its selectable fields edited); stores built for an
	// older fingerprint are dropped.
	fingerprint string
}

// Fingerprint changes when anything that shapes a store's entries of the
// resource changes (its CRD recreated, its selectable fields edited): a
// store built for another fingerprint is stale.
func (r *Resource) Fingerprint() string { return r.fingerprint }

// NewResource describes a built-in resource (or, with custom, a custom
// resource without selectable fields) as discovery would, for a catalog
// built with NewStatic.
func NewResource(gvr schema.GroupVersionResource, kind string, namespaced, custom bool) *Resource {
	return &Resource{
		GVR: gvr, Kind: kind, Namespaced: namespaced, Custom: custom,
		Fields:      fieldsFor(gvr.GroupResource(), custom, namespaced, nil),
		fingerprint: fmt.Sprintf("%s/%v/%v", kind, namespaced, custom),
	}
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

// Config says where a Catalog reads discovery and what it keeps of it.
type Config struct {
	// Discovery and Dynamic reach the apiserver: discovery, its version
	// and /metrics, and the CRDs and APIServices.
	Discovery discovery.DiscoveryInterface
	Dynamic   dynamic.Interface
	// Filter selects the cached resources.
	Filter ResourceFilter
	// TableRules returns the Table rules of a built-in resource on
	// apiserver release 1.minor; nil selects table.For.
	TableRules func(minor int, gr schema.GroupResource) (table.Rules, bool)
}

// Catalog holds the cacheable resources, refreshed from discovery, and the
// apiserver's feature gates. Its methods are safe for concurrent use;
// Refresh is called by one goroutine at a time.
type Catalog struct {
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	filter    ResourceFilter
	// tableRules: Config.TableRules.
	tableRules func(minor int, gr schema.GroupResource) (table.Rules, bool)

	mu        sync.RWMutex
	resources map[schema.GroupVersionResource]*Resource // guarded by mu
	features  apiserverFeatures                         // guarded by mu
	// featuresRead is when features were last read from the apiserver's
	// /metrics (zero: never, or the last read failed) and featuresVersion
	// the apiserver's version then; only refresh touches them.
	featuresRead    time.Time
	featuresVersion string
	// preferredGV is each group's preferred version in discovery, guarded
	// by mu.
	preferredGV map[string]string
}

// New returns a catalog that knows no resource until Refresh reads
// discovery.
func New(cfg Config) *Catalog {
	return &Catalog{discovery: cfg.Discovery, dynamic: cfg.Dynamic, filter: cfg.Filter, tableRules: cfg.TableRules}
}

// NewStatic returns a catalog that knows resources (the last of those with
// the same GroupVersionResource) without reading discovery, with the
// apiserver's feature gates off; it cannot Refresh.
func NewStatic(resources ...*Resource) *Catalog {
	c := &Catalog{resources: map[schema.GroupVersionResource]*Resource{}}
	for _, res := range resources {
		c.resources[res.GVR] = res
	}
	return c
}

var crdGVR = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

// Lookup returns what discovery says about gvr, if listproxy caches it.
func (r *Catalog) Lookup(gvr schema.GroupVersionResource) (*Resource, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	info, ok := r.resources[gvr]
	return info, ok
}

// Preferred returns a cacheable resource in its group's preferred version,
// or, when that version does not serve it, in its most preferred
// cacheable version by Kubernetes version order (v2, v1, v1beta1, ...).
func (r *Catalog) Preferred(gr schema.GroupResource) (*Resource, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if v, ok := r.preferredGV[gr.Group]; ok {
		if info, ok := r.resources[gr.WithVersion(v)]; ok {
			return info, true
		}
	}
	var best *Resource
	for gvr, info := range r.resources {
		if gvr.GroupResource() == gr && (best == nil || version.CompareKubeAwareVersionStrings(gvr.Version, best.GVR.Version) > 0) {
			best = info
		}
	}
	return best, best != nil
}

// Refresh re-reads discovery and the CRDs. It returns the resources whose
// stores must be dropped: gone or changed.
func (r *Catalog) Refresh(ctx context.Context) ([]schema.GroupVersionResource, error) {
	groups, lists, err := r.discovery.ServerGroupsAndResources()
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
	info, err := r.discovery.ServerVersion()
	if err != nil {
		klog.V(2).InfoS("Reading the apiserver's version failed", "err", err)
		info = &version.Info{}
	}
	major, minor := releaseOf(info)
	features := r.readFeatures(ctx, info, major, minor)
	next := r.cacheable(lists, crds, aggregated, major, minor)
	preferredGV := map[string]string{}
	for _, g := range groups {
		if g != nil {
			preferredGV[g.Name] = g.PreferredVersion.Version
		}
	}
	r.mu.Lock()
	r.features = features
	if partial {
		for g, v := range r.preferredGV {
			if _, ok := preferredGV[g]; !ok {
				preferredGV[g] = v
			}
		}
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
	r.preferredGV = preferredGV
	r.mu.Unlock()
	return dropped, nil
}

// cacheable describes the resources of discovery's lists that listproxy
// caches: list and watch verbs, no subresource, allowed by the filter;
// crds are the custom resources, aggregated the group versions another
// server serves, major.minor the apiserver's release.
func (r *Catalog) cacheable(lists []*metav1.APIResourceList, crds map[schema.GroupVersionResource]crdVersion, aggregated map[schema.GroupVersion]bool, major, minor int) map[schema.GroupVersionResource]*Resource {
	next := map[schema.GroupVersionResource]*Resource{}
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
			info := &Resource{GVR: gvr, Kind: res.Kind, Namespaced: res.Namespaced}
			crd, custom := crds[gvr]
			info.Custom = custom
			info.Aggregated = !custom && aggregated[gvr.GroupVersion()]
			if custom {
				info.Warnings = crd.warnings
			} else {
				info.Warnings = builtinDeprecation(gv.WithKind(res.Kind), major, minor)
			}
			info.Fields = fieldsFor(gvr.GroupResource(), custom, res.Namespaced, crd.selectable)
			info.NoWatchCache = !custom && noWatchCache[gvr.GroupResource()]
			switch {
			case custom:
				info.Table, info.TableServed = table.ForCustom(crd.columns)
				info.TableColumns = crd.columnNames()
			case major == 1 && !info.Aggregated && r.tableRules != nil:
				info.Table, info.TableServed = r.tableRules(minor, gvr.GroupResource())
			case major == 1 && !info.Aggregated:
				info.Table, info.TableServed = table.For(minor, gvr.GroupResource())
			}
			info.fingerprint = fmt.Sprintf("%s/%v/%v/%s/%v/%v/%v/%v", res.Kind, res.Namespaced, custom, crd.uid, crd.selectable, info.Aggregated, crd.columns, crd.names)
			next[gvr] = info
		}
	}
	return next
}

// noWatchCache are the built-in resources the apiserver keeps no watch
// cache of by default (k8s.io/kubernetes pkg/kubeapiserver
// DefaultWatchCacheSizes).
var noWatchCache = map[schema.GroupResource]bool{
	{Resource: "events"}:                         true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

type crdVersion struct {
	uid        string
	selectable []string
	// columns are the version's additionalPrinterColumns, and names
	// their names.
	columns []table.Column
	names   []string
	// warnings is the deprecation warning of a deprecated version.
	warnings []string
}

// columnNames are the columns of the version's Tables: Name, then its
// printer columns, or the default Age without any
// (apiextensions-apiserver's table convertor).
func (v crdVersion) columnNames() []string {
	if len(v.names) == 0 {
		return []string{"Name", "Age"}
	}
	return append([]string{"Name"}, v.names...)
}

// customResources lists the CRDs' served versions with their selectable fields.
func (r *Catalog) customResources(ctx context.Context) (map[schema.GroupVersionResource]crdVersion, error) {
	list, err := r.dynamic.Resource(crdGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list customresourcedefinitions: %w", err)
	}
	out := map[schema.GroupVersionResource]crdVersion{}
	for _, u := range list.Items {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
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
			for _, c := range v.AdditionalPrinterColumns {
				cv.columns = append(cv.columns, table.Column{Type: c.Type, JSONPath: c.JSONPath})
				cv.names = append(cv.names, c.Name)
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

// releaseOf returns the apiserver's release, or 0, 0 when unknown (every
// kind with a deprecation version then counts as deprecated, as in the
// apiserver).
func releaseOf(info *version.Info) (int, int) {
	major, minor, err := deprecation.MajorMinor(*info)
	if err != nil {
		return 0, 0
	}
	return major, minor
}

// featuresMaxAge bounds how long a reading of the apiserver's feature gates
// is trusted while its version stays the same: gates change only when an
// apiserver restarts, and /metrics is large.
const featuresMaxAge = 10 * time.Minute

// readFeatures returns the apiserver's feature gates as its /metrics reports
// them, read again when the apiserver's version changed or featuresMaxAge
// passed. When /metrics cannot be read, the release's defaults stand in.
func (r *Catalog) readFeatures(ctx context.Context, info *version.Info, major, minor int) apiserverFeatures {
	if !r.featuresRead.IsZero() && r.featuresVersion == info.GitVersion && time.Since(r.featuresRead) < featuresMaxAge {
		r.mu.RLock()
		defer r.mu.RUnlock()
		return r.features
	}
	defaults := releaseFeatures(major, minor)
	got, err := readFeatures(ctx, r.discovery.RESTClient(), defaults)
	if err != nil {
		r.featuresRead = time.Time{}
		klog.V(2).InfoS("Cannot read the apiserver's feature gates; assuming its release's defaults", "release", info.GitVersion, "defaults", defaults, "err", err)
		return defaults
	}
	if got != defaults {
		klog.InfoS("The apiserver's feature gates differ from its release's defaults", "release", info.GitVersion, "gates", got, "defaults", defaults)
	}
	r.featuresRead, r.featuresVersion = time.Now(), info.GitVersion
	return got
}

// WatchListDefaults reports whether the apiserver turns a watch from
// resourceVersion "" or "0" without sendInitialEvents into a watch-list.
func (r *Catalog) WatchListDefaults() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.features.WatchList
}

// WatchListGzip reports whether the apiserver gzips watch-list responses
// for clients that accept it.
func (r *Catalog) WatchListGzip() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.features.WatchListCompression
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// aggregatedGroups returns the group versions that APIServices delegate to
// another server (spec.service set); the others are served by the
// apiserver itself from its etcd.
func (r *Catalog) aggregatedGroups(ctx context.Context) (map[schema.GroupVersion]bool, error) {
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
