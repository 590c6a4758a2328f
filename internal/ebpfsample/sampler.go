// Package ebpfsample is an on-CPU sampler (record --ebpf, experimental)
// whose Ruby frame walk runs in the kernel: a BPF program, written with
// cilium/ebpf's asm package (no C compiler at build time), runs on a
// CPU-clock perf event of each CPU, and on a thread of the target reads
// the thread's execution context and control frames with the offsets of
// rbscope's Layout and sends each frame's (iseq, pc, ep), with a copy of
// the top of the value stack (the frames' environments), to a ring
// buffer. User space symbolizes the frames with internal/rubyvm, as the
// user-space sampler does.
//
// It was built to measure the floor of a sample's cost beside
// internal/sampler (bench/ebpf_test.go); it agreed with it on the stacks
// at a fraction of the cost, and record --ebpf (Recorder, record.go) now
// uses it, as an experiment. It needs CAP_BPF and CAP_PERFMON (root),
// rbscope in the host's PID namespace (the program sees the kernel's
// TIDs), and sees only threads the Go side listed (RefreshThreads). What
// a frame's decoding reads beyond the copied value stack (an environment
// moved to the heap, a block's enclosing environment deeper than the
// copy) is read when the sample is drained, not when it was taken.
//
// For wall-clock profiles (record --idle, agent --profile wall) a second
// program runs as a thread of the target leaves its CPU (sched_switch,
// switch.go): it walks the same way, and the thread's time off a CPU is
// counted under that stack (wall.go).
package ebpfsample

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
)

// Options say how the sampler samples.
type Options struct {
	// Frequency is the samples a second of each CPU's perf event (0: 99).
	Frequency int
	// MaxFrames bounds the control frames one sample copies, innermost
	// first (0: 128).
	MaxFrames int
	// MaxStack bounds the bytes of value stack one sample copies below
	// the innermost frame's sp, for the frames' environments (0: 16 KiB;
	// -1: none, the environments are read when the sample is decoded).
	MaxStack int
	// RingBytes is the ring buffer's size, a power of two times the page
	// size (0: 4 MiB).
	RingBytes int
	// switches, when set, also takes a switch sample (Sample.Switch) of
	// each thread of the target as it leaves its CPU, for wall-clock
	// profiles (wall.go).
	switches *switchHook
}

// Sample is one sample of a thread of the target.
type Sample struct {
	TID int
	// Frames are the Ruby frames, innermost first, as rubyvm reads them.
	Frames []rubyvm.Frame
	// Truncated says the stack had more control frames than MaxFrames:
	// the outermost were left out.
	Truncated bool
	// Unreadable counts the frames that could not be symbolized (they
	// stand in Frames as "??").
	Unreadable int
	// GC is what the collector was doing at the sample (the thread on
	// the CPU is then the one running it, if it holds the GVL).
	GC rubyvm.GCPhase
	// Time is when the sample was taken (the kernel's monotonic clock at
	// the perf event, on the wall clock's scale).
	Time time.Time
	// Switch says the sample was taken as the thread left its CPU (a
	// context switch) with another stack than at the last switch sample
	// of it, not on the clock; Off is then the thread's time off a CPU
	// since that sample, under its stack (zero when unknown: a sample
	// was lost).
	Switch bool
	Off    time.Duration
}

// Counters are what the BPF program counted, summed over the CPUs.
type Counters struct {
	Runs       uint64 // runs on a thread of the target
	Emitted    uint64 // samples sent to user space
	NoThread   uint64 // runs on a thread not in the threads map
	ECFault    uint64 // the execution context could not be read
	BadBounds  uint64 // cfp not inside the VM stack on a frame boundary
	FramesRead uint64 // the control frames could not be read
	RingFull   uint64 // the ring buffer was full
	Truncated  uint64 // samples cut at MaxFrames (the clock's program)
	// The switch program's: Same counts the switches whose stack was
	// the thread's last switch sample's (no sample sent), RunWall those
	// whose time off a CPU since the last was the time less the run's
	// wall time (not its CPU time: kernelOffsets).
	Same, RunWall uint64
}

// errors counts the runs whose stack could not be read or sent.
func (c Counters) errors() uint64 {
	return c.ECFault + c.BadBounds + c.FramesRead + c.RingFull
}

