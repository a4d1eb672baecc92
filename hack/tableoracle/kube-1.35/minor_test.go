package oracle

// minor is the release whose printers this module links: 1.35. The
// oracle itself (oracle_test.go, fill_test.go, installs_test.go) is the
// kube-1.37 module's, linked: it is the same for every release, only the
// printers it is built against differ.
const minor = 35
