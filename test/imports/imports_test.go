// Package imports holds the tests that keep listproxy's import graph
// pointing down (TestImportGraph) and docs/design.md's layout table true to
// it (TestLayoutTable; docs/design.md "Layout"). It imports nothing of ours.
package imports

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/listproxy/listproxy/"

// allowed lists, for every package of ours, the packages of ours it may
// import directly (in its code or its tests). A package missing from the
// table fails the test: a new package states its place here.
var allowed = map[string][]string{
	"cmd/listproxy":     {"cmd/listproxy/app"},
	"cmd/listproxy/app": {"pkg/admission", "pkg/auth", "pkg/catalog", "pkg/consistency", "pkg/freshness", "pkg/lists", "pkg/paging", "pkg/proxy", "pkg/snapshot", "pkg/stores", "pkg/table", "pkg/watch", "pkg/wire"},

	"pkg/proxy": {"pkg/auth", "pkg/httpapi"},
	// The LIST and watch servers: each reaches its store through the
	// registry and parses its request with collection; neither imports
	// the other. The LIST server admits its responses with admission;
	// the watch server takes the same queue as its own Admitter.
	"pkg/lists": {"pkg/admission", "pkg/catalog", "pkg/collection", "pkg/freshness", "pkg/paging", "pkg/snapshot", "pkg/stores", "pkg/table", "pkg/wire", "pkg/gzstitch", "pkg/httpapi"},
	"pkg/watch": {"pkg/catalog", "pkg/collection", "pkg/freshness", "pkg/gzstitch", "pkg/httpapi", "pkg/paging", "pkg/snapshot", "pkg/stores", "pkg/table", "pkg/wire"},
	// collection looks resources up in the catalog; it reaches stores only
	// for ObjectUID, the uid of a Table store's row.
	"pkg/collection": {"pkg/catalog", "pkg/snapshot", "pkg/stores", "pkg/table", "pkg/wire"},
	// The admission of snapshot-served responses for writing: below the
	// servers, above nothing of ours.
	"pkg/admission": {},
	// The registry of snapshot stores: lifecycle, sources, over the
	// catalog of what discovery says.
	"pkg/stores": {"pkg/catalog", "pkg/consistency", "pkg/freshness", "pkg/snapshot", "pkg/table", "pkg/wire", "pkg/httpapi"},
	// What discovery says: resources, their fields, warnings and Table
	// columns, the apiserver's feature gates; below the registry.
	"pkg/catalog":     {"pkg/table", "pkg/wire"},
	"pkg/auth":        {"pkg/httpapi"},
	"pkg/consistency": {"pkg/snapshot", "pkg/wire", "pkg/httpapi"},
	"pkg/freshness":   {"pkg/snapshot", "pkg/wire", "test/framework/binaries", "test/framework/freeport"},
	"pkg/paging":      {},
	"pkg/snapshot":    {"pkg/gzstitch"},
	// Test helpers over a package's exported API, for tests only.
	"pkg/snapshot/snapshottest": {"pkg/snapshot"},
	"pkg/wire":                  {},
	"pkg/table":                 {},
	"pkg/gzstitch":              {},
	"pkg/httpapi":               {},

	// Tests and tools run listproxy in process and may read any package.
	"test/framework":          {"cmd/listproxy/app", "pkg/*", "test/framework/binaries", "test/framework/freeport"},
	"test/framework/binaries": {},
	"test/framework/freeport": {},
	"test/framework/seed":     {"test/framework"},
	"test/framework/workload": {"test/framework", "test/framework/seed"},
	"test/e2e":                {"cmd/listproxy/app", "pkg/*", "test/framework", "test/framework/binaries", "test/framework/freeport", "test/framework/seed", "test/framework/workload"},
	"test/chart":              {"cmd/listproxy/app", "pkg/*", "test/framework", "test/framework/freeport"},
	"test/imports":            {},
	"hack/bench":              {"pkg/*", "test/framework", "test/framework/freeport", "test/framework/seed", "test/framework/workload"},
	"hack/localup":            {"pkg/*", "test/framework", "test/framework/freeport", "test/framework/seed"},
	"hack/conformance":        {"test/framework", "test/framework/freeport"},
}

// TestImportGraph fails on any import of ours that the table does not allow:
// an import pointing up (snapshot, wire, freshness or paging reaching above
// themselves; lists, auth or consistency importing the edge), or anything
// outside tests and tools importing cmd.
func TestImportGraph(t *testing.T) {
	graph := goList(t)
	if len(graph) == 0 {
		t.Fatal("go list found no packages")
	}
	for pkg, imports := range graph {
		allow, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s is not in the import table: add it with the packages it may import", pkg)
			continue
		}
		for _, imp := range imports {
			if imp == pkg || permits(allow, imp) {
				continue
			}
			t.Errorf("%s imports %s, which the import table does not allow (imports point down: docs/design.md \"Layout\")", pkg, imp)
		}
	}
}

func permits(allow []string, imp string) bool {
	return slices.ContainsFunc(allow, func(a string) bool {
		if prefix, ok := strings.CutSuffix(a, "*"); ok {
			return strings.HasPrefix(imp, prefix)
		}
		return a == imp
	})
}

// goList returns each package of the module with the packages of ours its
// code and tests import, relative to the module path.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], module)
		ours := []string{}
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(ours, rel) {
				ours = append(ours, rel)
			}
		}
		graph[pkg] = ours
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return graph
}
