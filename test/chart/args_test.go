package chart_test

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
)

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
			opts.AddFlags(fs)
			if err := fs.Parse(c.Args); err != nil {
				t.Fatalf("listproxy rejects the chart's arguments %q: %v", c.Args, err)
			}
			if err := opts.Validate(); err != nil {
				t.Errorf("listproxy's validation rejects the chart's arguments %q: %v", c.Args, err)
			}
		})
	}
}
