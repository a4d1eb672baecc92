package workload

import (
	"regexp"

	"github.com/listproxy/listproxy/test/framework"
)

// NamespaceScoped ends a ComponentReads key of requests in a namespace.
const NamespaceScoped = "in a namespace"

// componentUserAgent matches the user agents of kube-controller-manager's
// and kube-scheduler's clients (each controller's ends in its service
// account's name).
var componentUserAgent = regexp.MustCompile(`^kube-(controller-manager|scheduler)/`)

// ComponentReads counts, from cp's audit log, the LISTs and WATCHes
// (watch-lists included) that kube-controller-manager and kube-scheduler
// sent which reached the apiserver, by "verb resource[.group]", followed by
// " "+NamespaceScoped for requests in a namespace; with one user agent and
// request URI of each.
func ComponentReads(cp *framework.ControlPlane) (reads map[string]int, examples map[string]string, err error) {
	events, err := cp.AuditEvents()
	if err != nil {
		return nil, nil, err
	}
	reads, examples = map[string]int{}, map[string]string{}
	for _, ev := range events {
		if ev.ObjectRef == nil || !componentUserAgent.MatchString(ev.UserAgent) {
			continue
		}
		// One audit event per request: a watch's when its response
		// started, a list's when it completed.
		watchStarted := ev.Verb == "watch" && ev.Stage == "ResponseStarted"
		listCompleted := ev.Verb == "list" && ev.Stage == "ResponseComplete"
		if !watchStarted && !listCompleted {
			continue
		}
		key := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.APIGroup != "" {
			key += "." + ev.ObjectRef.APIGroup
		}
		if ev.ObjectRef.Namespace != "" {
			key += " " + NamespaceScoped
		}
		reads[key]++
		examples[key] = ev.UserAgent + " " + ev.RequestURI
	}
	return reads, examples, nil
}
