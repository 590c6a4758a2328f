// Package sampler takes stack samples of Ruby processes at a fixed rate and
// aggregates them into a profile.Profile that the output formats write.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampling"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// titleInterval is how often the titles of the processes followed
// (Subprocesses) are read again.
const titleInterval = 5 * time.Second

// Options control a recording.
type Options struct {
	// Rate is samples per second (1..MaxRate).
	Rate float64
	// Duration ends the recording; zero records until ctx is done or every
	// target has exited.
	Duration time.Duration
	// Idle includes threads that are not on a CPU (sleeping, waiting for
	// IO, a lock or the GVL). By default only threads the kernel reports as
	// running are sampled.
	Idle bool
	// Nonblocking reads without pausing the target.
	Nonblocking bool
	// Realtime runs the sampling thread at real-time priority where the
	// kernel allows it (see realtime.go), so that its instants stay
	// where they were drawn on a machine whose CPUs are all busy.
	Realtime bool
	// GVL also samples the threads waiting for the GVL (Ruby threads
	// ready to run, asleep until the thread holding the lock lets it go),
	// each with a leaf frame profile.LabelGVLWait. With Idle they are
	// sampled anyway and get that leaf too.
	GVL bool
	// Threads adds a root frame per thread ("thread NAME").
	Threads bool
	// Subprocesses follows the target's descendants, with a root frame per
	// process ("pid NNN (TITLE)", TITLE its command line as ps shows it,
	// which servers set: "puma: cluster worker 0: 4242 [app]").
	Subprocesses bool
	// Progress, if set, is called about once a second while recording.
	Progress func(sampling.Progress)
	// ThreadFilter, if set, keeps only the threads it returns true for.
	ThreadFilter func(rubyvm.Thread) bool
	// Flush, if set, is called every FlushEvery with the samples taken
	// since the previous call; the sampler then starts a new profile. It
	// runs on the sampling goroutine and must not block for long.
	Flush      func(*profile.Profile)
	FlushEvery time.Duration
	// Timeline keeps every sample's time, process and thread in the
	// profile (profile.Profile.Timeline), as the raw and firefox formats
	// need.
	Timeline bool
	// VM are the options for finding each process's Ruby VM
	// (--force-version).
	VM rubyvm.Options
	// Native adds every sampled thread's native frames, unwound with the
	// code's CFI while it stands still, Ruby frames beside the exec-loop
	// frame that runs them (stacks.Merge). It needs the paused mode.
	Native bool
	// PerProcess keeps a profile per process (Flush and Done get each
	// with its PID) and keeps the sampler running with no process left
	// until ctx ends: a set of processes that Add grows, as the agent
	// profiles a host.
	PerProcess bool
	// FlushProcess, with PerProcess, is called every FlushEvery with each
	// process's samples since the last call (its CPU profile, and with
	// Wall its wall-clock profile, else nil), and once more when it has
	// exited (done) or the recording ends.
	FlushProcess func(pid int, cpu, wall *profile.Profile, done bool)
	// Wall, with PerProcess, also keeps a wall-clock profile of each
	// process: at every tick every Ruby thread, whatever it is doing
	// (running, asleep, blocked, waiting for the GVL: that leaf), read
	// without pausing; where time goes, not only CPU time.
	Wall bool
	// Failed, with PerProcess, is called when sampling a process failed
	// in a way that will not change (a panic: an rbscope bug): the
	// process is dropped, the others go on.
	Failed func(pid int, err error)
}

// Validate checks the options, returning an error naming the bad one.
func (o Options) Validate() error {
	if !(o.Rate >= 1 && o.Rate <= sampling.MaxRate) {
		return fmt.Errorf("--rate %v is out of range: give 1 to %d samples per second", o.Rate, sampling.MaxRate)
	}
	if o.Duration < 0 {
		return fmt.Errorf("--duration %v is negative", o.Duration)
	}
	if o.Native && o.Nonblocking {
		return fmt.Errorf("--native needs the threads stopped to read their registers: drop --nonblocking")
	}
	if o.Wall && !o.PerProcess {
		return fmt.Errorf("wall-clock profiles are kept per process (Options.PerProcess)")
	}
	return nil
}

