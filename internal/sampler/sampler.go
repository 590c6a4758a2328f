// Package sampler takes stack samples of Ruby processes at a fixed rate and
// aggregates them into a profile.Profile that the output formats write.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampling"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
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
	// ThreadFilter, if set, keeps only the threads it returns true for;
	// it is asked of every thread at each tick.
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
	// wallCPU holds the CPU times the last wall-clock read read, by TID
	// (kept between reads: a read allocates no map).
	wallCPU map[int]uint64
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
	// The recorder handles Ctrl-C itself and resumes before writing.
	lp, err := liveproc.Open(pid, liveproc.Options{VM: opts.VM, NoSignalGuard: true})
	if err != nil {
		return nil, err
	}
	live, vm := lp.Live, lp.VM
	p := &proc{pid: pid, live: live, vm: vm, title: processTitle(pid)}
	// Frames read without a pause are copied by addSamples before the
	// next read.
	p.reader = stacks.NewReader(live, vm, stacks.ReaderOptions{Native: opts.Native, ReuseFrames: true})
	return p, nil
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

// SetProgress sets the callback called about once a second while recording.
func (s *Sampler) SetProgress(f func(sampling.Progress)) { s.opts.Progress = f }
