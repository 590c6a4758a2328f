package sampler

import (
	"errors"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/target"
)

// gateSays is what the agent's gate (Sampler.gate) found of a process at
// this tick.
type gateSays uint8

const (
	// gateRead: read the thread states, as a sampler without the gate does.
	gateRead gateSays = iota
	// gateSkip: no thread of the process is on a CPU, or waits for one
	// because rbscope's own thread took it.
	gateSkip
	// gateMaybe: a thread ran since the last tick and none runs now; it
	// may have gone to sleep, wait for a CPU, or have been preempted by
	// rbscope's own waking thread (Sampler.gate settles it).
	gateMaybe
)

// firstLook is the agent's first question of a process at a tick
// (Options.PerProcess; most of its processes sit idle between requests):
// is one of its threads on a CPU? It reads the clock of all its threads
// (target.ThreadsClock, exact to the moment even for a thread running on
// another CPU). When it has not moved since the last tick, no thread ran
// meanwhile, and none runs now: skip. When it has, the answer waits for
// Sampler.gate's second look, a moment later. Every everyTicks ticks it says read anyway,
// so that the thread states are read and tell when the process has exited
// (its clock then stands still for good); also where the clock cannot be
// opened. One read per thread the clock was opened on, no allocation.
func (p *proc) firstLook(everyTicks int) gateSays {
	p.still = false
	if p.noClock {
		return gateRead
	}
	if p.clock == nil {
		tids, err := p.live.Threads()
		if err == nil {
			p.clock, err = p.live.ThreadsClock(tids)
		}
		if err != nil {
			p.noClock = true
			return gateRead
		}
	}
	now, err := p.readClock()
	if err != nil {
		return gateRead
	}
	moved := now != p.lastClock
	p.lastClock = now
	if p.idleTicks++; p.idleTicks >= everyTicks {
		p.idleTicks = 0
		return gateRead
	}
	if !moved {
		p.still = true
		return gateSkip
	}
	return p.switchLook()
}

// readClock reads the clock of each thread the process's clock was opened
// on into p.clockNow, keeping the last reading in p.clockLast, and returns
// their sum.
func (p *proc) readClock() (uint64, error) {
	n := len(p.clock.TIDs())
	if len(p.clockNow) != n {
		p.clockNow, p.clockLast = make([]uint64, n), make([]uint64, n)
	}
	p.clockNow, p.clockLast = p.clockLast, p.clockNow
	return p.clock.ReadEach(p.clockNow)
}

// switchLook settles a process whose threads ran since the last tick by
// their last context switches (target.SwitchWatch: records the kernel
// writes into a ring rbscope maps, read with no system call): one that is
// on a CPU, or was taken off one while it could still run (preempted, by
// rbscope's own waking thread or by another task), makes the tick read
// the process as a sampler without the gate does, where the thread states
// and stepAside tell the two preemptions apart; when every thread left its
// CPU of its own accord (to sleep or wait), none is on one. A thread whose
// clock moved with no switch of its own since the last look ran through a
// thread it created after the clock was opened, which has no watch; that,
// a thread not yet switched since its watch was opened, or a process
// without watches leaves the question to the gate's second look
// (gateMaybe). On a quiet host this spares the gate's nap at nearly every
// tick of a process that wakes between ticks.
func (p *proc) switchLook() gateSays {
	if p.noWatches {
		return gateMaybe
	}
	says := gateSkip
	maybe := func() {
		if says != gateRead {
			says = gateMaybe
		}
	}
	for i, tid := range p.clock.TIDs() {
		// A thread whose clock stood still did not run since the last
		// tick, so it is not on a CPU now: its watch is opened only once
		// it runs (an exited thread's never is).
		moved := p.clockNow[i] != p.clockLast[i]
		w, ok := p.watches[tid]
		if !ok && !moved {
			continue
		}
		if !ok {
			if w = p.watch(tid); w == nil {
				maybe()
				continue
			}
		}
		state, _, seq := w.w.Last()
		switched := seq != w.gateSeq
		w.gateSeq = seq
		switch {
		case !moved:
		case state == target.SwitchedIn || state == target.SwitchedOutPreempted:
			says = gateRead
		case state == target.SwitchedOut && switched:
		default:
			maybe()
		}
	}
	if says == gateRead {
		p.idleTicks = 0
	}
	return says
}