// Sampler is the BPF sampler of one Ruby process.
type Sampler struct {
	pid     int
	vm      *rubyvm.VM
	params  progParams
	threads *ebpf.Map
	scratch *ebpf.Map
	// counters holds the programs' counters, per CPU; counted is the
	// buffer they are read into.
	counters *ebpf.Map
	counted  []scratchCounters
	events   *ebpf.Map
	prog     *ebpf.Program
	perf     []int
	// switches and sprog take the switch samples (Options.switches);
	// switching says sprog runs.
	switches  *switchHook
	sprog     *ebpf.Program
	switching bool
	// freq is the perf events' mean rate (Options.Frequency);
	// sinceDraw the clock samples since their periods were last drawn
	// (Clocked).
	freq      int
	sinceDraw int
	reader    *ringbuf.Reader
	rec       ringbuf.Record
	// decoded caches decoded frames by iseq, pc, ep and environment words
	decoded map[[6]uint64]decodedFrame
	// decodedHeap caches the frames whose environment was not in the
	// value stack copy, until RefreshThreads
	decodedHeap map[[6]uint64]decodedFrame
	frames      []rubyvm.Frame
	// rubyThreads are the Ruby threads the last RefreshThreads listed,
	// by the TID the program sees (their frames left out).
	rubyThreads map[int]rubyvm.Thread
	// wallAt and monoAt are one instant on the wall clock and on the
	// kernel's monotonic clock, which the program's times are read on.
	wallAt time.Time
	monoAt int64
}

type decodedFrame struct {
	f   rubyvm.Frame
	ok  bool
	err error
}

// maxDecoded bounds the cache of decoded frames.
const maxDecoded = 1 << 16

// New loads the sampler's BPF program for the Ruby process vm reads (pid)
// and lists its threads; Start starts sampling.
func New(pid int, vm *rubyvm.VM, opts Options) (*Sampler, error) {
	if opts.Frequency <= 0 {
		opts.Frequency = 99
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = 128
	}
	if opts.MaxStack == 0 {
		opts.MaxStack = 16 << 10
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 4 << 20
	}
	// The collector's phase, where the layout has it (the census's).
	gcFlags, gcFlagsLen, err := vm.GCFlags()
	if err != nil {
		gcFlags, gcFlagsLen = 0, 0
	}
	params, err := newProgParams(pid, vm.Layout, opts.MaxFrames, int64(opts.MaxStack), opts.RingBytes, gcFlags, gcFlagsLen)
	if err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// to the cgroup, and ignore it. (Not cilium/ebpf's rlimit package,
	// whose init creates a BPF map at every start of rbscope, whatever the
	// command, to find out which.)
	_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	s := &Sampler{pid: pid, vm: vm, params: params, switches: opts.switches, decoded: map[[6]uint64]decodedFrame{}, decodedHeap: map[[6]uint64]decodedFrame{}, rubyThreads: map[int]rubyvm.Thread{}}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, fmt.Errorf("reading the monotonic clock: %w", err)
	}
	s.wallAt, s.monoAt = time.Now(), ts.Nano()
	if err := s.load(opts); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := s.RefreshThreads(); err != nil {
		s.Close()
		return nil, err
	}
	s.freq = opts.Frequency
	if err := s.attach(opts.Frequency); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sampler) load(opts Options) error {
	var err error
	if s.threads, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_threads", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1 << 14}); err != nil {
		return fmt.Errorf("threads map: %w", err)
	}
	if s.scratch, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_scratch", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(s.params.scratchSize()), MaxEntries: 1}); err != nil {
		return fmt.Errorf("scratch map: %w", err)
	}
	if s.counters, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_counters", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: countersSize, MaxEntries: 1}); err != nil {
		return fmt.Errorf("counters map: %w", err)
	}
	if s.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_events", Type: ebpf.RingBuf, MaxEntries: uint32(opts.RingBytes)}); err != nil {
		return fmt.Errorf("ring buffer: %w", err)
	}
	fds := programFDs{threads: s.threads.FD(), scratch: s.scratch.FD(), counters: s.counters.FD(), events: s.events.FD()}
	s.prog, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "rbs_sample",
		Type:         ebpf.PerfEvent,
		License:      "GPL",
		Instructions: program(s.params, fds, false),
	}, ebpf.ProgramOptions{LogSizeStart: 1 << 20})
	if err != nil {
		return fmt.Errorf("loading the program: %w", verifierLog(err))
	}
	if s.switches != nil {
		fds.walls = s.switches.walls.FD()
		s.params.kern = s.switches.kern
		s.sprog, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
			Name:         "rbs_switched",
			Type:         ebpf.RawTracepoint,
			License:      "GPL",
			Instructions: program(s.params, fds, true),
		}, ebpf.ProgramOptions{LogSizeStart: 1 << 20})
		if err != nil {
			return fmt.Errorf("loading the switch program: %w", verifierLog(err))
		}
	}
	if s.reader, err = ringbuf.NewReader(s.events); err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	return nil
}

