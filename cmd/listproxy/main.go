// Command listproxy is a caching reverse proxy for the Kubernetes API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/cmd/listproxy/app"
)

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		tuneGC() // gc.go
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is listproxy's command line: it parses args, prints the version or
// applies the logging configuration and serves until SIGINT or SIGTERM. It
// returns the exit code: 0 after a shutdown, --help or --version, 1 when
// listproxy cannot start or serve, 2 for flags that do not parse.
func run(args []string, stdout, stderr io.Writer) int {
	opts := app.NewOptions()
	sections := opts.Flags()
	fs := pflag.NewFlagSet("listproxy", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	fs.SetOutput(stderr)
	for _, name := range sections.Order {
		fs.AddFlagSet(sections.FlagSets[name])
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: listproxy [flags]\n\nlistproxy is a caching reverse proxy for the Kubernetes API: it answers LISTs from snapshots and passes every other request through to the apiserver with its own credentials.\n")
		cliflag.PrintSections(stderr, sections, 0)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "listproxy: %v\n", err)
		return 2
	}
	if opts.Version {
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, app.VersionInfo(bi))
		return 0
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "listproxy: %v\n", err)
		return 1
	}
	// Applied before anything else logs; Validate checked it.
	if err := logsapi.ValidateAndApply(opts.Logs, nil); err != nil {
		fmt.Fprintf(stderr, "listproxy: %v\n", err)
		return 1
	}
	defer logs.FlushLogs()
	klog.InfoS("Starting listproxy", "version", app.Version)
	cliflag.PrintFlags(fs) // at -v=1, as Kubernetes components do

	cfg, err := opts.Complete()
	if err != nil {
		klog.ErrorS(err, "Cannot start")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg); err != nil {
		klog.ErrorS(err, "Serving failed")
		return 1
	}
	return 0
}
