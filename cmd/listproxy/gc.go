package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// listproxy's garbage collection: the next collection starts once the heap
// has grown by minGCPercent percent of the live heap or by minGCHeadroom,
// whichever is more, and at most by Go's default of 100%.
//
// Most of a large heap is cached object bytes, so a low percentage keeps
// RSS close to them (1.37–1.45× at 150,000 pods). On a small heap the same
// percentage means a collection every few MiB allocated, each marking the
// whole heap: at GOGC 10, a control plane's writes spent half of
// listproxy's CPU in the collector and delayed events behind its assists.
// The headroom bounds how often that happens; it costs at most
// minGCHeadroom of RSS.
const (
	minGCPercent  = 10
	minGCHeadroom = 64 << 20
	maxGCPercent  = 100
)

// gcPercentFor is the GOGC that gives a heap of live bytes its headroom.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return maxGCPercent
	}
	p := (100*minGCHeadroom + live - 1) / live
	return int(min(max(p, minGCPercent), maxGCPercent))
}

// tuneGC sets GOGC for the live heap after every collection, for the
// process's life; calls after the first do nothing. The hook is a cleanup
// of an unreachable object, which runs once a collection has found it
// unreachable, and arms the next: one hook is pending at a time.
func tuneGC() { gcTuner.Do(startGCTuner) }

var gcTuner sync.Once

func startGCTuner() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	debug.SetGCPercent(gcPercentFor(0))
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(gcSentinel), func(struct{}) {
			metrics.Read(sample)
			debug.SetGCPercent(gcPercentFor(sample[0].Value.Uint64()))
			arm()
		}, struct{}{})
	}
	arm()
}

// gcSentinel is big enough not to share a tiny-allocator block, whose
// objects are freed together.
type gcSentinel struct{ _ [32]byte }
