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

// agentTick starts testdata/bench_deep.rb, 50 frames deep, asleep or
// spinning at the bottom, and returns one tick of the agent's sampler on
// it (the gate, then the sample), after ten ticks that open its files and
// fill its caches, and the process as the sampler holds it.
func agentTick(tb testing.TB, mode string) (func(), *proc) {
	rb := testruby.Rubies(tb)[0]
	p := testruby.Start(tb, rb, "bench_deep.rb", nil, "50", mode)
	var rep struct {
		PID int `json:"pid"`
	}
	p.WaitReport(tb, &rep, 30*time.Second)
	// The agent's sampler: a set of processes, a profile each.
	s, err := NewSet(Options{Rate: 100, Nonblocking: true, PerProcess: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	if _, err := s.Add(rep.PID); err != nil {
		tb.Fatal(err)
	}
	s.takeAdded()
	pr := s.procs[rep.PID]
	tick := func() {
		s.gate()
		s.sample(pr)
	}
	for i := 0; i < 10; i++ {
		tick()
	}
	return tick, pr
}

// TestTickAllocs: a tick of the agent's sampler allocates nothing, whether
// it finds the process idle or takes a sample of a thread running 50 frames
// deep (testing.AllocsPerRun, over ticks that took a sample).
func TestTickAllocs(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		tick, _ := agentTick(t, "sleep")
		if n := testing.AllocsPerRun(200, tick); n != 0 {
			t.Errorf("an idle tick allocates %.1f times", n)
		}
	})
	t.Run("running", func(t *testing.T) {
		tick, pr := agentTick(t, "spin")
		// A tick that finds the thread waiting for a CPU takes no
		// sample: each run ticks until one is taken.
		sampled := func() {
			for n, ticks := pr.prof.Samples, 0; pr.prof.Samples == n; ticks++ {
				if ticks == 1_000_000 {
					t.Fatal("no sample of the spinning thread in a million ticks")
				}
				tick()
			}
		}
		// A sample at a place of the loop not sampled before adds a
		// stack to the profile, which allocates: the runs are measured
		// again until none did (the loop has a few places).
		for try := 0; ; try++ {
			stacks := len(pr.prof.Stacks)
			n := testing.AllocsPerRun(200, sampled)
			if n == 0 {
				break
			}
			if len(pr.prof.Stacks) == stacks || try == 20 {
				t.Fatalf("a tick that takes a sample of 50 frames allocates %.2f times (the profile's stacks: %d, then %d)", n, stacks, len(pr.prof.Stacks))
			}
		}
	})
}

// benchTick runs the sampler's tick (agentTick) and reports its cost
// beside target.
func benchTick(b *testing.B, mode string, target float64) {
	tick, pr := agentTick(b, mode)
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

// TestWallRepeatsStillProcess: the agent's wall-clock sample of a process
// none of whose threads ran since the last tick adds the last read's
// samples again without reading it; one that runs is read at every tick.
// Either way each tick adds a sample of each of its four threads
// (bench_deep.rb's main thread 50 frames deep, asleep or spinning, and
// three others, one of which wakes every 50 ms).
func TestWallRepeatsStillProcess(t *testing.T) {
	for _, mode := range []string{"sleep", "spin"} {
		t.Run(mode, func(t *testing.T) {
			rb := testruby.Rubies(t)[0]
			p := testruby.Start(t, rb, "bench_deep.rb", nil, "50", mode)
			var rep struct {
				PID     int `json:"pid"`
				Threads int `json:"threads"`
			}
			p.WaitReport(t, &rep, 30*time.Second)
			s, err := NewSet(Options{Rate: 100, Nonblocking: true, PerProcess: true, Wall: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			if _, err := s.Add(rep.PID); err != nil {
				t.Fatal(err)
			}
			s.takeAdded()
			pr := s.procs[rep.PID]
			tick := func() {
				s.gate()
				s.sample(pr)
				time.Sleep(time.Millisecond)
			}
			for i := 0; i < 10; i++ {
				tick()
			}
			samples, reads, start := pr.wall.Samples, pr.wallReads, time.Now()
			const ticks = 50
			for i := 0; i < ticks; i++ {
				tick()
			}
			added, read := pr.wall.Samples-samples, pr.wallReads-reads
			// The ticker's wakes, and a look the gate forces every Rate
			// ticks, make reads.
			wakes := int(time.Since(start)/(50*time.Millisecond)) + 3
			t.Logf("%s: %d ticks read the process %d times and added %d wall samples (%d errors)", mode, ticks, read, added, pr.wall.Errors)
			if added != ticks*rep.Threads || pr.wall.Errors != 0 {
				t.Errorf("%d ticks added %d wall samples of %d threads, %d errors", ticks, added, rep.Threads, pr.wall.Errors)
			}
			deepest := 0
			for _, st := range pr.wall.Stacks {
				deepest = max(deepest, len(st.Frames))
			}
			if deepest < 50 {
				t.Errorf("the deepest wall stack has %d frames, want the 50 the program holds", deepest)
			}
			switch {
			case mode == "sleep" && read > wakes:
				t.Errorf("a sleeping process was read at %d of %d ticks (its ticker woke at most %d times)", read, ticks, wakes)
			case mode == "spin" && read < ticks/2:
				t.Errorf("a spinning process was read at %d of %d ticks", read, ticks)
			}
		})
	}
}
