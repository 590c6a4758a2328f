package sampler

import (
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
)

// wallStack is a thread's stack as its last wall-clock sample read it, and
// the thread's CPU time then.
type wallStack struct {
	cpu    uint64
	frames []rubyvm.Frame
}

// sampleWall takes one wall-clock sample of process p (Options.Wall):
// every Ruby thread, whatever it is doing, read without pausing the
// process. A thread that has not run since its last wall sample (its CPU
// time stands still: a thread asleep, blocked or waiting for the GVL)
// keeps the stack read then, which it cannot have changed, so a process
// of sleeping threads costs a thread list and a clock read a thread.
func (s *Sampler) sampleWall(p *proc, now time.Time) {
	// No thread ran since the last tick's gate, which came before the
	// last read: every thread is where that read found it, and the
	// process costs nothing more than the gate's clock read.
	if s.gated() && p.gate == gateSkip && p.still && p.wallAddedTo == p.wall && p.wallAdded != nil {
		for _, a := range p.wallAdded {
			p.wall.AddStackSample(a.stack, now, p.pid, a.tid, a.thread)
		}
		return
	}
	p.wallAdded, p.wallAddedTo = p.wallAdded[:0], nil
	p.wallReads++
	tidOf := func(th rubyvm.Thread) int {
		return stacks.KernelTID(p.pid, th, func(tid int) bool { return tid == p.pid || !p.foreignMain(tid) })
	}
	if p.wallStacks == nil {
		p.wallStacks = map[uint64]wallStack{}
	}
	// One walk lists the threads and reads the stacks of those that ran
	// since their last wall sample, each thread's clock read as the walk
	// comes to it (the stack read then is as late as the clock reading).
	cpu := p.wallCPU
	if cpu == nil {
		cpu = map[int]uint64{}
		p.wallCPU = cpu
	}
	clear(cpu)
	fresh := func(th rubyvm.Thread) bool {
		tid := tidOf(th)
		if tid <= 0 {
			return true
		}
		c, ok, _ := p.cpuTime(tid)
		if !ok {
			return true
		}
		cpu[tid] = c
		ws, had := p.wallStacks[th.Addr]
		return !had || ws.cpu != c
	}
	threads, err := p.reader.ListWith(fresh)
	if err != nil {
		p.wall.Errors++
		return
	}
	alive := make(map[int]bool, len(threads))
	tids := make([]int, 0, len(threads))
	for _, th := range threads {
		if tid := tidOf(th); tid > 0 {
			alive[tid], tids = true, append(tids, tid)
		}
	}
	p.pruneClocks(tids, alive)
	seen := make(map[uint64]bool, len(threads))
	for i := range threads {
		th := &threads[i]
		seen[th.Addr] = true
		c, ok := cpu[tidOf(*th)]
		if ws, had := p.wallStacks[th.Addr]; had && ok && ws.cpu == c {
			th.Frames = ws.frames
			continue
		}
		if ok && th.Error == "" {
			p.wallStacks[th.Addr] = wallStack{cpu: c, frames: th.Frames}
		} else {
			delete(p.wallStacks, th.Addr)
		}
	}
	for addr := range p.wallStacks {
		if !seen[addr] {
			delete(p.wallStacks, addr)
		}
	}
	all := func(th rubyvm.Thread) bool { return s.opts.ThreadFilter == nil || s.opts.ThreadFilter(th) }
	errs := p.wall.Errors
	if p.wallAdded == nil {
		p.wallAdded = []addedSample{}
	}
	s.addSamples(p.wall, p, threads, p.reader.GCPhase(threads), now, all, tidOf, true, false)
	if p.wall.Errors == errs {
		p.wallAddedTo = p.wall // a read with a thread unread is not repeated
	}
}

// addedSample is one sample a wall-clock read added: the profile's stack
// and the thread's TID and name.
type addedSample struct {
	stack  int
	tid    int
	thread string
}

// newWallProfile returns the empty wall-clock profile a process's
// recording with opts starts.
func newWallProfile(opts Options) *profile.Profile {
	p := newProfile(opts)
	p.Wall = true
	return p
}