// lookAgain reads the clock of a process whose threads ran since the last
// tick once more, after the gate's nap: moved since the first reading, a
// thread runs.
func (p *proc) lookAgain() gateSays {
	again, err := p.readClock()
	if err != nil {
		return gateRead
	}
	if again != p.lastClock {
		p.lastClock = again
		p.idleTicks = 0
		return gateRead
	}
	return gateMaybe
}

// gateNap is how long the gate steps off its CPU before its second look
// (Sampler.gate): long enough for the kernel to switch to a thread the
// sampler preempted and that thread to run a little.
var gateNap = unix.NsecToTimespec(int64(20 * time.Microsecond))

// gate asks of every process whether a thread of it is on a CPU at this
// tick (firstLook), before any is read, so that only those are
// (Options.PerProcess without Idle or GVL). A thread that ran since the
// last tick either runs now, sleeps, waits for a CPU behind another task,
// or waits behind rbscope's own sampling thread,
// which took its CPU to look: a waking real-time thread preempts the task
// on its CPU, and a thread of the normal class takes an idle CPU when one
// is free but preempts the task at hand on a busy machine. The last kind
// was on a CPU at the tick. Counting it as asleep lost half the samples of
// a program sharing two busy CPUs (230 samples per CPU-second at 500 Hz),
// and more of the places where its threads were preempted. So when any
// process is in doubt, the sampler sleeps once (gateNap), handing its CPU
// back, and looks again (lookAgain): a thread that ran meanwhile is read as a sampler
// without the gate reads it, where the thread states and stepAside tell a
// thread that waited for rbscope from one that waited for others.
func (s *Sampler) gate() {
	doubt := false
	for _, p := range s.procs {
		switch {
		case p.gone:
			continue
		case p.busy:
			p.gate = gateRead
		default:
			p.gate = p.firstLook(int(s.opts.Rate))
		}
		doubt = doubt || p.gate == gateMaybe
	}
	if !doubt {
		return
	}
	ts := gateNap
	napOnThread(&ts)
	for _, p := range s.procs {
		if !p.gone && p.gate == gateMaybe {
			if p.gate = p.lookAgain(); p.gate == gateMaybe {
				p.gate = gateSkip
			}
		}
	}
}

// gated tells whether the sampler asks the gate before reading a process.
func (s *Sampler) gated() bool { return s.opts.PerProcess && !s.opts.Idle && !s.opts.GVL }

// onCPUNow narrows running, the threads the kernel calls runnable, to
// those on a CPU at this moment. A thread's switch watch
// (target.SwitchWatch) tells that without a system call: its last context
// switch put it on a CPU, or took it off. A thread not switched since its
// watch was opened (a thread that spins), or one without a watch, is on a
// CPU when its CPU time moves between two readings of its counter
// (target.CPUClock) a few microseconds apart; that verdict is kept until
// the thread's next switch, as reading the counter of a thread on another
// CPU costs about 10µs (the kernel interrupts that CPU). It returns how
// many it removed. A runnable thread that waits for a CPU (on a busy
// machine) stands where the kernel preempted it, and the kernel preempts
// mostly at system calls and in long stretches without one: counting it
// tick after tick would charge its wait to those places (a loaded 2-CPU
// run gave a 50% call chain 58% of the samples). The profile is one of CPU
// time. Where the kernel refuses counters, running is left as it is.
//
// A thread can also stand still because rbscope's own thread took its CPU
// to look; that one was on a CPU at the tick (see stepAside). With
// p.keepOff, rbscope's threads then move off the CPUs of p's runnable
// threads for the ticks to come (ownCPUs), so that looking takes no CPU
// from p.
func (p *proc) onCPUNow(running, tasks map[int]bool) int {
	all, still, count := p.onCPUScratch[0][:0], p.onCPUScratch[1][:0], p.onCPUScratch[2][:0]
	for tid := range running {
		all = append(all, tid)
		w := p.watch(tid)
		if w == nil {
			count = append(count, tid)
			continue
		}
		state, _, seq := w.w.Last()
		switch {
		case state == target.SwitchedIn:
			continue
		case state == target.SwitchedOutPreempted || state == target.SwitchedOut || state == target.ThreadExited:
			still = append(still, tid)
			continue
		case w.known && w.seq == seq:
			if !w.onCPU {
				still = append(still, tid)
			}
			continue
		}
		w.seq, w.known = seq, false
		count = append(count, tid)
	}
	if len(count) > 0 {
		if t0 := p.cpuTimes(count, tasks, p.scratchClocks(0)); t0 != nil {
			t1 := p.cpuTimes(count, tasks, p.scratchClocks(1))
			for _, tid := range count {
				v, ok := t0[tid]
				standing := ok && v == t1[tid]
				if standing {
					still = append(still, tid)
				}
				// The counters' verdict holds while the thread is not
				// switched: no switch came while they were read.
				if w := p.watches[tid]; w != nil && ok {
					if _, _, seq := w.w.Last(); seq == w.seq {
						w.known, w.onCPU = true, !standing
					}
				}
			}
		}
	}
	p.onCPUScratch = [3][]int{all, still, count}
	if len(still) > 0 {
		still = p.stepAside(still, tasks)
	}
	for _, tid := range still {
		delete(running, tid)
	}
	if p.keepOff && p.tasks != nil {
		cpus := make([]int, 0, len(all))
		for _, tid := range all {
			if c, ok := p.tasks.LastCPU(tid); ok {
				cpus = append(cpus, c)
			}
		}
		own.keepOff(cpus)
	}
	return len(still)
}

