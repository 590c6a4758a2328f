package ebpfsample

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampling"
	"github.com/rbscope/rbscope/internal/target"
)

// RecordOptions say what a recording with the BPF sampler keeps (record
// --ebpf): the part of sampler.Options it can honour.
type RecordOptions struct {
	// Rate is the samples a second of a thread on a CPU (1 to
	// sampling.MaxRate): each CPU's perf event fires at this rate.
	Rate float64
	// Duration ends the recording; zero records until ctx is done or the
	// target has exited.
	Duration time.Duration
	// Threads adds a root frame per thread ("thread NAME"), as
	// sampler.Options.Threads does.
	Threads bool
	// Timeline keeps every sample's time and thread in the profile
	// (profile.Profile.Timeline), as the raw and firefox formats need.
	Timeline bool
	// FlushEvery, with Flush, hands the profile since the last flush to
	// Flush and starts a new one (top --ebpf); Run then returns the last.
	// Flush runs on the sampling goroutine and must not block for long.
	FlushEvery time.Duration
	Flush      func(*profile.Profile)
	// ThreadFilter, if set, keeps only the samples of the threads whose
	// name (sampling.ThreadName) and TID it accepts (--thread).
	ThreadFilter func(name string, tid int) bool
	// Idle records every thread whatever it does (record --idle): the
	// threads on a CPU at the clock's samples, and the others for the
	// time they spend off a CPU, weighed at Rate under the stack they
	// left it with (wallClock), read as they leave it (sched_switch).
	Idle bool
	// Progress, if set, is called about once a second while recording.
	Progress func(sampling.Progress)
	// VM are the options for finding the process's Ruby VM
	// (--force-version).
	VM rubyvm.Options
}

// Recorder records the on-CPU Ruby stacks of one process with the BPF
// sampler into a profile.Profile, the model the user-space sampler fills
// (sampler.Sampler), for the same output formats.
type Recorder struct {
	attached
	opts RecordOptions
	// ps is where Run puts the samples.
	ps profiles
	// counted and switchCounted are the programs' counters at the last
	// flush (FlushEvery): a profile's ticks and errors are the
	// difference.
	counted, switchCounted Counters
}

// attached is a process the BPF sampler was loaded on: what open made,
// which close lets go.
type attached struct {
	pid  int
	live *target.Live
	vm   *rubyvm.VM
	s    *Sampler
	// hook is the switch hook the process's sampler alone uses (a
	// Recorder's), closed with it; nil when there is none or it is
	// shared (a Set's).
	hook *switchHook
}

// ErrNotAllowed is returned by NewRecorder where the kernel refuses the
// BPF program or its perf events to rbscope.
var ErrNotAllowed = errors.New("BPF programs and perf events are not allowed here")

// ErrUnsupported is returned by NewRecorder where the kernel or rbscope's
// place cannot run the BPF sampler.
var ErrUnsupported = errors.New("the BPF sampler cannot run here")

// initPIDNamespace is the inode of the initial PID namespace
// (PROC_PID_INIT_INO), the host's.
const initPIDNamespace = 0xEFFFFFFC

// NewRecorder attaches to pid, finds its Ruby VM and loads the BPF
// sampler on it; Run records. A refusal by the kernel comes back as
// ErrNotAllowed or ErrUnsupported, with what to do.
func NewRecorder(pid int, opts RecordOptions) (*Recorder, error) {
	if !(opts.Rate >= 1 && opts.Rate <= sampling.MaxRate) {
		return nil, fmt.Errorf("--rate %v is out of range: give 1 to %d samples per second", opts.Rate, sampling.MaxRate)
	}
	so := Options{Frequency: int(math.Round(opts.Rate))}
	if opts.Idle {
		if err := checkPlace(); err != nil {
			return nil, err
		}
		h, err := newSwitchHook()
		if err != nil {
			return nil, explain(err)
		}
		so.switches = h
	}
	a, err := open(pid, opts.VM, so)
	if err != nil {
		if so.switches != nil {
			so.switches.close()
		}
		return nil, err
	}
	a.hook = so.switches
	return &Recorder{attached: a, opts: opts}, nil
}

// checkPlace says whether rbscope runs where the BPF sampler can: the
// program compares the kernel's TIDs with those rbscope's /proc gives
// Ruby's threads, one and the same only in the host's PID namespace.
func checkPlace() error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err == nil && st.Ino != initPIDNamespace {
		return fmt.Errorf("%w: rbscope runs in a PID namespace of its own (a container's), and the BPF program sees the host's thread IDs: run rbscope in the host's PID namespace (docker run --pid=host; Kubernetes hostPID: true), or run without --ebpf", ErrUnsupported)
	}
	return nil
}

