package app

import (
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
)

// Version is listproxy's release version. The Helm chart's appVersion
// (charts/listproxy/Chart.yaml) must equal it; test/chart checks that.
const Version = "0.1.0"

// VersionInfo returns what 'listproxy --version' prints: the release, the Go
// toolchain and the version of every k8s.io module the binary was built with
// (replacements resolved), one per line. bi is the binary's build
// information (debug.ReadBuildInfo); nil omits the modules.
func VersionInfo(bi *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listproxy %s\n", Version)
	if bi == nil {
		return b.String()
	}
	fmt.Fprintf(&b, "go %s\n", bi.GoVersion)
	var mods []string
	for _, m := range bi.Deps {
		if !strings.HasPrefix(m.Path, "k8s.io/") {
			continue
		}
		v := m.Version
		if m.Replace != nil {
			v = m.Replace.Version
		}
		mods = append(mods, m.Path+" "+v)
	}
	sort.Strings(mods)
	for _, m := range mods {
		b.WriteString(m + "\n")
	}
	return b.String()
}
