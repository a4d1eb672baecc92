package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestContinuePagesFromEtcd: releases before 1.34 read continue pages from
// etcd, so the walk scenario holds etcd's own CPU to a target there.
func TestContinuePagesFromEtcd(t *testing.T) {
	for version, want := range map[string]bool{"1.31.14": true, "1.33.0": true, "1.34.0": false, "1.37.2": false, "": false} {
		if got := continuePagesFromEtcd(version); got != want {
			t.Errorf("continuePagesFromEtcd(%q) = %v, want %v", version, got, want)
		}
	}
}
