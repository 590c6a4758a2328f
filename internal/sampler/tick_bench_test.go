package sampler

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/testruby"
)

// The costs of one tick of one process that issue targets hold the
// sampler to: an idle tick (no thread on a CPU) at most 5 µs, a sample of
// a running thread 50 frames deep at most 20 µs (nonblocking, the agent's
// mode). The benchmarks report µs a tick (idle) or a sample beside the
// target, in wall time and in the sampling thread's CPU time.
const (
	targetIdleTickMicros   = 5
	targetSampleTickMicros = 20
)

// benchTick runs the sampler's tick on one process of
// testdata/bench_deep.rb, 50 frames deep, asleep or spinning at the bottom.
func benchTick(b *testing.B, mode string, target float64) {
	rb := testruby.Rubies(b)[0]
	p := testruby.Start(b, rb, "bench_deep.rb", nil, "50", mode)
	var rep struct {
		PID int `json:"pid"`
	}
	p.WaitReport(b, &rep, 30*time.Second)
	// The agent's sampler: a set of processes, a profile each.
	s, err := NewSet(Options{Rate: 100, Nonblocking: true, PerProcess: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Add(rep.PID); err != nil {
		b.Fatal(err)
	}
	s.takeAdded()
	pr := s.procs[rep.PID]
	// A tick of the loop (Run): the gate, then the sample.
	tick := func() {
		s.gate()
		s.sample(pr)
	}
	for i := 0; i < 10; i++ { // files opened, caches filled
		tick()
	}
	// The tick's own CPU time, which a busy machine does not inflate as it
	// does the wall time: the goroutine keeps its OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	b.ReportAllocs()
	b.ResetTimer()
	if mode == "sleep" {
		c0 := cpu()
		for i := 0; i < b.N; i++ {
			tick()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/tick")
		b.ReportMetric(float64((cpu()-c0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/tick")
	} else {
		// A tick that finds the thread waiting for a CPU (a busy
		// machine) takes no sample: an op is one sample taken, and its
		// cost the time of the ticks that took one.
		var took, tookCPU time.Duration
		want := pr.prof.Samples + b.N
		for ticks := 0; pr.prof.Samples < want; ticks++ {
			if ticks > 10000*b.N {
				b.Fatalf("%d samples of the running thread in %d ticks", pr.prof.Samples-want+b.N, ticks)
			}
			n, t0, c0 := pr.prof.Samples, time.Now(), cpu()
			tick()
			if pr.prof.Samples > n {
				took += time.Since(t0)
				tookCPU += cpu() - c0
			}
		}
		b.ReportMetric(float64(took.Nanoseconds())/1e3/float64(b.N), "µs/sample")
		b.ReportMetric(float64(tookCPU.Nanoseconds())/1e3/float64(b.N), "cpu-µs/sample")
	}
	b.ReportMetric(target, "target-µs")
}

// BenchmarkTickIdle: a tick of a process whose threads all sleep.
func BenchmarkTickIdle(b *testing.B) { benchTick(b, "sleep", targetIdleTickMicros) }

// BenchmarkTickRunning: the ticks of a process whose main thread runs
// Ruby code 50 frames deep, per sample they take (a tick takes one when the
// thread is on a CPU at that moment).
func BenchmarkTickRunning(b *testing.B) { benchTick(b, "spin", targetSampleTickMicros) }