// proc is one sampled process.
type proc struct {
	pid int
	// prof holds the process's samples with Options.PerProcess, and wall
	// its wall-clock samples with Options.Wall.
	prof, wall *profile.Profile
	// wallStacks are the stacks the last wall-clock sample read, by
	// thread (sampleWall).
	wallStacks map[uint64]wallStack
	// wallAdded are the samples the last wall-clock read added to
	// wallAddedTo (addSamples), which a tick at which no thread ran adds
	// again without reading (sampleWall); still says this tick's gate
	// found that no thread ran since the last tick's (firstLook).
	wallAdded   []addedSample
	wallAddedTo *profile.Profile
	still       bool
	// wallReads counts the wall-clock samples that read the process.
	wallReads int
	// lastStacks are the stacks of each thread's last sample, by TID
	// (addSamples).
	lastStacks map[int]*lastStack
	// tick is what the current tick's functions ask (tickFuncs).
	tick tick
	// title is the process's command line as last read (processTitle).
	title string
	// mainTID is the main thread's TID in Ruby's books as last seen, and
	// mainForeign whether it is no thread of this process (foreignMain).
	mainTID     int
	mainForeign bool
	live        *target.Live
	vm          *rubyvm.VM
	gone        bool
	// clocks are the CPU-time counters of the threads seen running
	// (onCPUNow); noClocks is set when the kernel refuses them.
	clocks   map[int]*target.CPUClock
	noClocks bool
	// watches are the switch watches of the threads seen runnable
	// (onCPUNow), which tell without a system call whether a thread is
	// on a CPU; noWatches is set when the kernel refuses them.
	watches   map[int]*threadWatch
	noWatches bool
	// onCPUScratch holds onCPUNow's lists of TIDs, kept between ticks.
	onCPUScratch [3][]int
	// asideScratch and asideDelay are stepAside's, kept between ticks.
	asideScratch [2][]int
	asideDelay   map[int]time.Duration
	// tickAt is when the current tick began (stepAside).
	tickAt time.Time
	// clock counts the CPU time of all the process's threads (its first
	// tick opens it; noClock is set where that fails), lastClock is its
	// reading at the last tick, and idleTicks counts the ticks since the
	// thread states were last read (firstLook).
	clock     *target.ThreadsClock
	noClock   bool
	lastClock uint64
	// clockNow and clockLast are the last two readings of each thread's
	// clock (readClock; switchLook).
	clockNow, clockLast []uint64
	idleTicks           int
	// tracerRT is set while p's tracer thread is real-time, as the
	// sampling thread is (read).
	tracerRT bool
	// keepOff is set when p is the only process sampled: rbscope then
	// keeps its own threads off p's CPUs (ownCPUs).
	keepOff bool
	// tasks tells which threads are running (made at the first sample).
	tasks *procfs.TaskStates
	// clockScratch holds the two readings of onCPUNow (scratchClocks).
	clockScratch [2]map[int]uint64
	// gate is what the gate found at this tick (Sampler.gate).
	gate gateSays
	// busy is set when the last tick found a thread running: the next
	// one then reads the thread states without asking the gate first,
	// whose clock reads cost most when a thread runs (the kernel asks the
	// thread's CPU for its count) and would only say yes.
	busy bool
	// reader reads the process's stacks (and, with Options.Native, its
	// native stacks) at every tick (read); sel is its selection at this
	// tick, listed the threads listed before the pause, pick the
	// selection's function, made once, and picked its list of TIDs.
	reader *stacks.Reader
	sel    stacks.Selection
	listed []rubyvm.Thread
	pick   func() []int
	picked []int
}

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

