package ebpfsample

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
)

// wallClock makes a process's wall-clock profile from its samples: a
// clock sample (a thread on a CPU) counts once, as in the CPU profile,
// and a thread's time off a CPU (its time between two switches less its
// run between them, summed in the kernel while its stack stays the same) counts under its stack, weighed by its time: one sample per
// 1/rate seconds, as a clock of the rate ticking on each thread's off-CPU
// time would take them. A profile's count is so, on or off a CPU, the
// thread's time times the rate, the unit of the user-space sampler's wall
// profile (pprof's period).
type wallClock struct {
	rate    float64
	threads map[int]*offThread
	seed    maphash.Seed // of the stacks' keys (stackKey)
}

// offThread is a thread's state between its switch samples.
type offThread struct {
	// frames is the stack of its last switch sample as a profile keeps
	// it (nil: none known), thread its name.
	frames []profile.Frame
	thread string
	// since is when that sample was taken; settled the time off a CPU
	// since that is in a profile already (settle), up to settledAt.
	since, settledAt time.Time
	settled          time.Duration
	// key is frames' (stackKey); carries, by stack, the off-CPU time not
	// yet a whole sample, in periods. A carry of the thread's own, not of
	// the stack, moved samples between the stacks a thread alternates
	// (time asleep in one method completing the sample of the next): up
	// to 11 of 300 between two methods of about 7 ms each.
	key     uint64
	carries map[uint64]float64
}

// maxCarries bounds the stacks whose carry a thread keeps: past it, the
// carries (each under a sample) start again.
const maxCarries = 256

func newWallClock(rate float64) *wallClock {
	return &wallClock{rate: rate, threads: map[int]*offThread{}, seed: maphash.MakeSeed()}
}

// stackKey is a key of frames, a stack as profiles keep it.
func (w *wallClock) stackKey(frames []profile.Frame) uint64 {
	var k uint64
	for _, f := range frames {
		k = k*1099511628211 + maphash.Comparable(w.seed, f)
	}
	return k
}

// switched takes a switch sample of a thread of process pid: its time off
// a CPU since its last switch sample goes to wall under the stack it had
// then, and frames become its stack.
func (w *wallClock) switched(wall *profile.Profile, smp *Sample, frames []profile.Frame, pid int, thread string) {
	t := w.threads[smp.TID]
	if t == nil {
		t = &offThread{}
		w.threads[smp.TID] = t
	}
	w.add(wall, t, smp.Off-t.settled, later(t.since, t.settledAt), smp.Time, pid, smp.TID)
	t.frames = append(t.frames[:0], frames...)
	t.key = w.stackKey(frames)
	if len(frames) == 0 {
		t.frames = nil
	}
	t.thread, t.since, t.settled, t.settledAt = thread, smp.Time, 0, time.Time{}
}

// settle adds, for each thread, its time off a CPU since its last switch
// sample up to now: what the kernel summed of it (the walls map's acc),
// and the time since its last switch less its CPU time since (the
// kernel's count read from /proc), so that a thread asleep for longer
// than a profile lasts is in it. (A thread on a CPU now has the steal of
// its run so far counted off a CPU too: /proc gives no run's start. That
// is one run's at most, at each settling.)
func (w *wallClock) settle(s *Sampler, wall *profile.Profile, pid int) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("reading the monotonic clock: %w", err)
	}
	now := s.wallTime(uint64(ts.Nano()))
	var v [wallValue / 8]uint64
	for tid, t := range w.threads {
		if t.frames == nil {
			continue
		}
		err := s.switches.walls.Lookup(uint32(tid), &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			delete(w.threads, tid) // gone
			continue
		}
		if err != nil {
			return fmt.Errorf("walls map: %w", err)
		}
		out, ran, acc := v[wallOut/8], time.Duration(v[wallRan/8]), time.Duration(v[wallAcc/8])
		if out == 0 || ran == 0 {
			continue // a record lost: the time since goes with it
		}
		open := time.Duration(0)
		if ranNow, ok := procfs.RunTime(pid, tid); ok {
			open = max(now.Sub(s.wallTime(out))-(ranNow-ran), 0)
		}
		total := acc + open
		w.add(wall, t, total-t.settled, later(t.since, t.settledAt), now, pid, tid)
		t.settled, t.settledAt = max(total, t.settled), now
	}
	return nil
}

// add counts off, thread t's time off a CPU between from and to, under
// its stack.
func (w *wallClock) add(wall *profile.Profile, t *offThread, off time.Duration, from, to time.Time, pid, tid int) {
	if off <= 0 || t.frames == nil {
		return
	}
	if t.carries == nil || len(t.carries) >= maxCarries {
		t.carries = map[uint64]float64{}
	}
	carry := t.carries[t.key] + off.Seconds()*w.rate
	n := math.Floor(carry)
	t.carries[t.key] = carry - n
	if n < 1 {
		return
	}
	if wall.Timeline == nil {
		wall.Add(t.frames, int(n))
		return
	}
	// The samples' times, spread over the span (when within it the
	// thread was off its CPU is not known): from its last switch sample,
	// or its last settling, to now.
	if from.IsZero() || from.After(to) {
		from = to
	}
	step := to.Sub(from) / time.Duration(n)
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