// attach opens a CPU-clock perf event on each CPU, disabled, with the
// program attached; Start enables them. The clock fires every period
// (nanoseconds, which Clocked redraws), not at a frequency the kernel
// would keep by itself.
func (s *Sampler) attach(freq int) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("counting CPUs: %w", err)
	}
	for cpu := 0; cpu < ncpu; cpu++ {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Sample: uint64(time.Second) / uint64(freq),
			Bits:   unix.PerfBitDisabled,
		}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if errors.Is(err, unix.ENODEV) {
			continue // a possible CPU not online
		}
		if err != nil {
			return fmt.Errorf("perf event on CPU %d: %w", cpu, err)
		}
		s.perf = append(s.perf, fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, s.prog.FD()); err != nil {
			return fmt.Errorf("attaching to the perf event of CPU %d: %w", cpu, err)
		}
	}
	if len(s.perf) == 0 {
		return errors.New("no CPU to sample")
	}
	return nil
}

// Start enables the perf events, and the switch samples.
func (s *Sampler) Start() error {
	for _, fd := range s.perf {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enabling a perf event: %w", err)
		}
	}
	if s.sprog != nil && !s.switching {
		if err := s.switches.add(s.pid, s.sprog); err != nil {
			return err
		}
		s.switching = true
	}
	return nil
}

// jitterSamples is how many clock samples a Sampler takes between two
// draws of its clocks' periods (Clocked).
const jitterSamples = 10

// Clocked notes n more clock samples of the target and, once
// jitterSamples have come since the last draw, gives each CPU's perf
// event a period drawn at random, that of a rate drawn evenly from 0.75
// to 1.25 times Options.Frequency (so the mean rate is the one asked
// for), and restarts its clock from now. A clock of a fixed period can
// lock onto a program's loop that lasts about a whole number of periods,
// and then samples only some of its parts: at 1000 Hz beside two
// spinners, split.rb's chain_b had 36.6% of the samples for the 30.2% of
// its CPU the program measured, chain_c 12.8% for 20.0%. A new period
// every few samples spreads the instants over the loop, as the
// user-space sampler does by drawing each tick at a random point of its
// period. The count, not the time, paces the draws: a draw is a system
// call a CPU, each an interrupt of that CPU, and a process that mostly
// waits (most of a fleet) has few samples to spread, so it costs a
// draw a second or two rather than one at each drain.
func (s *Sampler) Clocked(n int) error {
	s.sinceDraw += n
	if s.sinceDraw < jitterSamples {
		return nil
	}
	s.sinceDraw = 0
	for _, fd := range s.perf {
		period := uint64(float64(time.Second) / (float64(s.freq) * (0.75 + 0.5*rand.Float64())))
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_PERIOD, uintptr(unsafe.Pointer(&period))); e != 0 {
			return fmt.Errorf("setting a perf event's period: %w", e)
		}
	}
	return nil
}

// Stop disables the perf events; Drain still reads what was sampled.
func (s *Sampler) Stop() error {
	var errs []error
	for _, fd := range s.perf {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
			errs = append(errs, fmt.Errorf("disabling a perf event: %w", err))
		}
	}
	if s.switching {
		s.switches.remove(s.pid)
		s.switching = false
	}
	return errors.Join(errs...)
}

// RefreshThreads lists the target's Ruby threads and gives the program
// the address of each one's ec field, by TID; it returns how many. It
// also forgets the decoded frames whose environments were on the heap.
func (s *Sampler) RefreshThreads() (int, error) {
	clear(s.decodedHeap)
	ths, err := s.vm.ReadThreads(nil)
	if err != nil {
		return 0, fmt.Errorf("listing threads: %w", err)
	}
	seen := map[uint32]bool{}
	clear(s.rubyThreads)
	for _, th := range ths {
		if th.TID <= 0 || th.Error != "" {
			continue
		}
		th.TID = stacks.KernelTID(s.pid, th, func(tid int) bool { return !procfs.TaskExited(s.pid, tid) })
		tid := uint32(th.TID)
		seen[tid] = true
		th.Frames = nil
		s.rubyThreads[th.TID] = th
		ec := th.Addr + uint64(s.vm.Layout.ThreadEC)
		if err := s.threads.Put(tid, ec); err != nil {
			return 0, fmt.Errorf("threads map: %w", err)
		}
		if s.switches != nil {
			if err := s.switches.listed(s.pid, tid, ec); err != nil {
				return 0, err
			}
		}
	}
	var tid uint32
	var addr uint64
	var gone []uint32
	it := s.threads.Iterate()
	for it.Next(&tid, &addr) {
		if !seen[tid] {
			gone = append(gone, tid)
		}
	}
	for _, tid := range gone {
		_ = s.threads.Delete(tid)
		if s.switches != nil {
			_ = s.switches.walls.Delete(tid)
		}
	}
	return len(seen), nil
}