// open attaches to pid, finds its Ruby VM and loads the BPF sampler on it
// (not started). A refusal by the kernel comes back as ErrNotAllowed or
// ErrUnsupported, with what to do.
func open(pid int, vmOpts rubyvm.Options, opts Options) (attached, error) {
	if err := checkPlace(); err != nil {
		return attached{}, err
	}
	// The BPF sampler never stops the target: Ctrl-C needs no guard.
	p, err := liveproc.Open(pid, liveproc.Options{VM: vmOpts, NoSignalGuard: true})
	if err != nil {
		return attached{}, err
	}
	live, vm := p.Live, p.VM
	s, err := New(pid, vm, opts)
	if err != nil {
		err = goneOr(live, explain(err))
		vm.Close()
		live.Close()
		return attached{}, err
	}
	return attached{pid: pid, live: live, vm: vm, s: s}, nil
}

// goneOr is err, the failure of an attach, unless the process is the
// cause: it exited or ran another program (exec) while rbscope read it,
// and then that is the error (target.ErrExited or ErrReplaced).
func goneOr(live *target.Live, err error) error {
	if same := live.CheckSame(); same != nil {
		return same
	}
	return err
}

// explain turns the kernel's refusal of the sampler into what to do.
func explain(err error) error {
	// The kernel's word alone: the library's own advice (about
	// RLIMIT_MEMLOCK, which New already lifts) is for its developers.
	said := err.Error()
	var errno unix.Errno
	if errors.As(err, &errno) {
		said = errno.Error()
	}
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w (%s): run rbscope as root, or grant it CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep rbscope), or run without --ebpf", ErrNotAllowed, said)
	case errors.Is(err, ErrNoBTF):
		return fmt.Errorf("%w (%s): off-CPU time needs the kernel's BTF (CONFIG_DEBUG_INFO_BTF) to read a switched task's thread ID; run without --ebpf", ErrUnsupported, said)
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w (%s): this kernel lacks BPF, perf events or BPF ring buffers (Linux 5.8 or later with CONFIG_BPF_SYSCALL); run without --ebpf", ErrUnsupported, said)
	}
	return fmt.Errorf("loading the BPF sampler: %w", err)
}

// SetProgress sets the callback called about once a second while
// recording.
func (r *Recorder) SetProgress(f func(sampling.Progress)) { r.opts.Progress = f }

// drainEvery is how often the ring buffer is drained (the program wakes
// no reader); refreshEvery is how often the thread list is read again,
// sooner when a thread of the target that is not listed ran (a new one).
const (
	drainEvery   = 100 * time.Millisecond
	refreshEvery = time.Second
)

// Run samples until ctx is done, the duration passes or the target exits,
// and returns what it collected (never nil). An error says the sampler
// failed; the profile then holds the samples taken before.
func (r *Recorder) Run(ctx context.Context) (*profile.Profile, error) {
	defer r.Close()
	prof := r.newProfile()
	lastFlush := time.Now()
	var end <-chan time.Time
	if r.opts.Duration > 0 {
		timer := time.NewTimer(r.opts.Duration)
		defer timer.Stop()
		end = timer.C
	}
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	if err := r.s.Start(); err != nil {
		prof.Duration = time.Since(prof.Start)
		return prof, err
	}
	lastRefresh, lastProgress := time.Now(), time.Now()
	var noThread uint64
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-tick.C:
		}
		var clocked int
		if clocked, err = r.drain(prof); err != nil {
			break
		}
		if err = r.s.Clocked(clocked); err != nil {
			break
		}
		if r.live.Gone() {
			break
		}
		c, cerr := r.s.Counters()
		if time.Since(lastRefresh) >= refreshEvery || cerr == nil && c.NoThread != noThread {
			// A list read as threads come and go can be torn: the next
			// tick tries again.
			if _, rerr := r.s.RefreshThreads(); rerr == nil {
				lastRefresh, noThread = time.Now(), c.NoThread
			}
		}
		if r.opts.Flush != nil && time.Since(lastFlush) >= r.opts.FlushEvery {
			lastFlush = time.Now()
			if r.ps.clock != nil {
				if err = r.ps.clock.settle(r.s, prof, r.pid); err != nil {
					break
				}
			}
			prof.Duration = time.Since(prof.Start)
			r.count(prof, c)
			r.counted = c
			if sc, err := r.s.SwitchCounters(); err == nil {
				r.switchCounted = sc
			}
			r.opts.Flush(prof)
			prof = r.newProfile()
		}
		if r.opts.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			r.count(prof, c)
			r.opts.Progress(sampling.Progress{Elapsed: time.Since(prof.Start), Ticks: prof.Ticks, Samples: prof.Samples, Errors: prof.Errors, Processes: 1})
		}
	}
	if serr := r.s.Stop(); serr != nil && err == nil {
		err = serr
	}
	prof.Duration = time.Since(prof.Start) // every sample taken before
	if err == nil {
		_, err = r.drain(prof)
	}
	if err == nil && r.ps.clock != nil {
		// The threads still off a CPU: their time up to now.
		err = r.ps.clock.settle(r.s, prof, r.pid)
	}
	c, cerr := r.s.Counters()
	if err == nil {
		err = cerr
	}
	r.count(prof, c)
	return prof, err
}

