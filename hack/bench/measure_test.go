package main

import (
	"context"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/listproxy/listproxy/test/framework"
)

func TestHistogramQuantile(t *testing.T) {
	parse := func(text string) framework.Metrics {
		t.Helper()
		m, err := framework.ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const header = "# TYPE wait_seconds histogram\n"
	before := parse(header + `wait_seconds_bucket{outcome="served",le="1"} 10
wait_seconds_bucket{outcome="served",le="2"} 10
wait_seconds_bucket{outcome="served",le="+Inf"} 10
wait_seconds_sum{outcome="served"} 5
wait_seconds_count{outcome="served"} 10
wait_seconds_bucket{outcome="timeout",le="1"} 0
wait_seconds_bucket{outcome="timeout",le="2"} 0
wait_seconds_bucket{outcome="timeout",le="+Inf"} 7
wait_seconds_sum{outcome="timeout"} 30
wait_seconds_count{outcome="timeout"} 7
`)
	// Between the scrapes: 50 served reads in (0, 1], 50 in (1, 2].
	after := parse(header + `wait_seconds_bucket{outcome="served",le="1"} 60
wait_seconds_bucket{outcome="served",le="2"} 110
wait_seconds_bucket{outcome="served",le="+Inf"} 110
wait_seconds_sum{outcome="served"} 80
wait_seconds_count{outcome="served"} 110
wait_seconds_bucket{outcome="timeout",le="1"} 0
wait_seconds_bucket{outcome="timeout",le="2"} 0
wait_seconds_bucket{outcome="timeout",le="+Inf"} 9
wait_seconds_sum{outcome="timeout"} 40
wait_seconds_count{outcome="timeout"} 9
`)
	tests := []struct {
		name      string
		q         float64
		match     []string
		want      float64
		wantCount float64
	}{
		{name: "median_served", q: 0.5, match: []string{`outcome="served"`}, want: 1, wantCount: 100},
		{name: "p75_served", q: 0.75, match: []string{`outcome="served"`}, want: 1.5, wantCount: 100},
		{name: "p99_all", q: 0.99, want: 2, wantCount: 102},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, count := histogramQuantile(before, after, "wait_seconds", tc.q, tc.match...)
			if math.Abs(got-tc.want) > 1e-9 || count != tc.wantCount {
				t.Errorf("histogramQuantile(%v, %q) = %v, %v; want %v, %v", tc.q, tc.match, got, count, tc.want, tc.wantCount)
			}
		})
	}
	if got, count := histogramQuantile(before, before, "wait_seconds", 0.5); !math.IsNaN(got) || count != 0 {
		t.Errorf("quantile of no observations = %v, %v; want NaN, 0", got, count)
	}
}

// TestProcessCPU: the process CPU clock counts this process's work and
// agrees with /proc's clock ticks.
func TestProcessCPU(t *testing.T) {
	pid := os.Getpid()
	before, rusageBefore := processCPU(pid), rusageCPU(t)
	// Busy until getrusage, an independent clock, counts 200 ms of CPU:
	// on a loaded machine that takes longer than 200 ms of wall time.
	for rusageCPU(t)-rusageBefore < 200*time.Millisecond {
	}
	after := processCPU(pid)
	if spent := after - before; spent < 150*time.Millisecond {
		t.Fatalf("200 ms of busy work (by getrusage) counted as %v of CPU", spent)
	}
	if diff := (after - procStatCPU(pid)).Abs(); diff > 100*time.Millisecond {
		t.Errorf("process CPU clock %v, /proc %v", after, procStatCPU(pid))
	}
}

// settle waits out work a process is still doing, and no longer.
func TestSettleWaitsForBusyProcess(t *testing.T) {
	self := &target{name: "self", pids: []int{os.Getpid()}}
	if waited := settle(context.Background(), 0, self); waited > 5*settleWindow {
		t.Errorf("an idle process took %v to settle", waited)
	}

	const busy = 400 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(busy); time.Now().Before(end); {
		}
	}()
	waited := settle(context.Background(), 0, self)
	<-done
	if waited < busy-settleWindow {
		t.Errorf("settled after %v while the process was busy for %v", waited, busy)
	}
	if waited >= settleMax {
		t.Errorf("did not settle after the busy work ended (waited %v)", waited)
	}
}

// rusageCPU is this process's user+system CPU time by getrusage(2).
func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestCPUNoise(t *testing.T) {
	if got := stddev([]float64{2, 4, 4, 4, 5, 5, 7, 9}); math.Abs(got-2.138) > 0.001 {
		t.Errorf("stddev = %.4f, want 2.138", got)
	}
	if got := stddev([]float64{1}); got != 0 {
		t.Errorf("stddev of one = %v, want 0", got)
	}
	// 40 calls a side, 1 ms apart per call: 3 × sqrt(40e-6 + 40e-6).
	d := side{APIServerCPUCalls: 40, APIServerCPUCallStdDev: 0.001}
	p := side{APIServerCPUCalls: 40, APIServerCPUCallStdDev: 0.001}
	if got, want := cpuNoise(d, p), 3*math.Sqrt(80e-6); math.Abs(got-want) > 1e-9 {
		t.Errorf("cpuNoise = %v, want %v", got, want)
	}
	// No spread: the floor.
	if got := cpuNoise(side{}, side{}); got != minCPU.Seconds() {
		t.Errorf("cpuNoise without spread = %v, want minCPU %v", got, minCPU.Seconds())
	}
}
