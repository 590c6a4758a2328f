package ebpfsample

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampling"
)

// SetOptions say how a Set samples its processes (agent --ebpf): the part
// of sampler.Options with PerProcess that the BPF sampler can honour.
type SetOptions struct {
	// Rate is the samples a second of a thread on a CPU (1 to
	// sampling.MaxRate).
	Rate float64
	// FlushEvery is how often each process's profile is handed to
	// FlushProcess, and a new one started.
	FlushEvery time.Duration
	// FlushProcess is called every FlushEvery with each process's CPU
	// profile since the last call, and with Wall its wall-clock profile
	// (else nil), and once more with done set when the process has
	// exited or Run ends.
	FlushProcess func(pid int, cpu, wall *profile.Profile, done bool)
	// Wall also keeps a wall-clock profile of each process: the clock's
	// samples of its threads on a CPU, and its threads' time off a CPU
	// weighed at Rate under the stack each left its CPU with, read as
	// it leaves (sched_switch; wall.go), in the units of the user-space
	// sampler's wall profile.
	Wall bool
	// Failed is called when sampling a process failed for good (its
	// ring buffer unreadable, a bug): the process is dropped, its
	// profile since the last flush lost, and the others go on.
	Failed func(pid int, err error)
	// VM are the options for finding each process's Ruby VM.
	VM rubyvm.Options
}

// Set samples any number of processes with the BPF sampler, each with a
// program and a ring buffer of its own, and keeps a CPU profile per
// process. Nothing of it wakes per sample: Run wakes 20 times a second
// to drain the rings while a process is busy, and from 20 down to 2.5
// times a second as they all stay quiet (a program finding a quarter of
// its ring waiting wakes it at once), whatever the rate and however many
// processes; a process none of whose threads ran since the last
// wake-up costs no system call: only the program's runs on the CPUs'
// clocks, in the kernel. That is what makes it cheaper than the
// user-space sampler for many mostly idle processes (bench/agent.sh).
type Set struct {
	opts SetOptions

	mu    sync.Mutex
	added []*member
	// ended says Run has taken its last processes: Add lets a process
	// go at once.
	ended bool

	members map[int]*member
	// hook takes every process's switch samples, with Wall.
	hook *switchHook
	// rings wakes Run when a ring buffer is a quarter full.
	rings *ringWaiter
}

// member is one process of a Set.
type member struct {
	attached
	prof *profile.Profile
	// wall is its wall-clock profile (SetOptions.Wall), made by clock.
	wall  *profile.Profile
	clock *wallClock
	// counted are the program's counters at the last flush: a profile's
	// ticks and errors are the difference; switchCounted the switch
	// program's.
	counted, switchCounted Counters
	// noThread is the program's count of runs on unlisted threads at the
	// last thread list: when it moves, a new thread ran.
	noThread uint64
	// listed is when the threads were last listed.
	listed time.Time
}

// A Set's processes are drained every setDrainEvery while one of them is
// busy (the clock took jitterSamples of it since the last drain, so that
// its clocks' periods are drawn again about as often as jitterSamples
// says); while none is, the wait doubles, up to setQuietEvery: a quiet
// fleet wakes the agent 2.5 times a second, not 20 (the agent's CPU at
// 50 processes, --ebpf cpu,wall: 0.55% of a core against 1.28%). A
// program finding a quarter of its ring waiting wakes Run at once, so a
// process turning busy fills no ring meanwhile. Each sample copies at
// most setMaxStack bytes of value stack (the environments deeper are
// read as the sample is drained): so a process's ring buffer, which the
// agent maps twice (its resident memory is twice the ring's), stays small
// with many processes.
const (
	setDrainEvery = 50 * time.Millisecond
	setQuietEvery = 400 * time.Millisecond
	setMaxStack   = 4 << 10
)

// setListEvery is how often a process's threads are listed again when no
// new one ran: the list is where the VM reads the collector's counts, by
// which it keeps or drops what it learned of the process's objects
// (rubyvm's cachegen.go), and the frames decoded from environments on the
// heap are forgotten.
const setListEvery = 5 * time.Second