// ringFD is the ring buffer map's file descriptor, which polls readable
// when the program wakes its reader.
func (s *Sampler) ringFD() int { return s.events.FD() }

// Drain reads the samples in the ring buffer, without waiting, and calls
// fn with each (its Frames are reused by the next call); it returns how
// many it read.
func (s *Sampler) Drain(fn func(*Sample)) (int, error) {
	n := 0
	if s.reader.AvailableBytes() == 0 {
		return n, nil // no system call for an empty ring
	}
	s.reader.SetDeadline(time.Now())
	for {
		err := s.reader.ReadInto(&s.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading the ring buffer: %w", err)
		}
		smp, err := s.decode(s.rec.RawSample)
		if err != nil {
			return n, err
		}
		n++
		if fn != nil {
			fn(smp)
		}
	}
}

// decode symbolizes one record: a header (TID, frames copied, frames in
// all, truncated, where the value stack copy starts and its bytes, the
// collector's flags, the time), an (iseq, pc, ep) triple a frame,
// innermost first, and the value stack copy.
func (s *Sampler) decode(b []byte) (*Sample, error) {
	if len(b) < headerSize {
		return nil, fmt.Errorf("a record of %d bytes: %w", len(b), io.ErrUnexpectedEOF)
	}
	le := binary.LittleEndian
	smp := &Sample{TID: int(le.Uint32(b)), Truncated: le.Uint32(b[12:]) != 0}
	smp.Time = s.wallTime(le.Uint64(b[timeOff:]))
	if le.Uint32(b[flagsOff:])&flagSwitch != 0 {
		smp.Switch, smp.Off = true, time.Duration(le.Uint64(b[offOff:]))
	}
	if s.params.gcFlagsLen > 0 {
		smp.GC = s.vm.GCPhaseFrom(b[gcFlagsOff : gcFlagsOff+s.params.gcFlagsLen])
	}
	n := int(le.Uint32(b[4:]))
	stackBase, stackLen := le.Uint64(b[16:]), int(le.Uint32(b[24:]))
	if len(b) < headerSize+n*tripleSize+stackLen {
		return nil, fmt.Errorf("a record of %d bytes for %d frames and %d bytes of stack: %w", len(b), n, stackLen, io.ErrUnexpectedEOF)
	}
	stack := b[headerSize+n*tripleSize : headerSize+n*tripleSize+stackLen]
	// The outermost control frame is the VM's dummy top frame, which
	// Ruby's backtraces (and rubyvm) leave out.
	last := n - 1
	if smp.Truncated {
		last = n
	}
	s.frames = s.frames[:0]
	for i := 0; i < last; i++ {
		t := b[headerSize+i*tripleSize:]
		iseq, pc, ep := le.Uint64(t), le.Uint64(t[8:]), le.Uint64(t[16:])
		// A frame decodes the same while its iseq, pc, place and
		// environment words (its method entry) are the same. One whose
		// environment is not in the copy (moved to the heap: <main>'s
		// once a block captured it) is kept until the threads are listed
		// again, as its environment's address could be reused.
		env, inStack := s.vm.EnvWords(ep, stackBase, stack)
		key := [6]uint64{iseq, pc, ep, env[0], env[1], env[2]}
		cache := s.decoded
		if !inStack && ep != 0 {
			cache = s.decodedHeap
		}
		d, cached := cache[key]
		if !cached {
			d.f, d.ok, d.err = s.vm.DecodeControlFrame(iseq, pc, ep, stackBase, stack)
			// The method entry of a define_method frame may have been
			// made for that one call (Sinatra binds each route's method
			// anew for each request) and be freed, its memory reused,
			// by the time the record is decoded: its name is not taken
			// from here (no Sinatra route labels from this sampler).
			d.f.Method = ""
			if d.err == nil {
				if len(cache) >= maxDecoded {
					clear(cache)
				}
				cache[key] = d
			}
		}
		switch {
		case d.err != nil && s.vm.MayBeHalfPushed(i):
			// A frame the VM was still writing: the thread is in its
			// caller.
		case d.err != nil:
			smp.Unreadable++
			s.frames = append(s.frames, rubyvm.Frame{Kind: rubyvm.KindUnreadable, Label: "??"})
		case d.ok:
			s.frames = append(s.frames, d.f)
		}
	}
	smp.Frames = s.frames
	return smp, nil
}

