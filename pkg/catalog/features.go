package catalog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// apiserverFeatures are the apiserver feature gates that change what a watch
// request means or how its answer is encoded; listproxy answers as the
// apiserver would with the same gates.
type apiserverFeatures struct {
	// WatchList: a watch from resourceVersion "" or "0" without
	// sendInitialEvents is a watch-list (k8s.io/apiserver's
	// SetListOptionsDefaults).
	WatchList bool
	// WatchListCompression: watch-list responses are gzipped for clients
	// that accept it.
	WatchListCompression bool
}

// releaseFeatures returns the gates' defaults in release major.minor
// (k8s.io/apiserver/pkg/features): WatchList is on in 1.32 and from 1.34,
// WatchListCompression from 1.37. An unknown release (0, 0) has both off,
// so such watches pass through and the apiserver gives its own semantics.
func releaseFeatures(major, minor int) apiserverFeatures {
	atLeast := func(m int) bool { return major > 1 || major == 1 && minor >= m }
	return apiserverFeatures{
		WatchList:            major == 1 && minor == 32 || atLeast(34),
		WatchListCompression: atLeast(37),
	}
}

// featureMetric is the apiserver's gauge of its feature gates, one series
// per gate with labels name and stage, value 1 when enabled (component-base
// metrics/prometheus/feature, since 1.26).
const featureMetric = "kubernetes_feature_enabled"

// readFeatures reads the apiserver's feature gates from its /metrics. A gate
// the apiserver does not report keeps its value in defaults. An error means
// the gates could not be read (no permission for get on the non-resource
// URL /metrics, for example).
func readFeatures(ctx context.Context, client rest.Interface, defaults apiserverFeatures) (apiserverFeatures, error) {
	body, err := client.Get().AbsPath("/metrics").SetHeader("Accept", "text/plain;version=0.0.4").Stream(ctx)
	if err != nil {
		return defaults, fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	defer body.Close()
	text, err := familyLines(body, featureMetric)
	if err != nil {
		return defaults, fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return defaults, fmt.Errorf("parse the apiserver's /metrics: %w", err)
	}
	family, ok := families[featureMetric]
	if !ok {
		return defaults, fmt.Errorf("the apiserver's /metrics has no %s", featureMetric)
	}
	got := defaults
	for _, m := range family.GetMetric() {
		enabled := m.GetGauge().GetValue() == 1
		for _, l := range m.GetLabel() {
			if l.GetName() != "name" {
				continue
			}
			switch l.GetValue() {
			case "WatchList":
				got.WatchList = enabled
			case "WatchListCompression":
				got.WatchListCompression = enabled
			}
		}
	}
	return got, nil
}

// familyLines returns the lines of the text exposition body that belong to
// metric family name (its HELP, TYPE and samples), so that an apiserver's
// /metrics, tens of MiB in a large cluster, is read through a small buffer
// rather than held and parsed whole.
func familyLines(body io.Reader, name string) ([]byte, error) {
	prefixes := [][]byte{[]byte(name + "{"), []byte(name + " "), []byte("# HELP " + name + " "), []byte("# TYPE " + name + " ")}
	br := bufio.NewReaderSize(body, 64<<10)
	var out []byte
	for {
		line, err := br.ReadSlice('\n')
		keep := slices.ContainsFunc(prefixes, func(p []byte) bool { return bytes.HasPrefix(line, p) })
		for errors.Is(err, bufio.ErrBufferFull) { // the rest of a long line
			if keep {
				out = append(out, line...)
			}
			line, err = br.ReadSlice('\n')
		}
		if keep {
			out = append(out, line...)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
