package freshness

import "testing"

func TestDefaultPrefix(t *testing.T) {
	tests := []struct {
		name     string
		root     string
		group    string
		resource string
		custom   bool
		want     string
	}{
		{name: "core_pods", group: "", resource: "pods", want: "/registry/pods/"},
		{name: "core_nodes_are_minions", resource: "nodes", want: "/registry/minions/"},
		{name: "core_services", resource: "services", want: "/registry/services/specs/"},
		{name: "core_endpoints", resource: "endpoints", want: "/registry/services/endpoints/"},
		{name: "core_replicationcontrollers", resource: "replicationcontrollers", want: "/registry/controllers/"},
		{name: "extensions_replicationcontrollers_cohabit", group: "extensions", resource: "replicationcontrollers", want: "/registry/controllers/"},
		{name: "core_events", resource: "events", want: "/registry/events/"},
		{name: "events_group_events", group: "events.k8s.io", resource: "events", want: "/registry/events/"},
		{name: "networking_ingresses", group: "networking.k8s.io", resource: "ingresses", want: "/registry/ingress/"},
		{name: "extensions_ingresses", group: "extensions", resource: "ingresses", want: "/registry/ingress/"},
		{name: "policy_podsecuritypolicies", group: "policy", resource: "podsecuritypolicies", want: "/registry/podsecuritypolicy/"},
		{name: "extensions_podsecuritypolicies", group: "extensions", resource: "podsecuritypolicies", want: "/registry/podsecuritypolicy/"},
		{name: "apps_deployments_no_group", group: "apps", resource: "deployments", want: "/registry/deployments/"},
		{name: "rbac_clusterroles_no_group", group: "rbac.authorization.k8s.io", resource: "clusterroles", want: "/registry/clusterroles/"},
		{name: "coordination_leases", group: "coordination.k8s.io", resource: "leases", want: "/registry/leases/"},
		{name: "crds_group_prefixed", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", want: "/registry/apiextensions.k8s.io/customresourcedefinitions/"},
		{name: "apiservices_group_prefixed", group: "apiregistration.k8s.io", resource: "apiservices", want: "/registry/apiregistration.k8s.io/apiservices/"},
		{name: "custom_resource", group: "stable.example.com", resource: "crontabs", custom: true, want: "/registry/stable.example.com/crontabs/"},
		{name: "custom_resource_named_like_builtin", group: "example.com", resource: "nodes", custom: true, want: "/registry/example.com/nodes/"},
		{name: "custom_root", root: "/kube", resource: "pods", want: "/kube/pods/"},
		{name: "custom_root_trailing_slash", root: "/kube/", resource: "nodes", want: "/kube/minions/"},
		{name: "uppercase_is_lowered", group: "Apps", resource: "Deployments", want: "/registry/deployments/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultPrefix(tc.root, tc.group, tc.resource, tc.custom); got != tc.want {
				t.Errorf("DefaultPrefix(%q, %q, %q, %v) = %q, want %q", tc.root, tc.group, tc.resource, tc.custom, got, tc.want)
			}
		})
	}
}
