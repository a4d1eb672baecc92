package snapshot

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The runtime's own goroutine that runs cleanups registered with
	// runtime.AddCleanup (by the standard library) is not a leak.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("runtime.runCleanups"))
}
