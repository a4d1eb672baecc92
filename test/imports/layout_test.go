package imports

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designDoc is docs/design.md, relative to this package's directory (where
// go test runs it).
var designDoc = filepath.Join("..", "..", "docs", "design.md")

// layoutRow is one row of the package table in docs/design.md "Layout".
type layoutRow struct {
	line     int      // line number in docs/design.md
	name     string   // its package cell as written, for messages
	stated   string   // its imports cell as written, for messages
	packages []string // the packages it names, relative to the module
	imports  []string // the imports of ours it states, relative to the module
}

// TestLayoutTable fails when a row of the package table in docs/design.md
// "Layout" states imports that differ from what go list reports for the
// package's non-test code, when a row names a package that does not
// exist, or when a package under pkg/ or cmd/ has no row.
func TestLayoutTable(t *testing.T) {
	rows := parseLayoutTable(t, designDoc)
	actual := goListImports(t, module+"pkg/...", module+"cmd/...")
	if len(actual) == 0 {
		t.Fatal("go list found no packages under pkg/ and cmd/")
	}

	described := map[string]int{} // package -> line of its row
	for _, row := range rows {
		for _, pkg := range row.packages {
			if line, dup := described[pkg]; dup {
				t.Errorf("docs/design.md:%d: the layout table's row for %s repeats the row at line %d", row.line, pkg, line)
				continue
			}
			described[pkg] = row.line
			imports, ok := actual[pkg]
			if !ok {
				t.Errorf("docs/design.md:%d: the layout table's row %s names %s, which is not a package of the module", row.line, row.name, pkg)
				continue
			}
			if missing, extra := diff(row.imports, imports); len(missing)+len(extra) > 0 {
				t.Errorf("docs/design.md:%d: the layout table's row %s says %s imports %s; go list says %s%s%s",
					row.line, row.name, pkg, row.stated, listOrNone(imports),
					describe("\n\timported but not in the row: ", missing),
					describe("\n\tin the row but not imported: ", extra))
			}
		}
	}
	for _, pkg := range sortedKeys(actual) {
		if _, ok := described[pkg]; !ok {
			t.Errorf("docs/design.md: the layout table has no row for %s (imports %s): add one", pkg, listOrNone(actual[pkg]))
		}
	}
}

// diff returns what actual has that stated lacks, and what stated has
// that actual lacks.
func diff(stated, actual []string) (missing, extra []string) {
	for _, imp := range actual {
		if !slices.Contains(stated, imp) {
			missing = append(missing, imp)
		}
	}
	for _, imp := range stated {
		if !slices.Contains(actual, imp) {
			extra = append(extra, imp)
		}
	}
	return missing, extra
}

func describe(prefix string, pkgs []string) string {
	if len(pkgs) == 0 {
		return ""
	}
	return prefix + strings.Join(pkgs, ", ")
}

func listOrNone(pkgs []string) string {
	if len(pkgs) == 0 {
		return "(none)"
	}
	s := slices.Clone(pkgs)
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// parseLayoutTable reads the table whose header starts "| package |" in
// the "### Layout" section of the design document. Each row names one or
// more packages in code spans in its first cell and their imports of ours
// in its last (— for none). A name is relative to pkg/ unless it starts
// with cmd/.
func parseLayoutTable(t *testing.T, path string) []layoutRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		rows      []layoutRow
		inLayout  bool
		inTable   bool
		sawHeader bool
		inFence   bool
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if inLayout && sawHeader {
				break
			}
			inLayout = strings.TrimSpace(line) == "### Layout"
			continue
		}
		if !inLayout {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the table ended
			}
			continue
		}
		cells := splitRow(line)
		if !inTable {
			if len(cells) > 0 && strings.TrimSpace(cells[0]) == "package" {
				inTable, sawHeader = true, true
			}
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the delimiter row
		}
		if len(cells) < 2 {
			t.Fatalf("docs/design.md:%d: a layout table row needs a package cell and an imports cell: %s", n, line)
		}
		row := layoutRow{line: n, name: strings.TrimSpace(cells[0]), stated: strings.TrimSpace(cells[len(cells)-1])}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			row.packages = append(row.packages, modulePath(m[1]))
		}
		if len(row.packages) == 0 {
			t.Fatalf("docs/design.md:%d: the layout table's row names no package in code spans: %s", n, line)
		}
		last := strings.TrimSpace(cells[len(cells)-1])
		if last != "—" && last != "-" {
			for _, m := range codeSpan.FindAllStringSubmatch(last, -1) {
				row.imports = append(row.imports, modulePath(m[1]))
			}
			if len(row.imports) == 0 {
				t.Fatalf("docs/design.md:%d: the layout table's imports cell is neither — nor packages in code spans: %q", n, last)
			}
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table (a header starting \"| package |\") under \"### Layout\"", path)
	}
	return rows
}

// splitRow returns a table row's cells. Cells hold no escaped pipes; a pipe
// inside a code span would end the cell, so the table must not use one.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	return strings.Split(line, "|")
}

// modulePath maps a name as the layout table writes it to a path relative
// to the module: cmd/... as it is, anything else under pkg/.
func modulePath(name string) string {
	name = strings.TrimSuffix(strings.TrimSpace(name), "/")
	if strings.HasPrefix(name, "cmd/") || strings.HasPrefix(name, "pkg/") {
		return name
	}
	return "pkg/" + name
}

// goListImports returns, for each package the patterns match, the packages
// of ours its non-test code imports, relative to the module path.
func goListImports(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			t.Fatalf("go list reported %s, outside %s", fields[0], module)
		}
		ours := []string{}
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(ours, rel) {
				ours = append(ours, rel)
			}
		}
		graph[pkg] = ours
	}
	return graph
}
