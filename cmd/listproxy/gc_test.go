package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live uint64
		want int
	}{
		{0, 100},           // before the first collection: Go's default
		{16 * mib, 100},    // 64 MiB would be 400%: capped
		{64 * mib, 100},    // the headroom is the whole heap
		{128 * mib, 50},    // 64 MiB of 128
		{200 * mib, 32},    // 64 of 200, rounded up
		{640 * mib, 10},    // 64 MiB is 10%
		{6400 * mib, 10},   // 10% is more than 64 MiB
		{640*mib + 1, 10},  // never below 10%
		{640*mib - 1, 11},  // the headroom rounded up
		{1 << 40, 10},      // a terabyte
		{64*mib + 1, 100},  // just over the headroom: 99.99…% rounds up
		{96 * mib, 67},     // 66.7% rounded up
		{1, 100},           // a byte
		{3 * 64 * mib, 34}, // 33.3% rounded up
	}
	for _, tc := range tests {
		if got := gcPercentFor(tc.live); got != tc.want {
			t.Errorf("gcPercentFor(%d) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

// TestTuneGCFollowsTheLiveHeap checks that GOGC follows the live heap after
// every collection, not only the first: 256 MiB live (and what the test
// binary holds besides) gives at most 25%, and once they are freed the next
// collection gives 100% again.
func TestTuneGCFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tuneGC()
	live := make([]byte, 256<<20)
	runtime.GC()
	waitGOGC(t, 15, 25)
	runtime.KeepAlive(live)
	live = nil
	runtime.GC()
	waitGOGC(t, 100, 100)
	runtime.KeepAlive(live)
}

// waitGOGC waits until the tuner, which runs shortly after a collection,
// has set GOGC within [lo, hi]. Each look that finds it elsewhere runs
// another collection: the tuner arms its next hook after setting GOGC, so
// a collection right after it may find no hook yet.
func waitGOGC(t *testing.T, lo, hi uint64) {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		metrics.Read(sample)
		got := sample[0].Value.Uint64()
		if lo <= got && got <= hi {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d, want %d to %d", got, lo, hi)
		}
		runtime.GC()
	}
}
