// Package realtime moves the calling OS thread to real-time scheduling and
// back: a thread that must wake at a given instant on a machine whose CPUs
// are all busy.
//
// A thread of the normal class that wakes on a busy CPU waits for the
// running task's turn to end, which the kernel decides at its scheduler
// ticks: its wake-ups then bunch up just after the ticks, whatever instant
// it asked for. A real-time thread takes the CPU as it wakes.
package realtime

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Thread is an OS thread moved to real-time scheduling by Enter.
type Thread struct {
	old *unix.SchedAttr
}

// Enter moves the calling OS thread, which the caller has locked to its
// goroutine (runtime.LockOSThread) and keeps locked until Leave, to
// SCHED_FIFO at the lowest real-time priority. Threads and processes it
// starts do not inherit it (reset on fork). It fails where the kernel
// refuses (no CAP_SYS_NICE and no RLIMIT_RTPRIO, a container's policy).
func Enter() (*Thread, error) {
	old, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return nil, fmt.Errorf("read the thread's scheduling: %w", err)
	}
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return nil, fmt.Errorf("real-time scheduling (SCHED_FIFO) for the sampling thread: %w", err)
	}
	return &Thread{old: old}, nil
}

// Leave puts the thread back to the scheduling it had before Enter. It
// must be called on the same OS thread; a nil Thread is left alone.
func (t *Thread) Leave() error {
	if t == nil {
		return nil
	}
	old := *t.old
	if err := unix.SchedSetAttr(0, &old, 0); err != nil {
		return fmt.Errorf("restore the thread's scheduling: %w", err)
	}
	return nil
}
