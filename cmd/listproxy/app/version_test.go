package app

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestVersionInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Deps: []*debug.Module{
			{Path: "k8s.io/client-go", Version: "v0.36.3"},
			{Path: "github.com/google/btree", Version: "v1.1.3"},
			{Path: "k8s.io/apimachinery", Version: "v0.0.0", Replace: &debug.Module{Path: "k8s.io/apimachinery", Version: "v0.36.3"}},
		},
	}
	want := "listproxy " + Version + "\ngo go1.26.8\nk8s.io/apimachinery v0.36.3\nk8s.io/client-go v0.36.3\n"
	if diff := cmp.Diff(want, VersionInfo(bi)); diff != "" {
		t.Errorf("VersionInfo (-want +got):\n%s", diff)
	}
	if got := VersionInfo(nil); got != "listproxy "+Version+"\n" {
		t.Errorf("VersionInfo(nil) = %q", got)
	}
}

func TestLoggingFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for none
	}{
		{name: "defaults"},
		{name: "json_verbose", args: []string{"--logging-format=json", "-v=4"}},
		{name: "vmodule", args: []string{"--vmodule=lists*=5"}},
		{name: "unknown_format", args: []string{"--logging-format=yaml"}, wantErr: "--logging-format: "},
		{name: "alpha_option_without_gate", args: []string{"--logging-format=json", "--log-json-split-stream"}, wantErr: "--log-json-*: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			for _, s := range o.Flags().FlagSets {
				fs.AddFlagSet(s)
			}
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
