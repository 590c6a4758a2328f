package sampler

import (
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sampleClock gives the sampling instants: one in each period of a fixed
// grid, at a uniformly random point of it (jittered sampling), Rate of them
// a second on average.
//
// Instants evenly spaced can alias with the target's scheduling: on a busy
// CPU the kernel hands out time at its scheduler ticks (every 4 ms at
// CONFIG_HZ=250), and a period that is a simple fraction or multiple of the
// tick (10 ms, 2.5 ms, 1 ms) then looks at a program whose turns on the
// CPU begin at the same places of its code at a few points of those turns
// only. Beside two CPU spinners at 100 Hz (bench/contention.sh), evenly
// spaced instants were up to 9 points off for one phase of a program in
// one run of eight, jittered ones within 4.5.
type sampleClock struct {
	period time.Duration
	slot   time.Time // start of the period the next instant falls in
	at     time.Time // the next instant
	timer  *time.Timer
}

func newSampleClock(period time.Duration) *sampleClock {
	now := time.Now()
	c := &sampleClock{period: period, slot: now}
	c.at = now.Add(c.pick(now))
	return c
}

// next draws the instant after the one just reached. A period whose
// instant has passed (the last sample ran late) is skipped, as a
// time.Ticker drops ticks.
func (c *sampleClock) next() {
	c.slot = c.slot.Add(c.period)
	now := time.Now()
	c.at = now.Add(c.pick(now))
}

// pick draws the next instant at or after now, moving c.slot to its
// period, and returns how long until it.
func (c *sampleClock) pick(now time.Time) time.Duration {
	if behind := now.Sub(c.slot); behind > c.period {
		c.slot = c.slot.Add(behind / c.period * c.period)
	}
	for {
		at := c.slot.Add(rand.N(c.period))
		if !at.Before(now) {
			return at.Sub(now)
		}
		c.slot = c.slot.Add(c.period)
	}
}

// wait returns true at the next instant, or false once done is closed or
// end (unless zero) comes first. With nap it sleeps on the calling OS
// thread itself, so that a real-time thread (package realtime) wakes at
// the instant; otherwise on a runtime timer.
func (c *sampleClock) wait(done <-chan struct{}, end time.Time, nap bool) bool {
	until, last := c.at, false
	if !end.IsZero() && !end.After(until) {
		until, last = end, true
	}
	if nap {
		for {
			select {
			case <-done:
				return false
			default:
			}
			d := time.Until(until)
			if d <= 0 {
				return !last
			}
			ts := unix.NsecToTimespec(int64(min(d, maxNap)))
			napOnThread(&ts)
		}
	}
	if c.timer == nil {
		c.timer = time.NewTimer(time.Until(until))
	} else {
		c.timer.Reset(time.Until(until))
	}
	select {
	case <-done:
		return false
	case <-c.timer.C:
		return !last
	}
}

// napOnThread sleeps for ts on the calling OS thread, keeping its Go
// processor. Told of the sleep as a system call, the Go scheduler hands the
// processor to another thread, and a real-time thread waking from it then
// spins until it gets one back: on a busy machine, from a thread of the
// normal class that cannot run while the real-time one spins on its CPU
// (recording at 1000 Hz, the spinning took 42% of rbscope's CPU). Where Go
// has one processor only, the rest of rbscope must have it while the
// sampler sleeps, and the scheduler is told. A signal (the Go runtime's
// preemption among them) ends the sleep early; the caller looks at the
// time again.
func napOnThread(ts *unix.Timespec) {
	if runtime.GOMAXPROCS(0) < 2 {
		_ = unix.ClockNanosleep(unix.CLOCK_MONOTONIC, 0, ts, nil)
		return
	}
	_, _, _ = unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, 0, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
}

// maxNap is the longest sleep of wait's nap: how soon after done is closed
// a sleeping sampler sees it.
const maxNap = 20 * time.Millisecond

// Stop releases the clock's timer.
func (c *sampleClock) Stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}