// foreignMain reports whether tid, the TID Ruby's books give the main
// thread, is no thread of p: the parent's, in a forked child (a Puma or
// Unicorn worker). It is asked when the running threads are not listed
// (Options.Idle), and the answer for a TID is kept.
func (p *proc) foreignMain(tid int) bool {
	if p.mainTID != tid {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", p.pid, tid))
		p.mainTID, p.mainForeign = tid, err != nil
	}
	return p.mainForeign
}

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
	if p.noClocks {
		return nil
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
	if out == nil {
		out = make(map[int]uint64, len(tids))
	}
	for _, tid := range tids {
		c, ok := p.clocks[tid]
		if !ok {
			var err error
			if c, err = p.live.CPUClock(tid); err != nil {
				if len(p.clocks) == 0 {
					p.noClocks = true // not allowed here: always stop
					return nil
				}
				continue // the thread ended meanwhile
			}
			p.clocks[tid] = c
		}
		if t, err := c.Read(); err == nil {
			out[tid] = t
		}
	}
	return out
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

func (p *proc) close() {
	if p.clock != nil {
		p.clock.Close()
	}
	if p.reader != nil {
		p.reader.Close()
	}
	if p.tasks != nil {
		p.tasks.Close()
	}
	for _, c := range p.clocks {
		c.Close()
	}
	p.clocks = nil
	p.closeWatches(nil)
	if p.vm != nil {
		p.vm.Close()
	}
	if p.live != nil {
		p.live.Close()
	}
}

// ErrAllExited is returned by Open when the target is gone before sampling.
var ErrAllExited = errors.New("every target process has exited")

// Sampler records stack samples of one process and, optionally, its
// descendants; or, with Options.PerProcess, of a set of processes that
// Add grows. One loop on one goroutine visits every process at each tick.
type Sampler struct {
	opts    Options
	root    int
	procs   map[int]*proc
	ignored map[int]int // pids that are not (yet) Ruby -> attempts
	profile *profile.Profile

	mu    sync.Mutex
	added []*proc // attached by Add, for the loop to take in

	// rt is the sampling thread's real-time scheduling (Run).
	rt *rtSampler
	// frames is addSamples's scratch.
	frames []profile.Frame
}

// NewSet makes a sampler of no process yet, for Options.PerProcess: Add
// gives it processes, and Run samples them until ctx ends.
func NewSet(opts Options) (*Sampler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !opts.PerProcess {
		return nil, fmt.Errorf("a sampler of a set of processes keeps a profile per process (Options.PerProcess)")
	}
	return &Sampler{opts: opts, procs: map[int]*proc{}, ignored: map[int]int{}, profile: newProfile(opts)}, nil
}

// Add attaches to pid and finds its Ruby VM, in the caller's goroutine,
// and hands the process to the sampling loop, which takes it in at its
// next tick. It returns the process's Ruby version. Add may be called
// while Run runs.
func (s *Sampler) Add(pid int) (rubyVersion string, err error) {
	p, err := attach(pid, s.opts)
	if err != nil {
		return "", err
	}
	if s.opts.PerProcess {
		p.prof = newProfile(s.opts)
	}
	if s.opts.Wall {
		p.wall = newWallProfile(s.opts)
	}
	s.mu.Lock()
	s.added = append(s.added, p)
	s.mu.Unlock()
	return p.vm.Version, nil
}

// takeAdded moves the processes Add attached into the loop's set.
func (s *Sampler) takeAdded() {
	s.mu.Lock()
	added := s.added
	s.added = nil
	s.mu.Unlock()
	for _, p := range added {
		if old := s.procs[p.pid]; old != nil {
			old.close() // its PID was another process's, gone since
		}
		p.prof.Start = time.Now()
		if p.wall != nil {
			p.wall.Start = p.prof.Start
		}
		s.procs[p.pid] = p
	}
}

// profileOf is where process p's samples go.
func (s *Sampler) profileOf(p *proc) *profile.Profile {
	if p.prof != nil {
		return p.prof
	}
	return s.profile
}

// New attaches to pid and finds its Ruby VM.
func New(pid int, opts Options) (*Sampler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.PerProcess {
		return nil, fmt.Errorf("a profile per process is kept by a sampler of a set (NewSet), not of one process")
	}
	s := &Sampler{opts: opts, root: pid, procs: map[int]*proc{}, ignored: map[int]int{}, profile: newProfile(opts)}
	p, err := attach(pid, opts)
	if err != nil {
		return nil, err
	}
	p.keepOff = !opts.Subprocesses
	s.procs[pid] = p
	return s, nil
}

func attach(pid int, opts Options) (*proc, error) {
	live, err := target.Attach(pid)
	if err != nil {
		return nil, err
	}
	// The recorder handles Ctrl-C itself and resumes before writing.
	live.NoSignalGuard = true
	vm, err := rubyvm.OpenWith(live, opts.VM)
	if err != nil {
		live.Close()
		return nil, err
	}
	p := &proc{pid: pid, live: live, vm: vm, title: processTitle(pid)}
	// Frames read without a pause are copied by addSamples before the
	// next read.
	p.reader = stacks.NewReader(live, vm, stacks.ReaderOptions{Native: opts.Native, ReuseFrames: true})
	return p, nil
}

// maxTitle bounds a process title in a root frame's label, in bytes.
const maxTitle = 120

// processTitle is the command line of pid as ps shows it (a server's
// workers set theirs to say what they are), made printable and cut to
// maxTitle bytes; "" when it cannot be read.
func processTitle(pid int) string {
	t := textsafe.Clean(discover.Cmdline("/proc", pid))
	if len(t) > maxTitle {
		n := maxTitle
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n] + "..."
	}
	return t
}

