package sampler

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
)

// foreignMain reports whether tid, the TID Ruby's books give the main
// thread, is no thread of p: the parent's, in a forked child (a Puma or
// Unicorn worker). It is asked when the running threads are not listed
// (Options.Idle), and the answer for a TID is kept.
func (p *proc) foreignMain(tid int) bool {
	if p.mainTID != tid {
		p.mainTID, p.mainForeign = tid, !procfs.HasTask(p.pid, tid)
	}
	return p.mainForeign
}

// isTask says whether tid is one of the process's threads, for
// stacks.KernelTID: by the tick's task list where it has one, else the
// process's own (the main thread's TID asked about is remembered, the
// one a tick asks of).
func (p *proc) isTask(tid int) bool {
	if tid == p.pid {
		return true
	}
	if p.tick.tasks != nil {
		return p.tick.tasks[tid]
	}
	return !p.foreignMain(tid)
}

// sampleSafe is sample; with PerProcess, a panic (a bug) sampling one
// process drops that process, said through Options.Failed, and the others
// go on.
func (s *Sampler) sampleSafe(p *proc) {
	if !s.opts.PerProcess {
		s.sample(p)
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.gone = true
			if s.opts.Failed != nil {
				s.opts.Failed(p.pid, fmt.Errorf("internal error sampling: %v", r))
			}
		}
	}()
	s.sample(p)
}

// sample takes one sample of one process.
func (s *Sampler) sample(p *proc) {
	prof := s.profileOf(p)
	now := time.Now()
	p.tickAt = now
	if p.wall != nil {
		s.sampleWall(p, now)
	}
	if s.gated() && p.gate == gateSkip {
		return // no thread is on a CPU
	}
	var running, tasks map[int]bool
	if !s.opts.Idle {
		var err error
		if p.tasks == nil {
			p.tasks = procfs.NewTaskStates(p.pid)
			p.tasks.UseSwitches(p.switchSeq)
		}
		running, tasks, err = p.tasks.Read()
		p.closeWatches(tasks)
		p.busy = err == nil && len(running) > 0
		if err != nil {
			// The thread states say when the process has exited: no
			// check of its own at every tick.
			p.gone = errors.Is(err, procfs.ErrGone) || p.live.Gone()
			if !p.gone {
				prof.Errors++
			}
			return
		}
		if len(running) == 0 {
			return // nothing on a CPU: no need to stop the process
		}
		if s.opts.Nonblocking {
			prof.Waiting += p.onCPUNow(running, tasks)
			if len(running) == 0 && !s.opts.GVL {
				return // runnable, but every one waiting for a CPU
			}
		}
	}
	if s.opts.Native {
		// the unwinder, made or made anew outside any pause
		_ = p.reader.Prepare()
	}
	tidOf, wanted := p.tickFuncs(s, running, tasks)
	read, err := s.read(p, running, wanted, tidOf)
	threads, gc := read.Threads, read.GC
	if err != nil {
		if p.gone = p.live.Gone(); !p.gone {
			prof.Errors++
		}
		return
	}
	s.addSamples(prof, p, threads, gc, now, wanted, tidOf, s.opts.Idle, true)
}

// tick is what the functions of a tick of one process (tickFuncs) ask:
// the sampler's options and the thread states the tick read.
type tick struct {
	s              *Sampler
	running, tasks map[int]bool
	// The functions, made once (a function value made at each tick
	// would be allocated at each tick).
	tidOf            func(rubyvm.Thread) int
	gvlWaiter, wants func(rubyvm.Thread) bool
}

