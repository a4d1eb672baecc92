package freshness

import "strings"

// DefaultRoot is kube-apiserver's default etcd prefix (--etcd-prefix).
const DefaultRoot = "/registry"

type groupResource struct{ group, resource string }

// cohabitants maps a resource served by several API groups to the one whose
// storage they share, as kube-apiserver's storage factory does
// (AddCohabitatingResources in k8s.io/kubernetes
// pkg/kubeapiserver/default_storage_factory_builder.go, v1.36.3). Only pairs
// whose storage prefix differs from the resource name matter here; the
// others (deployments, daemonsets, replicasets, networkpolicies, events)
// already share "<resource>".
var cohabitants = map[groupResource]groupResource{
	{"extensions", "replicationcontrollers"}: {"", "replicationcontrollers"},
	{"extensions", "ingresses"}:              {"networking.k8s.io", "ingresses"},
	{"extensions", "podsecuritypolicies"}:    {"policy", "podsecuritypolicies"},
}

// specialPrefixes are the storage prefixes compiled into kube-apiserver
// (SpecialDefaultResourcePrefixes, same file), plus podsecuritypolicies,
// which was stored under "podsecuritypolicy" until its removal in v1.25.
var specialPrefixes = map[groupResource]string{
	{"", "replicationcontrollers"}:     "controllers",
	{"", "endpoints"}:                  "services/endpoints",
	{"", "nodes"}:                      "minions",
	{"", "services"}:                   "services/specs",
	{"networking.k8s.io", "ingresses"}: "ingress",
	{"policy", "podsecuritypolicies"}:  "podsecuritypolicy",
}

// groupPrefixed are the API groups whose servers store resources under
// "<group>/<resource>": kube-apiserver runs them with a SimpleStorageFactory
// (k8s.io/apiserver/pkg/server/options.SimpleStorageFactory).
var groupPrefixed = map[string]bool{
	"apiextensions.k8s.io":   true, // CustomResourceDefinitions
	"apiregistration.k8s.io": true, // APIServices (kube-aggregator)
}

// DefaultPrefix returns the etcd key prefix, with a trailing "/", under
// which kube-apiserver stores resource of API group group (core: "") when
// its --etcd-prefix is root (empty: DefaultRoot):
//
//   - custom resources (custom true): "<root>/<group>/<resource>/";
//   - CustomResourceDefinitions and APIServices: "<root>/<group>/<resource>/";
//   - the built-in exceptions, e.g. nodes: "<root>/minions/", services:
//     "<root>/services/specs/", endpoints: "<root>/services/endpoints/",
//     ingresses: "<root>/ingress/";
//   - every other built-in resource: "<root>/<resource>/" (no group).
//
// It cannot know a cluster's --storage-prefix overrides; callers should let
// users override it and verify it (see Checker.Count).
func DefaultPrefix(root string, group, resource string, custom bool) string {
	if root == "" {
		root = DefaultRoot
	}
	root = strings.TrimRight(root, "/")
	group, resource = strings.ToLower(group), strings.ToLower(resource)
	if custom || groupPrefixed[group] {
		return root + "/" + group + "/" + resource + "/"
	}
	gr := groupResource{group, resource}
	if to, ok := cohabitants[gr]; ok {
		gr = to
	}
	if p, ok := specialPrefixes[gr]; ok {
		return root + "/" + p + "/"
	}
	return root + "/" + resource + "/"
}
