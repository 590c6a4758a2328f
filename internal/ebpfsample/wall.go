package ebpfsample

import (
	"errors"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/profile"
)

// wallClock makes a process's wall-clock profile from its samples: a
// clock sample (a thread on a CPU) counts once, as in the CPU profile,
// and a thread's spans off a CPU (from a switch sample to its next
// switch-in) count under the stack of that switch sample, weighed by
// their time: one sample per 1/rate seconds, as a clock of the rate
// ticking on each thread's off-CPU time would take them. A profile's
// count is so, on or off a CPU, the thread's time times the rate, the
// unit of the user-space sampler's wall profile (pprof's period).
type wallClock struct {
	rate    float64
	threads map[int]*offThread
}

// offThread is a thread's state between its switch samples.
type offThread struct {
	// frames is the stack of its last switch sample as a profile keeps
	// it (nil: none known), thread its name.
	frames []profile.Frame
	thread string
	// out is when that sample was taken; settled how far the span off
	// a CPU after it is in a profile already (settle).
	out, settled time.Time
	// carry is the off-CPU time not yet a whole sample, in periods.
	carry float64
}

func newWallClock(rate float64) *wallClock {
	return &wallClock{rate: rate, threads: map[int]*offThread{}}
}

// switched takes a switch sample of a thread of process pid: its span
// off a CPU before goes to wall under the stack the thread had then, and
// frames (nil with smp.Same: the same stack again) become its stack.
func (w *wallClock) switched(wall *profile.Profile, smp *Sample, frames []profile.Frame, pid int, thread string) {
	t := w.threads[smp.TID]
	if t == nil {
		t = &offThread{}
		w.threads[smp.TID] = t
	}
	if !smp.OffFrom.IsZero() && smp.OffFrom.Equal(t.out) && t.frames != nil {
		w.add(wall, t, later(t.out, t.settled), smp.OffTo, pid, smp.TID)
	} else {
		t.carry = 0 // a span lost: what was left of the last goes with it
	}
	if !smp.Same {
		t.frames = append(t.frames[:0], frames...)
		if len(frames) == 0 {
			t.frames = nil
		}
	}
	t.thread, t.out, t.settled = thread, smp.Time, time.Time{}
}

// settle adds, for each thread off a CPU since its last switch sample,
// the span up to now (or up to its switch-in, when it came back since and
// its next switch sample is not drained yet), so that a thread asleep
// for longer than a profile lasts is in it. It reads the threads' states
// from walls.
func (w *wallClock) settle(s *Sampler, wall *profile.Profile, pid int) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	now := s.wallTime(uint64(ts.Nano()))
	var v [wallValue / 8]uint64
	for tid, t := range w.threads {
		if t.frames == nil {
			continue
		}
		err := s.switches.walls.Lookup(uint32(tid), &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			delete(w.threads, tid) // gone: its last span is lost
			continue
		}
		if err != nil {
			return err
		}
		if v[0] == 0 || !s.wallTime(v[0]).Equal(t.out) {
			continue // a switch sample not drained yet, or one lost
		}
		end := now
		if in := s.wallTime(v[1]); in.After(t.out) {
			end = in
		}
		from := later(t.out, t.settled)
		w.add(wall, t, from, end, pid, tid)
		t.settled = later(from, end)
	}
	return nil
}

// add counts thread t's time off a CPU from from to to under its stack.
func (w *wallClock) add(wall *profile.Profile, t *offThread, from, to time.Time, pid, tid int) {
	d := to.Sub(from)
	if d <= 0 || t.frames == nil {
		return
	}
	t.carry += d.Seconds() * w.rate
	n := math.Floor(t.carry)
	t.carry -= n
	if n < 1 {
		return
	}
	if wall.Timeline == nil {
		wall.Add(t.frames, int(n))
		return
	}
	step := d / time.Duration(n)
	for i := 0; i < int(n); i++ {
		wall.AddSample(t.frames, from.Add(step/2+time.Duration(i)*step), pid, tid, t.thread)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