// wallTime is the instant mono (the kernel's monotonic clock, in
// nanoseconds) on the wall clock's scale.
func (s *Sampler) wallTime(mono uint64) time.Time {
	return s.wallAt.Add(time.Duration(int64(mono) - s.monoAt))
}

// scratchCounters is a CPU's counters value: the clock's program's
// counters, then the switch program's.
type scratchCounters [2 * numCounters]uint64

// UnmarshalBinary reads the counters from a counters value.
func (c *scratchCounters) UnmarshalBinary(b []byte) error {
	if len(b) < countersSize {
		return io.ErrUnexpectedEOF
	}
	for i := range c {
		c[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return nil
}

// Counters sums the program's counters over the CPUs.
func (s *Sampler) Counters() (Counters, error) {
	sum, err := s.sumCounters()
	if err != nil {
		return Counters{}, err
	}
	return countersAt(sum[:numCounters]), nil
}

// SwitchCounters sums the switch program's counters over the CPUs: Runs
// are its runs on a thread of the target (a thread leaving its CPU).
func (s *Sampler) SwitchCounters() (Counters, error) {
	sum, err := s.sumCounters()
	if err != nil {
		return Counters{}, err
	}
	return countersAt(sum[numCounters:]), nil
}

// sumCounters sums the counters (the clock program's, then the switch
// program's) over the CPUs.
func (s *Sampler) sumCounters() (scratchCounters, error) {
	var sum scratchCounters
	if s.counted == nil {
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			return sum, fmt.Errorf("counting CPUs: %w", err)
		}
		s.counted = make([]scratchCounters, ncpu)
	}
	if err := s.counters.Lookup(uint32(0), s.counted); err != nil {
		return sum, fmt.Errorf("reading the counters: %w", err)
	}
	for _, v := range s.counted {
		for i := range sum {
			sum[i] += v[i]
		}
	}
	return sum, nil
}

// countersAt names one program's counters.
func countersAt(c []uint64) Counters {
	return Counters{
		Runs: c[cntRuns], Emitted: c[cntEmitted], NoThread: c[cntNoThread],
		ECFault: c[cntECFault], BadBounds: c[cntBadBounds], FramesRead: c[cntFramesRead],
		RingFull: c[cntRingFull], Truncated: c[cntTruncated],
		Same: c[cntSame], RunWall: c[cntRunWall],
	}
}

// Stats returns the kernel's run count and run time of the program, over
// every CPU and every run (the target's threads or not); they count only
// while EnableStats is in force.
func (s *Sampler) Stats() (*ebpf.ProgramStats, error) {
	st, err := s.prog.Stats()
	if err != nil {
		return nil, fmt.Errorf("program stats: %w", err)
	}
	return st, nil
}

// EnableStats makes the kernel count BPF programs' runs and run time until
// the returned Closer is closed.
func EnableStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time stats: %w", err)
	}
	return c, nil
}

// Close detaches and unloads the programs.
func (s *Sampler) Close() error {
	var errs []error
	for _, fd := range s.perf {
		errs = append(errs, unix.Close(fd))
	}
	s.perf = nil
	if s.switches != nil {
		if s.switching {
			s.switches.remove(s.pid)
			s.switching = false
		}
		if s.threads != nil {
			var tid uint32
			var addr uint64
			var tids []uint32
			for it := s.threads.Iterate(); it.Next(&tid, &addr); {
				tids = append(tids, tid)
			}
			for _, tid := range tids {
				_ = s.switches.walls.Delete(tid)
			}
		}
		if s.sprog != nil {
			errs = append(errs, s.sprog.Close())
			s.sprog = nil
		}
	}
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	for _, c := range []io.Closer{s.prog, s.events, s.counters, s.scratch, s.threads} {
		if c != nil && !isNilCloser(c) {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func isNilCloser(c io.Closer) bool {
	switch c := c.(type) {
	case *ebpf.Program:
		return c == nil
	case *ebpf.Map:
		return c == nil
	}
	return false
}