// nameProcesses gives the root frames of processes (Subprocesses) their
// titles, read again for the processes still running: a worker sets its
// title after the fork that made it, so that the title read when it was
// found may be its master's.
func (s *Sampler) nameProcesses(prof *profile.Profile) *profile.Profile {
	if !s.opts.Subprocesses {
		return prof
	}
	for _, p := range s.procs {
		if !p.gone {
			if t := processTitle(p.pid); t != "" {
				p.title = t
			}
		}
	}
	prof.Relabel(profile.KindProcess, func(label string) string {
		pid, err := strconv.Atoi(strings.TrimPrefix(label, "pid "))
		if p := s.procs[pid]; err == nil && p != nil && p.title != "" {
			return label + " (" + p.title + ")"
		}
		return label
	})
	return prof
}

// RubyVersion is the Ruby version of the process New attached to.
func (s *Sampler) RubyVersion() string {
	if p := s.procs[s.root]; p != nil {
		return p.vm.Version
	}
	return ""
}

// Close resumes and releases every target.
func (s *Sampler) Close() {
	for _, p := range s.procs {
		if p.keepOff {
			own.restore()
		}
		p.close()
	}
}

// goneCheckEvery is how often Run asks each process whether it is still
// the one attached to (target.Live.Gone).
const goneCheckEvery = time.Second