// newProfile starts the profile Run fills, as r.ps says.
func (r *Recorder) newProfile() *profile.Profile {
	prof := profile.NewProfile(r.opts.Rate)
	if r.opts.Timeline {
		prof.KeepTimeline()
	}
	prof.Start = time.Now()
	r.ps = profiles{cpu: prof, threads: r.opts.Threads, keep: r.opts.ThreadFilter}
	if r.opts.Idle {
		clock := r.ps.clock
		if clock == nil {
			clock = newWallClock(r.opts.Rate)
		}
		r.ps = profiles{wall: prof, clock: clock, threads: r.opts.Threads, keep: r.opts.ThreadFilter}
	}
	return prof
}

// count sets the profile's ticks and errors from the program's counters:
// a tick is a perf event on a thread of the target, and an error one
// whose stack could not be read or sent. A recording of every thread
// (Idle) has a tick a period of its time, as the user-space sampler's,
// and its errors are the switch program's too.
func (r *Recorder) count(prof *profile.Profile, c Counters) {
	prof.Ticks = int(c.Runs - r.counted.Runs)
	prof.Errors = int(c.errors() - r.counted.errors())
	if r.ps.clock != nil {
		d := prof.Duration
		if d == 0 { // still recording
			d = time.Since(prof.Start)
		}
		prof.Ticks = int(d.Seconds() * r.opts.Rate)
		if sc, err := r.s.SwitchCounters(); err == nil {
			prof.Errors += int(sc.errors() - r.switchCounted.errors())
		}
	}
}

// drain adds the samples in the ring buffer to the recording's profile
// and returns how many the clock took.
func (r *Recorder) drain(*profile.Profile) (int, error) {
	return drainInto(r.s, r.ps, r.pid)
}

// profiles are where a process's samples go: its CPU profile (the
// clock's samples), and, when wall is set, its wall-clock profile, the
// clock's samples and the time off a CPU that clock weighs
// (wallClock). Either profile may be nil.
type profiles struct {
	cpu, wall *profile.Profile
	clock     *wallClock
	// threads puts each sample under a root frame naming its thread.
	threads bool
	// keep, if set, says which threads' samples are kept, by name and TID.
	keep func(thread string, tid int) bool
}

// drainInto adds the samples in s's ring buffer to ps and returns how
// many of them the clock took (not the switch samples).
func drainInto(s *Sampler, ps profiles, pid int) (int, error) {
	clocked := 0
	_, err := s.Drain(func(smp *Sample) {
		if !smp.Switch {
			clocked++
		}
		if len(smp.Frames) == 0 && !smp.Switch {
			return // a thread not yet running Ruby code
		}
		thread := s.ThreadName(smp.TID)
		if ps.keep != nil && !ps.keep(thread, smp.TID) {
			return
		}
		root := ""
		if ps.threads {
			root = thread
		}
		var frames []profile.Frame
		if len(smp.Frames) > 0 {
			frames = ProfileFrames(smp, root)
		}
		switch {
		case smp.Switch:
			if ps.clock != nil && ps.wall != nil {
				ps.clock.switched(ps.wall, smp, frames, pid, thread)
			}
		default:
			if ps.cpu != nil {
				ps.cpu.AddSample(frames, smp.Time, pid, smp.TID, thread)
			}
			if ps.wall != nil {
				ps.wall.AddSample(frames, smp.Time, pid, smp.TID, thread)
			}
		}
	})
	return clocked, err
}

// ProfileFrames returns the stack of smp as a profile keeps it, root
// first: under a root frame "thread NAME" when thread is not empty, its
// Ruby frames, and the GC's leaves while the collector ran
// (sampling.GCFrames), as the user-space sampler makes a sample's. The
// user-space sampler gives them to the thread holding the GVL; a sample
// here is of a thread on a CPU, which holds it unless it runs C code that
// let it go.
func ProfileFrames(smp *Sample, thread string) []profile.Frame {
	gc := sampling.GCFrames(smp.GC)
	frames := make([]profile.Frame, 0, len(smp.Frames)+len(gc)+1)
	if thread != "" {
		frames = append(frames, profile.Frame{Kind: profile.KindThread, Label: "thread " + thread})
	}
	for i := len(smp.Frames) - 1; i >= 0; i-- {
		frames = append(frames, sampling.ProfileFrame(smp.Frames[i]))
	}
	return append(frames, gc...)
}

// ThreadName is how profiles name the thread tid (sampling.ThreadName), as
// the last RefreshThreads listed it; "tid N" for one it did not list.
func (s *Sampler) ThreadName(tid int) string {
	if th, ok := s.rubyThreads[tid]; ok {
		return sampling.ThreadName(th)
	}
	return "tid " + strconv.Itoa(tid)
}

// Close unloads the sampler and lets the target go; Run calls it.
func (r *Recorder) Close() { r.close() }

// close unloads the sampler and lets the process go.
func (a *attached) close() {
	if a.s != nil {
		a.s.Close()
		a.s = nil
	}
	if a.vm != nil {
		a.vm.Close()
		a.vm = nil
	}
	if a.live != nil {
		a.live.Close()
		a.live = nil
	}
	if a.hook != nil {
		a.hook.close()
		a.hook = nil
	}
}