// threadWatch is a SwitchWatch of one thread of the process (onCPUNow),
// and, for a thread its watch has seen no switch of, what its CPU-time
// counter said: known says onCPU holds the counter's verdict, taken while
// the watch's sequence stood at seq, which stays true as long as it does.
type threadWatch struct {
	w            *target.SwitchWatch
	seq          uint64
	known, onCPU bool
	// gateSeq is the watch's sequence at the gate's last look
	// (switchLook).
	gateSeq uint64
}

// watch returns the switch watch of thread tid, opening it on first need;
// nil where the kernel refuses watches, or when maxClocks are open.
func (p *proc) watch(tid int) *threadWatch {
	if w, ok := p.watches[tid]; ok || p.noWatches {
		return w
	}
	if p.watches == nil {
		p.watches = map[int]*threadWatch{}
	}
	if len(p.watches) >= maxClocks {
		return nil
	}
	sw, err := p.live.WatchSwitches(tid)
	if err != nil {
		if len(p.watches) == 0 && !errors.Is(err, unix.ESRCH) {
			p.noWatches = true // not allowed here: the counters alone
		}
		return nil
	}
	w := &threadWatch{w: sw}
	p.watches[tid] = w
	return w
}

// switchSeq is the switch sequence of thread tid (procfs.SwitchSeq), from
// its switch watch. A watch of a thread that has exited is closed: its TID
// may name another thread, which the next call opens one of.
func (p *proc) switchSeq(tid int) (uint64, bool) {
	w := p.watch(tid)
	if w == nil {
		return 0, false
	}
	state, _, seq := w.w.Last()
	if state == target.ThreadExited {
		w.w.Close()
		delete(p.watches, tid)
		return 0, false
	}
	return seq, true
}

// closeWatches closes the switch watches of threads no longer in alive.
func (p *proc) closeWatches(alive map[int]bool) {
	for tid, w := range p.watches {
		if !alive[tid] {
			w.w.Close()
			delete(p.watches, tid)
		}
	}
}