// Run samples until ctx is done, the duration passes or every target has
// exited (or exec'd), and returns what it collected (never nil).
func (s *Sampler) Run(ctx context.Context) *profile.Profile {
	defer s.Close()
	prof := s.profile
	prof.Start = time.Now()
	period := time.Duration(float64(time.Second) / s.opts.Rate)
	clock := newSampleClock(period)
	defer clock.Stop()
	var end time.Time
	if s.opts.Duration > 0 {
		end = prof.Start.Add(s.opts.Duration)
	}
	rt := enterRealtime(s.opts.Realtime)
	defer rt.leave()
	s.rt = rt
	lastScan, lastProgress, lastTitles, lastFlush, lastGoneCheck := time.Now(), time.Now(), time.Now(), time.Now(), time.Now()
	for {
		if !clock.wait(ctx.Done(), end, rt.on()) {
			s.flushProcesses(true)
			prof.Duration = time.Since(prof.Start)
			return s.nameProcesses(prof)
		}
		clock.next()
		if s.opts.PerProcess {
			s.takeAdded()
		}
		prof.Ticks++
		// What the VMs learned of objects is theirs to keep or drop
		// (rubyvm's cachegen.go).
		if s.opts.Subprocesses && time.Since(lastTitles) > titleInterval {
			for _, p := range s.procs {
				if !p.gone {
					if t := processTitle(p.pid); t != "" {
						p.title = t // kept for when it has exited
					}
				}
			}
			lastTitles = time.Now()
		}
		if s.gated() {
			s.gate()
		}
		// A process may end with no failed read to say so: after an exec
		// (a server's hot restart) its PID and threads run another
		// program. Each is asked once a second (target.Live.Gone).
		checkGone := time.Since(lastGoneCheck) >= goneCheckEvery
		if checkGone {
			lastGoneCheck = time.Now()
		}
		alive := 0
		for pid, p := range s.procs {
			if p.gone {
				continue
			}
			if p.prof != nil {
				p.prof.Ticks++
			}
			if p.wall != nil {
				p.wall.Ticks++
			}
			if checkGone && p.live.Gone() {
				p.gone = true
			} else {
				s.sampleSafe(p)
			}
			if !p.gone {
				alive++
				continue
			}
			if s.opts.PerProcess {
				s.flushProcess(p, true)
				p.close()
				delete(s.procs, pid)
			}
		}
		if s.opts.Subprocesses && time.Since(lastScan) > 200*time.Millisecond {
			alive += s.scanChildren()
			lastScan = time.Now()
		}
		if alive == 0 && !s.opts.PerProcess {
			prof.Duration = time.Since(prof.Start)
			return s.nameProcesses(prof)
		}
		if s.opts.PerProcess && time.Since(lastFlush) >= s.opts.FlushEvery {
			s.flushProcesses(false)
			lastFlush = time.Now()
		}
		if s.opts.Flush != nil && time.Since(prof.Start) >= s.opts.FlushEvery {
			prof.Duration = time.Since(prof.Start)
			s.opts.Flush(s.nameProcesses(prof))
			prof = newProfile(s.opts)
			s.profile = prof
		}
		if s.opts.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			s.opts.Progress(sampling.Progress{Elapsed: time.Since(prof.Start), Ticks: prof.Ticks, Samples: prof.Samples, Errors: prof.Errors, Processes: alive})
		}
		rt.tick()
	}
}

// flushProcesses hands each process's samples to Options.FlushProcess
// (PerProcess), and, at the end of the recording, lets every process go.
func (s *Sampler) flushProcesses(end bool) {
	if !s.opts.PerProcess {
		return
	}
	if end {
		s.takeAdded() // added since the last tick: let go too
	}
	for _, p := range s.procs {
		s.flushProcess(p, end)
	}
}

