package sampler

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/realtime"
)

// rtSampler is the sampling thread's real-time scheduling (Options.Realtime).
//
// On a machine whose CPUs are all busy, a sampler of the normal class
// wakes when the task running on its CPU ends its turn, at the kernel's
// scheduler ticks, not at the instant it drew; the target, sharing a CPU
// with others, gets that CPU back at the same ticks, at the places of its
// code where it was last preempted. The samples then bunch up at the
// start of the target's turns. Beside four CPU spinners, the target
// sharing one CPU with a fifth (testdata/split.rb, whose turns begin at
// its 30% chain), the sampler woke a median 650µs late, and that chain got
// 2.2 to 5.0 points too many samples in the --nonblocking mode (4 runs);
// at real-time priority it woke within 30µs, and every chain was within
// 1.9 points (3 runs); the paused mode went from 1.2-2.3 points off to
// within 1.1, its tracer thread real-time too (Live.SetTracerRealtime).
// The sampling thread alone is moved, never rbscope's other threads (all
// of them real-time on one CPU starve the Go runtime's own: a recording
// never ended), and it leaves real time for good when its ticks take more
// than half of a CPU (realtimeBudget): a sampler that busy belongs with
// the other tasks.
type rtSampler struct {
	thread *realtime.Thread
	// window is when the current second of accounting began, and
	// cpuAt the thread's CPU clock then.
	window time.Time
	cpuAt  time.Duration
}

// realtimeBudget is the share of a CPU the sampling thread's ticks may use
// and the thread stay real-time.
const realtimeBudget = 0.5

// enterRealtime moves the calling goroutine's OS thread to real-time
// scheduling when want is set and the kernel allows it; otherwise the
// sampler runs as it is.
func enterRealtime(want bool) *rtSampler {
	if !want {
		return &rtSampler{}
	}
	runtime.LockOSThread()
	th, err := realtime.Enter()
	if err != nil {
		runtime.UnlockOSThread()
		return &rtSampler{}
	}
	r := &rtSampler{thread: th, window: time.Now()}
	r.cpuAt = r.cpu()
	return r
}

// on tells whether the sampling thread is real-time.
func (r *rtSampler) on() bool { return r.thread != nil }

// cpu returns the CPU time the sampling thread has used, while it is
// real-time (zero otherwise: nothing is charged then).
func (r *rtSampler) cpu() time.Duration {
	if r.thread == nil {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// tick is called after each tick: once a second has passed since the
// window began, it reads the thread's CPU clock and leaves real time when
// the thread used more than realtimeBudget of that second. CPU time, not
// the time the ticks took: a tick that waited (queued behind another
// real-time thread, such as a second rbscope's sampler, or blocked in a
// read) took nothing from other tasks, and counting its waits made a
// sampler among others leave real time on a busy machine (ticks of 914 ms
// a second, beside a CI run's own real-time samplers). Between ticks the
// thread sleeps, so its clock counts the ticks; read once a second, not
// around each tick, it costs two system calls a second rather than two a
// tick (5% of a tick at 1000 Hz).
func (r *rtSampler) tick() {
	if r.thread == nil {
		return
	}
	now := time.Now()
	span := now.Sub(r.window)
	if span < time.Second {
		return
	}
	cpu := r.cpu()
	used := cpu - r.cpuAt
	r.window, r.cpuAt = now, cpu
	if float64(used) > realtimeBudget*float64(span) {
		r.leave()
	}
}

// leave puts the sampling thread back to normal scheduling.
func (r *rtSampler) leave() {
	if r.thread == nil {
		return
	}
	if r.thread.Leave() == nil {
		runtime.UnlockOSThread() // a thread still real-time stays locked, and ends with the goroutine
	}
	r.thread = nil
}
