package catalog

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The certificates.k8s.io resources' field selectors are those of the
// apiserver's field-label conversions (v1): kube-controller-manager's
// ClusterTrustBundle publisher watches by spec.signerName, and a
// PodCertificateRequest's conversion refuses metadata.namespace, so
// listproxy must not answer it.
func TestFieldsForCertificates(t *testing.T) {
	certs := func(r string) schema.GroupResource {
		return schema.GroupResource{Group: "certificates.k8s.io", Resource: r}
	}
	tests := []struct {
		gr         schema.GroupResource
		namespaced bool
		selector   string
		want       bool
	}{
		{gr: certs("clustertrustbundles"), selector: "spec.signerName=example.com/signer", want: true},
		{gr: certs("clustertrustbundles"), selector: "metadata.name=a", want: true},
		{gr: certs("clustertrustbundles"), selector: "spec.trustBundle=x", want: false},
		{gr: certs("certificatesigningrequests"), selector: "spec.signerName!=kubernetes.io/kubelet-serving", want: true},
		{gr: certs("podcertificaterequests"), namespaced: true, selector: "spec.signerName=s,spec.podName=p,spec.nodeName=n", want: true},
		{gr: certs("podcertificaterequests"), namespaced: true, selector: "metadata.namespace=default", want: false},
	}
	for _, tc := range tests {
		sel, err := fields.ParseSelector(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if got := fieldsFor(tc.gr, false, tc.namespaced, nil).Accepts(sel, false); got != tc.want {
			t.Errorf("%s: Accepts(%q) = %v, want %v", tc.gr, tc.selector, got, tc.want)
		}
	}
}