// flushProcess hands process p's samples to Options.FlushProcess and
// starts it a new profile.
func (s *Sampler) flushProcess(p *proc, done bool) {
	p.prof.Duration = time.Since(p.prof.Start)
	if p.wall != nil {
		p.wall.Duration = time.Since(p.wall.Start)
	}
	if s.opts.FlushProcess != nil {
		s.opts.FlushProcess(p.pid, p.prof, p.wall, done)
	}
	p.prof = newProfile(s.opts)
	p.prof.Start = time.Now()
	if p.wall != nil {
		p.wall = newWallProfile(s.opts)
		p.wall.Start = p.prof.Start
	}
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
		// the unwinder, made or made anew outside any pause; the last
		// sample's native stacks never join this one's
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

// addSamples adds a sample of each of threads that wanted accepts to prof:
// its Ruby frames (beside its native ones when they were read), under a
// process and a thread root frame when asked for, with the GC's phase
// above the GVL holder's and, for a thread waiting for the GVL, that leaf
// (with Options.GVL, or for every thread: all). With native, a thread's
// native frames unwound at this tick (p.reader) go beside its Ruby frames.
func (s *Sampler) addSamples(prof *profile.Profile, p *proc, threads []rubyvm.Thread, gc rubyvm.GCPhase, now time.Time, wanted func(rubyvm.Thread) bool, tidOf func(rubyvm.Thread) int, all, native bool) {
	for _, th := range threads {
		if !wanted(th) {
			continue
		}
		if all && th.Status == "dead" {
			continue
		}
		if th.Error != "" {
			prof.Errors++
			continue
		}
		if len(th.Frames) == 0 {
			continue // a thread not yet running Ruby code
		}
		frames := s.frames[:0] // Add copies what it keeps
		if s.opts.Subprocesses {
			frames = append(frames, profile.Frame{Kind: profile.KindProcess, Label: "pid " + strconv.Itoa(p.pid)})
		}
		if s.opts.Threads {
			frames = append(frames, profile.Frame{Kind: profile.KindThread, Label: "thread " + sampling.ThreadName(th)})
		}
		if nf, _, _ := p.reader.Native(tidOf(th)); len(nf) > 0 && native {
			mixed := stacks.Merge(th.Frames, nf).Frames
			for i := len(mixed) - 1; i >= 0; i-- {
				frames = append(frames, profileFrame(mixed[i]))
			}
		} else {
			for i := len(th.Frames) - 1; i >= 0; i-- {
				f := th.Frames[i]
				frames = append(frames, profile.Frame{Kind: profile.Kind(f.Kind), Label: f.Label, Path: f.Path, Line: f.Line})
			}
		}
		switch {
		case th.GVL && gc != rubyvm.GCIdle:
			frames = append(frames, sampling.GCFrames(gc)...)
		case (s.opts.GVL || all) && waitsForGVL(th):
			frames = append(frames, profile.Frame{Kind: profile.KindGVL, Label: profile.LabelGVLWait})
		}
		s.frames = frames
		// A thread sampled where it was sampled last (a hot loop) counts
		// one more of that stack, found without looking up its frames.
		tid := tidOf(th)
		var si int
		if last := p.lastStacks[tid]; last != nil && last.prof == prof && slices.Equal(last.frames, frames) {
			si = last.stack
			prof.AddStackSample(si, now, p.pid, tid, sampling.ThreadName(th))
		} else {
			si = prof.AddSample(frames, now, p.pid, tid, sampling.ThreadName(th))
			p.rememberStack(prof, tid, frames, si)
		}
		if prof == p.wall {
			p.wallAdded = append(p.wallAdded, addedSample{stack: si, tid: tid, thread: sampling.ThreadName(th)})
		}
	}
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
		t.tidOf = func(th rubyvm.Thread) int {
			if th.Main && th.TID != p.pid && (t.tasks != nil && !t.tasks[th.TID] || t.tasks == nil && p.foreignMain(th.TID)) {
				return p.pid
			}
			return th.TID
		}
		t.gvlWaiter = func(th rubyvm.Thread) bool { return t.s.opts.GVL && waitsForGVL(th) }
		t.wants = func(th rubyvm.Thread) bool {
			return (t.running == nil || t.running[t.tidOf(th)] || t.gvlWaiter(th)) && (t.s.opts.ThreadFilter == nil || t.s.opts.ThreadFilter(th))
		}
	}
	return t.tidOf, t.wants
}

// lastStack is the stack of a thread's last sample: its frames as given to
// prof, and their index in prof's Stacks.
type lastStack struct {
	prof   *profile.Profile
	frames []profile.Frame
	stack  int
}

// maxLastStacks bounds the threads whose last stacks a process keeps.
const maxLastStacks = 256