// stepAside returns which of still, threads whose CPU time stood still,
// really wait for a CPU. One queued on the very CPU rbscope runs on may
// only wait for rbscope: on a busy machine the scheduler often puts
// rbscope's thread beside the target, and then, whenever it looks, the
// target stands still (in a loaded run, 5 samples of 1,600 ticks of a
// target that had a whole CPU). So rbscope steps off that CPU (its
// affinity, for this look only) and reads those threads' clocks again. A
// thread that runs now was queued there: if its wait, which the kernel
// adds to its run delay as it gets the CPU, began after this tick did,
// it waited for rbscope alone and counts as on a CPU; one that waited
// longer had been preempted by another task and still counts as waiting.
// Where rbscope may use no other CPU, such a thread counts as on a CPU;
// where the kernel keeps no run delays, one that runs once rbscope stepped
// aside does.
func (p *proc) stepAside(still []int, tasks map[int]bool) []int {
	// The affinity set is the OS thread's: this goroutine must stay on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu, node uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); e != 0 || p.tasks == nil {
		return still
	}
	// Into buffers kept between ticks: a tick allocates nothing.
	waiting, mine := p.asideScratch[0][:0], p.asideScratch[1][:0]
	defer func() { p.asideScratch = [2][]int{waiting[:0], mine[:0]} }()
	for _, tid := range still {
		if c, ok := p.tasks.LastCPU(tid); ok && c == int(cpu) {
			mine = append(mine, tid)
		} else {
			waiting = append(waiting, tid)
		}
	}
	if len(mine) == 0 {
		return waiting
	}
	var old, elsewhere unix.CPUSet
	if unix.SchedGetaffinity(0, &old) != nil {
		return waiting
	}
	elsewhere = old
	elsewhere.Clear(int(cpu))
	if elsewhere.Count() == 0 {
		return waiting // rbscope always takes the target's CPU to look
	}
	if p.asideDelay == nil {
		p.asideDelay = map[int]time.Duration{}
	}
	delay := p.asideDelay
	clear(delay)
	for _, tid := range mine {
		if d, ok := procfs.RunDelay(p.pid, tid); ok {
			delay[tid] = d
		}
	}
	if unix.SchedSetaffinity(0, &elsewhere) != nil {
		return still
	}
	defer unix.SchedSetaffinity(0, &old)
	t0 := p.cpuTimes(mine, tasks, p.scratchClocks(0))
	t1 := p.cpuTimes(mine, tasks, p.scratchClocks(1))
	for _, tid := range mine {
		if v, ok := t0[tid]; !ok || v == t1[tid] {
			waiting = append(waiting, tid)
			continue
		}
		before, ok := delay[tid]
		if after, ok2 := procfs.RunDelay(p.pid, tid); ok && ok2 && after-before > time.Since(p.tickAt)+stepAsideSlack {
			waiting = append(waiting, tid)
		}
	}
	return waiting
}

// stepAsideSlack is how much longer than the tick so far a thread may have
// waited and still count as having waited for rbscope: the timer's wake-up
// reaches the sampler a little after the tick's time is taken.
const stepAsideSlack = 50 * time.Microsecond

// maxClocks is how many thread CPU-time counters a process may keep open
// between samples.
const maxClocks = 256

// cpuTimes reads the CPU time of each of tids into out (a new map when
// nil), opening counters as needed and closing those of threads no longer
// in alive. It returns nil when counters are not available.
func (p *proc) cpuTimes(tids []int, alive map[int]bool, out map[int]uint64) map[int]uint64 {
	if !p.pruneClocks(tids, alive) {
		return nil
	}
	if out == nil {
		out = make(map[int]uint64, len(tids))
	}
	for _, tid := range tids {
		t, ok, refused := p.cpuTime(tid)
		if refused {
			return nil
		}
		if ok {
			out[tid] = t
		}
	}
	return out
}

// pruneClocks closes the CPU-time counters of the threads not alive, and,
// past maxClocks, of those not in tids; false where the kernel refuses
// counters.
func (p *proc) pruneClocks(tids []int, alive map[int]bool) bool {
	if p.noClocks {
		return false
	}
	if p.clocks == nil {
		p.clocks = map[int]*target.CPUClock{}
	}
	var wanted map[int]bool
	if len(p.clocks) > maxClocks {
		wanted = map[int]bool{}
		for _, tid := range tids {
			wanted[tid] = true
		}
	}
	for tid, c := range p.clocks {
		// Gone, or (with many threads) not running now: one open file
		// each is kept only for a bounded number of threads.
		if !alive[tid] || wanted != nil && !wanted[tid] {
			c.Close()
			delete(p.clocks, tid)
		}
	}
	return true
}

// cpuTime reads thread tid's CPU time, opening its counter the first time;
// ok is false for a thread that ended meanwhile, refused true (and kept)
// when the kernel refuses the process counters.
func (p *proc) cpuTime(tid int) (t uint64, ok, refused bool) {
	if p.noClocks {
		return 0, false, true
	}
	if p.clocks == nil {
		p.clocks = map[int]*target.CPUClock{}
	}
	c, open := p.clocks[tid]
	if !open {
		var err error
		if c, err = p.live.CPUClock(tid); err != nil {
			if len(p.clocks) == 0 {
				p.noClocks = true // not allowed here: always stop
				return 0, false, true
			}
			return 0, false, false // the thread ended meanwhile
		}
		p.clocks[tid] = c
	}
	t, err := c.Read()
	return t, err == nil, false
}

// scratchClocks returns one of the two maps onCPUNow's readings go into,
// emptied: kept between ticks, so that a tick allocates none.
func (p *proc) scratchClocks(i int) map[int]uint64 {
	if p.clockScratch[i] == nil {
		p.clockScratch[i] = map[int]uint64{}
	}
	clear(p.clockScratch[i])
	return p.clockScratch[i]
}
