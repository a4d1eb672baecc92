package oracle

import _ "k8s.io/kubernetes/pkg/apis/lifecycle/install"

// minor is the release whose printers this module links: 1.37.
const minor = 37