// rememberStack keeps frames, the stack of thread tid's sample that prof
// has as its stack si, for the thread's next sample (addSamples).
func (p *proc) rememberStack(prof *profile.Profile, tid int, frames []profile.Frame, si int) {
	if p.lastStacks == nil || len(p.lastStacks) >= maxLastStacks {
		p.lastStacks = map[int]*lastStack{}
	}
	last := p.lastStacks[tid]
	if last == nil {
		last = &lastStack{}
		p.lastStacks[tid] = last
	}
	last.prof, last.frames, last.stack = prof, append(last.frames[:0], frames...), si
}

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
	threads, err := p.reader.List()
	if err != nil {
		p.wall.Errors++
		return
	}
	tidOf := func(th rubyvm.Thread) int {
		if th.Main && th.TID != p.pid && p.foreignMain(th.TID) {
			return p.pid
		}
		return th.TID
	}
	alive := make(map[int]bool, len(threads))
	tids := make([]int, 0, len(threads))
	for _, th := range threads {
		if tid := tidOf(th); tid > 0 {
			alive[tid], tids = true, append(tids, tid)
		}
	}
	cpu := p.cpuTimes(tids, alive, nil) // nil where the kernel refuses counters
	if p.wallStacks == nil {
		p.wallStacks = map[uint64]wallStack{}
	}
	fresh := func(th rubyvm.Thread) bool {
		c, ok := cpu[tidOf(th)]
		ws, had := p.wallStacks[th.Addr]
		if ok && had && ws.cpu == c {
			return false
		}
		return true
	}
	p.reader.ReadStacks(threads, fresh)
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

// profileFrame is a mixed frame as profiles keep it: a native frame by its
// function (so that its samples add up whatever the pc), or, unnamed, by
// the start of its function's CFI range; its object is the frame's path.
func profileFrame(f stacks.Frame) profile.Frame {
	if f.Kind != stacks.KindNative {
		return profile.Frame{Kind: profile.Kind(f.Kind), Label: f.Label, Path: f.Path, Line: f.Line}
	}
	n := f.Native
	label := n.Function
	if label == "" {
		label = fmt.Sprintf("%s+%#x", filepath.Base(n.Object), n.FuncStart)
		if strings.HasPrefix(n.Object, "[") {
			label = n.Object
		}
	}
	return profile.Frame{Kind: profile.KindNative, Label: label, Path: filepath.Base(n.Object)}
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

// scanChildren attaches to new descendants of the root process and returns
// how many it added.
func (s *Sampler) scanChildren() int {
	parents := map[int]int{}
	pids, err := procfs.PIDs(procfs.Root)
	if err != nil {
		return 0
	}
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid, 0); err == nil {
			parents[pid] = st.PPID
		}
	}
	added := 0
	for pid := range parents {
		if _, ok := s.procs[pid]; ok || pid == s.root || s.ignored[pid] >= 5 {
			continue
		}
		if !descends(parents, pid, s.root) {
			continue
		}
		p, err := attach(pid, s.opts)
		if err != nil {
			s.ignored[pid]++ // not Ruby (yet): try again a few times
			continue
		}
		s.procs[pid] = p
		added++
	}
	return added
}

func descends(parents map[int]int, pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		pid = parents[pid]
		if pid == root {
			return true
		}
	}
	return false
}

// SetProgress sets the callback called about once a second while recording.
func (s *Sampler) SetProgress(f func(sampling.Progress)) { s.opts.Progress = f }

// newWallProfile returns the empty wall-clock profile a process's
// recording with opts starts.
func newWallProfile(opts Options) *profile.Profile {
	p := newProfile(opts)
	p.Wall = true
	return p
}

// newProfile returns the empty profile a recording with opts starts.
func newProfile(opts Options) *profile.Profile {
	p := profile.NewProfile(opts.Rate)
	if opts.Timeline {
		p.KeepTimeline()
	}
	return p
}
