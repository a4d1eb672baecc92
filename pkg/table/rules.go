package table

import "k8s.io/apimachinery/pkg/runtime/schema"

// The apiserver releases (1.minor) whose printers the rules are verified
// against.
const (
	minMinor = 31
	maxMinor = 37
)

// builtin is the rule of one built-in resource over the releases
// [from, to] (to 0: to maxMinor).
type builtin struct {
	gr       schema.GroupResource
	from, to int
	kind     kind
	age      int // the Age cell, -1 for none
}

func gr(group, resource string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: resource}
}

// builtins are the served built-in resources. Every clock cell of each is
// an Age cell, or the one other cell its kind names: pods Restarts (3),
// jobs Duration (3), cronjobs Last Schedule (5), events Last Seen (0)
// and First Seen (7). The cell positions are those of the apiserver's
// printers (Wide) on each release. Not served: flowschemas (the printer
// sorts each page), storageclasses from 1.37 (the default marker is
// chosen within each page), devicetaintrules, resourcepoolstatusrequests
// and evictions (other clock cells), and anything not listed.
var builtins = []builtin{
	// Rows with clock cells beyond Age.
	{gr: gr("", "pods"), from: 31, kind: kindPod, age: 4},
	{gr: gr("batch", "jobs"), from: 31, kind: kindJob, age: 4},
	{gr: gr("batch", "cronjobs"), from: 31, kind: kindCronJob, age: 6},
	{gr: gr("", "events"), from: 31, kind: kindEvent, age: -1},
	{gr: gr("events.k8s.io", "events"), from: 31, kind: kindEventsV1, age: -1},

	// Age in cell 1.
	{gr: gr("", "serviceaccounts"), from: 35, age: 1},
	{gr: gr("certificates.k8s.io", "certificatesigningrequests"), from: 31, age: 1},
	{gr: gr("resource.k8s.io", "deviceclasses"), from: 31, age: 1},
	{gr: gr("resource.k8s.io", "resourceclaimtemplates"), from: 31, age: 1},
	{gr: gr("", "resourcequotas"), from: 31, to: 32, age: 1},

	// Age in cell 2.
	{gr: gr("", "serviceaccounts"), from: 31, to: 34, age: 2},
	{gr: gr("", "configmaps"), from: 31, age: 2},
	{gr: gr("", "endpoints"), from: 31, age: 2},
	{gr: gr("", "namespaces"), from: 31, age: 2},
	{gr: gr("apps", "statefulsets"), from: 31, age: 2},
	{gr: gr("admissionregistration.k8s.io", "mutatingwebhookconfigurations"), from: 31, age: 2},
	{gr: gr("admissionregistration.k8s.io", "validatingwebhookconfigurations"), from: 31, age: 2},
	{gr: gr("coordination.k8s.io", "leases"), from: 31, age: 2},
	{gr: gr("networking.k8s.io", "networkpolicies"), from: 31, age: 2},
	{gr: gr("networking.k8s.io", "servicecidrs"), from: 31, age: 2},
	{gr: gr("networking.k8s.io", "ipaddresses"), from: 31, age: 2},
	{gr: gr("node.k8s.io", "runtimeclasses"), from: 31, age: 2},
	{gr: gr("rbac.authorization.k8s.io", "rolebindings"), from: 31, age: 2},
	{gr: gr("rbac.authorization.k8s.io", "clusterrolebindings"), from: 31, age: 2},
	{gr: gr("resource.k8s.io", "resourceclaims"), from: 31, age: 2},
	{gr: gr("resource.k8s.io", "podschedulingcontexts"), from: 31, to: 31, age: 2},
	{gr: gr("storage.k8s.io", "csinodes"), from: 31, age: 2},
	{gr: gr("storage.k8s.io", "volumeattributesclasses"), from: 31, age: 2},

	// Age in cell 3.
	{gr: gr("", "nodes"), from: 31, age: 3},
	{gr: gr("", "resourcequotas"), from: 33, age: 3},
	{gr: gr("", "secrets"), from: 31, age: 3},
	{gr: gr("admissionregistration.k8s.io", "validatingadmissionpolicies"), from: 31, age: 3},
	{gr: gr("admissionregistration.k8s.io", "validatingadmissionpolicybindings"), from: 31, age: 3},
	{gr: gr("admissionregistration.k8s.io", "mutatingadmissionpolicies"), from: 32, age: 3},
	{gr: gr("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"), from: 32, age: 3},
	{gr: gr("apps", "controllerrevisions"), from: 31, age: 3},
	{gr: gr("internal.apiserver.k8s.io", "storageversions"), from: 31, age: 3},
	{gr: gr("networking.k8s.io", "ingressclasses"), from: 31, age: 3},
	{gr: gr("scheduling.k8s.io", "priorityclasses"), from: 31, age: 3},

	// Age in cell 4.
	{gr: gr("", "replicationcontrollers"), from: 31, age: 4},
	{gr: gr("apps", "deployments"), from: 31, age: 4},
	{gr: gr("apps", "replicasets"), from: 31, age: 4},
	{gr: gr("coordination.k8s.io", "leasecandidates"), from: 31, age: 4},
	{gr: gr("discovery.k8s.io", "endpointslices"), from: 31, age: 4},
	{gr: gr("policy", "poddisruptionbudgets"), from: 31, age: 4},
	{gr: gr("resource.k8s.io", "resourceslices"), from: 31, age: 4},

	// Age in cell 5.
	{gr: gr("", "services"), from: 31, age: 5},
	{gr: gr("networking.k8s.io", "ingresses"), from: 31, age: 5},
	{gr: gr("storage.k8s.io", "storageclasses"), from: 31, to: 36, age: 5},
	{gr: gr("storage.k8s.io", "volumeattachments"), from: 31, age: 5},

	// Age in cell 6 and beyond.
	{gr: gr("autoscaling", "horizontalpodautoscalers"), from: 31, age: 6},
	{gr: gr("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"), from: 31, age: 6},
	{gr: gr("apps", "daemonsets"), from: 31, age: 7},
	{gr: gr("", "persistentvolumeclaims"), from: 31, age: 7},
	{gr: gr("storage.k8s.io", "csidrivers"), from: 31, age: 7},
	{gr: gr("", "persistentvolumes"), from: 31, age: 9},

	// No clock cell: printers without one, and the apiserver's default
	// convertor (its Created At cell is an absolute time).
	{gr: gr("", "podtemplates"), from: 31, age: -1},
	{gr: gr("certificates.k8s.io", "clustertrustbundles"), from: 31, age: -1},
	{gr: gr("storagemigration.k8s.io", "storageversionmigrations"), from: 31, age: -1},
	{gr: gr("certificates.k8s.io", "podcertificaterequests"), from: 34, age: -1},
	{gr: gr("rbac.authorization.k8s.io", "roles"), from: 31, age: -1},
	{gr: gr("rbac.authorization.k8s.io", "clusterroles"), from: 31, age: -1},
	{gr: gr("", "limitranges"), from: 31, age: -1},
	{gr: gr("storage.k8s.io", "csistoragecapacities"), from: 31, age: -1},
	{gr: gr("apiextensions.k8s.io", "customresourcedefinitions"), from: 31, age: -1},
}