// setRingBytes is the ring buffer of a process sampled at rate: room for
// two threads on a CPU for setDrainEvery at 8 KiB a sample (setMaxStack,
// 128 frames and the header: most samples are far smaller), a power of
// two from 64 KiB to 4 MiB. At 100 Hz that is 128 KiB, 256 KiB of the
// agent's resident memory a process. A fuller ring drops samples, counted
// as errors.
func setRingBytes(rate float64) int {
	want := int(rate * 2 * setDrainEvery.Seconds() * (8 << 10))
	n := 64 << 10
	for n < want && n < 4<<20 {
		n <<= 1
	}
	return n
}

// NewSet checks that the BPF sampler can run here (the kernel's BPF ring
// buffers and perf event programs, rbscope's place and rights) and
// returns an empty set; Add adds processes, Run samples them.
func NewSet(opts SetOptions) (*Set, error) {
	if !(opts.Rate >= 1 && opts.Rate <= sampling.MaxRate) {
		return nil, fmt.Errorf("--rate %v is out of range: give 1 to %d samples per second", opts.Rate, sampling.MaxRate)
	}
	if opts.FlushEvery <= 0 {
		return nil, errors.New("a set of BPF samplers needs a flush interval")
	}
	if err := checkPlace(); err != nil {
		return nil, err
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		return nil, explain(err)
	}
	if err := features.HaveProgramType(ebpf.PerfEvent); err != nil {
		return nil, explain(err)
	}
	rings, err := newRingWaiter()
	if err != nil {
		return nil, err
	}
	s := &Set{opts: opts, members: map[int]*member{}, rings: rings}
	if opts.Wall {
		if err := features.HaveProgramType(ebpf.RawTracepoint); err != nil {
			rings.close()
			return nil, explain(err)
		}
		h, err := newSwitchHook()
		if err != nil {
			rings.close()
			return nil, explain(err)
		}
		s.hook = h
	}
	return s, nil
}

// Add attaches to pid, loads and starts its sampler, and returns its Ruby
// version; Run takes it in at its next wake-up.
func (s *Set) Add(pid int) (rubyVersion string, err error) {
	a, err := open(pid, s.opts.VM, Options{Frequency: int(math.Round(s.opts.Rate)), RingBytes: setRingBytes(s.opts.Rate), MaxStack: setMaxStack, switches: s.hook})
	if err != nil {
		return "", err
	}
	m := &member{attached: a, listed: time.Now()}
	if s.hook != nil {
		m.clock = newWallClock(s.opts.Rate)
	}
	m.newProfiles(s.opts.Rate)
	if err := m.s.Start(); err != nil {
		m.close()
		return "", fmt.Errorf("starting the BPF sampler: %w", err)
	}
	m.prof.Start = time.Now()
	if m.wall != nil {
		m.wall.Start = m.prof.Start
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		m.close() // its program would run on until rbscope exits
		return "", ErrEnded
	}
	s.added = append(s.added, m)
	return m.vm.Version, nil
}

// ErrEnded is returned by Add once Run is ending.
var ErrEnded = errors.New("the BPF sampler's set has stopped")

// Run samples until ctx is done, then hands every process's profile to
// FlushProcess as done and lets them go.
func (s *Set) Run(ctx context.Context) {
	defer context.AfterFunc(ctx, s.rings.interrupt)()
	lastCheck, lastFlush := time.Now(), time.Now()
	wait := setDrainEvery
	for {
		s.rings.wait(ctx, wait)
		if ctx.Err() != nil {
			s.takeAdded(true)
			for _, m := range s.members {
				s.safely(m, func() error {
					_ = m.s.Stop()
					if _, err := m.drain(); err != nil {
						return err
					}
					s.flush(m, true)
					return nil
				})
				s.drop(m)
			}
			if s.hook != nil {
				s.hook.close()
			}
			s.rings.close()
			return
		}
		s.takeAdded(false)
		check := time.Since(lastCheck) >= refreshEvery
		if check {
			lastCheck = time.Now()
		}
		flush := time.Since(lastFlush) >= s.opts.FlushEvery
		if flush {
			lastFlush = time.Now()
		}
		busy := false
		for _, m := range s.members {
			s.safely(m, func() error {
				n, err := s.visit(m, check, flush)
				busy = busy || n >= jitterSamples
				return err
			})
		}
		if wait = min(2*wait, setQuietEvery); busy {
			wait = setDrainEvery
		}
	}
}