// tickFuncs returns the functions of this tick of p, which read running
// and tasks (nil with Options.Idle): tidOf, the TID rbscope should see for
// a Ruby thread (a forked child's main thread keeps its parent's TID in
// Ruby's books), and wanted, whether a thread is sampled; p.tick keeps
// gvlWaiter too, whether a thread waiting for the GVL is sampled as such
// (Options.GVL), which the pause stops beside the running ones (read).
func (p *proc) tickFuncs(s *Sampler, running, tasks map[int]bool) (tidOf func(rubyvm.Thread) int, wanted func(rubyvm.Thread) bool) {
	t := &p.tick
	t.s, t.running, t.tasks = s, running, tasks
	if t.tidOf == nil {
		t.tidOf = func(th rubyvm.Thread) int { return stacks.KernelTID(p.pid, th, p.isTask) }
		t.gvlWaiter = func(th rubyvm.Thread) bool { return t.s.opts.GVL && waitsForGVL(th) }
		t.wants = func(th rubyvm.Thread) bool {
			// The filter first: it is asked of every thread (a --thread
			// cut that matched none says which there were).
			return (t.s.opts.ThreadFilter == nil || t.s.opts.ThreadFilter(th)) && (t.running == nil || t.running[t.tidOf(th)] || t.gvlWaiter(th))
		}
	}
	return t.tidOf, t.wants
}

// read reads the stacks of this tick of p through its reader, by the
// sampler's policy:
//   - with Options.Nonblocking nothing stops, and the GC's flags come with
//     the threads, in the same read;
//   - with Options.Idle (running is nil) every Ruby thread stops, and only
//     those: stopping Ruby's timer thread 100 times a second restarts its
//     wait each time, and on 3.3+ the thread holding the GVL then never has
//     its time slice end;
//   - else the running threads (wanted accepts only those) are read as they
//     are at one moment: what stopping them gives. Which of them are on a
//     CPU (onCPUNow) is decided on the tracer thread right before the stop
//     (Selection.Pick): a thread preempted between that look and the stop
//     would stop where the kernel preempted it, and the kernel preempts
//     mostly at system calls. Threads waiting for the GVL stop too, with
//     Options.GVL (tickFuncs' gvlWaiter).
//
// Who the threads are (the thread list, names, states) is read first,
// while nothing stands still, so that only the stacks and the GC's phase
// are read while the threads are held; when that list is torn (threads
// being born or dying), it is read again while they stand still.
func (s *Sampler) read(p *proc, running map[int]bool, wanted func(rubyvm.Thread) bool, tidOf func(rubyvm.Thread) int) (stacks.Read, error) {
	sel := &p.sel
	*sel = stacks.Selection{Want: wanted, TIDOf: tidOf, GC: true, Nonblocking: s.opts.Nonblocking}
	if sel.Nonblocking {
		return p.reader.Read(sel)
	}
	ths, err := p.reader.List()
	if err != nil {
		if running != nil {
			sel.TIDs = make([]int, 0, len(running))
			for tid := range running {
				sel.TIDs = append(sel.TIDs, tid)
			}
		}
		return p.reader.Read(sel)
	}
	sel.Threads = ths
	// A list of no thread stops none (nil would stop all).
	tids := p.picked[:0]
	if tids == nil {
		tids = make([]int, 0, 8)
	}
	if running == nil {
		for _, th := range ths {
			if tid := tidOf(th); tid > 0 && !slices.Contains(tids, tid) {
				tids = append(tids, tid)
			}
		}
		p.picked, sel.TIDs = tids, tids
		return p.reader.Read(sel)
	}
	p.picked, p.listed = tids, ths
	if p.pick == nil {
		p.pick = func() []int {
			t := &p.tick
			t.s.profileOf(p).Waiting += p.onCPUNow(t.running, t.tasks)
			tids := p.picked[:0]
			for tid := range t.running {
				tids = append(tids, tid)
			}
			for _, th := range p.listed {
				if t.gvlWaiter(th) && !t.running[t.tidOf(th)] {
					tids = append(tids, t.tidOf(th))
				}
			}
			p.picked = tids
			return tids
		}
	}
	sel.Pick = p.pick
	if rt := s.rt != nil && s.rt.on(); rt != p.tracerRT {
		// The tracer thread stops the threads at the sampler's instant:
		// real-time alike, or it would be woken at the scheduler's ticks.
		p.tracerRT = p.live.SetTracerRealtime(rt) == nil && rt
	}
	return p.reader.Read(sel)
}

// waitsForGVL tells whether a thread is ready to run Ruby code but waits
// for the GVL: Ruby counts it runnable (a thread that released the GVL to
// block or to run C code without it is "sleep"), yet another holds the
// lock.
func waitsForGVL(th rubyvm.Thread) bool { return th.Status == "run" && !th.GVL }
