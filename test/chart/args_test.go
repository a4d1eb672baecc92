package chart_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
)

// TestAppVersion checks that the chart's appVersion (its default image tag)
// is the version the binary reports.
func TestAppVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), chartPath, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != app.Version {
		t.Errorf("Chart.yaml appVersion = %q, listproxy --version says %q", chart.AppVersion, app.Version)
	}
}

// TestRenderedArgsAreValidFlags feeds the container arguments of every
// rendered variant to listproxy's own flag parsing and validation, so the
// chart cannot drift from the binary.
func TestRenderedArgsAreValidFlags(t *testing.T) {
	h := newHelm(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := h.template(t, "listproxy", v.args...)
			c := listproxyContainer(t, r.deployment(t))
			opts := app.NewOptions()
			fs := pflag.NewFlagSet("listproxy", pflag.ContinueOnError)
			for _, section := range opts.Flags().FlagSets {
				fs.AddFlagSet(section)
			}
			if err := fs.Parse(c.Args); err != nil {
				t.Fatalf("listproxy rejects the chart's arguments %q: %v", c.Args, err)
			}
			if err := opts.Validate(); err != nil {
				t.Errorf("listproxy's validation rejects the chart's arguments %q: %v", c.Args, err)
			}
		})
	}
}