// visit drains process m's ring into its profile and draws its clocks'
// next periods, and returns how many clock samples it drained; with
// check, it sees whether m has exited (then its profile is flushed as
// done and m let go) and lists its threads again when a new one ran or
// setListEvery has passed; with flush, it hands m's profile over.
func (s *Set) visit(m *member, check, flush bool) (int, error) {
	n, err := m.drain()
	if err != nil {
		return n, err
	}
	if check && m.live.Gone() {
		s.flush(m, true)
		s.drop(m)
		return n, nil
	}
	if err := m.s.Clocked(n); err != nil {
		return n, err
	}
	if check {
		// A list read as threads come and go can be torn: the next
		// check tries again.
		c, cerr := m.s.Counters()
		if cerr == nil && c.NoThread != m.noThread || time.Since(m.listed) >= setListEvery {
			if _, err := m.s.RefreshThreads(); err == nil {
				m.listed = time.Now()
				if cerr == nil {
					m.noThread = c.NoThread
				}
			}
		}
	}
	if flush {
		s.flush(m, false)
	}
	return n, nil
}

// drop lets process m go: its ring no longer wakes Run, its sampler is
// closed, and it leaves the set.
func (s *Set) drop(m *member) {
	if s.members[m.pid] != m {
		return // dropped already
	}
	s.rings.remove(m.s.ringFD())
	m.close()
	delete(s.members, m.pid)
}

// safely runs f on process m; an error or a panic (a bug) drops m, said
// through Failed, and the other processes go on.
func (s *Set) safely(m *member, f func() error) {
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("internal error sampling: %v", r)
			}
		}()
		return f()
	}()
	if err == nil {
		return
	}
	if s.opts.Failed != nil {
		s.opts.Failed(m.pid, err)
	}
	s.drop(m)
}

// takeAdded moves the processes Add attached into the loop's set; with
// end, it is the last time, and Add takes no more.
func (s *Set) takeAdded(end bool) {
	s.mu.Lock()
	added := s.added
	s.added = nil
	s.ended = s.ended || end
	s.mu.Unlock()
	for _, m := range added {
		if old := s.members[m.pid]; old != nil {
			s.drop(old) // its PID was another process's, gone since
		}
		// Should its ring not wake Run, it is drained on the clock alone
		// (setQuietEvery at most; setDrainEvery once busy).
		_ = s.rings.add(m.s.ringFD())
		s.members[m.pid] = m
	}
}

// flush hands m's profiles to FlushProcess, the CPU profile's ticks and
// errors those the program counted since the last flush, and starts new
// ones. The wall-clock profile takes the time its threads spent off a
// CPU up to now first (wallClock.settle); its ticks are its periods, as
// the user-space sampler's, and its errors the switch program's too.
func (s *Set) flush(m *member, done bool) {
	p, w := m.prof, m.wall
	p.Duration = time.Since(p.Start)
	if c, err := m.s.Counters(); err == nil {
		p.Ticks = int(c.Runs - m.counted.Runs)
		p.Errors = int(c.errors() - m.counted.errors())
		m.counted = c
	}
	if w != nil {
		if err := m.clock.settle(m.s, w, m.pid); err == nil {
			w.Duration = p.Duration
			w.Ticks = int(w.Duration.Seconds() * s.opts.Rate)
			w.Errors = p.Errors
			if c, err := m.s.SwitchCounters(); err == nil {
				w.Errors += int(c.errors() - m.switchCounted.errors())
				m.switchCounted = c
			}
		}
	}
	if s.opts.FlushProcess != nil {
		s.opts.FlushProcess(m.pid, p, w, done)
	}
	m.newProfiles(s.opts.Rate)
}

// newProfiles starts m's profiles anew.
func (m *member) newProfiles(rate float64) {
	m.prof = profile.NewProfile(rate)
	if m.clock != nil {
		m.wall = profile.NewProfile(rate)
		m.wall.Wall = true
		m.wall.Start = m.prof.Start
	}
}

// drain adds the samples in m's ring buffer to its profiles and returns
// how many the clock took: a process none of whose threads ran on a CPU
// keeps its clocks' phases (visit), however many times its threads
// left a CPU.
func (m *member) drain() (int, error) {
	return drainInto(m.s, profiles{cpu: m.prof, wall: m.wall, clock: m.clock}, m.pid)
}
