package target

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/realtime"
)

// Live is a running process read through process_vm_readv (or /proc/PID/mem
// where that system call is missing) and paused with ptrace.
type Live struct {
	pid    int
	memFD  *os.File // /proc/PID/mem, opened on first need before Attach pinned id.mem
	useMem bool     // process_vm_readv is unavailable
	// syscallAt is a syscall instruction in the process's code, once found.
	syscallAt uint64
	// id pins the process (see CheckSame).
	id identity
	// ns maps the thread IDs of a process in a PID namespace of its own
	// (see LocalTID).
	ns nsTIDs

	// batchMu guards batchBuf, ReadBatch's buffer of coalesced ranges.
	batchMu  sync.Mutex
	batchBuf []byte

	mu     sync.Mutex
	tracer *tracer
	paused map[int]int // seized TID -> signal to deliver on detach
	// exited are seized threads seen to exit, to hand back on detach
	// (releaseExited); ownChild is set when the process is rbscope's own
	// child (a command it launched), whose exit rbscope waits for itself.
	exited   []int
	ownChild bool
	// session is the stopped-target session running now, if any (set and
	// read on the tracer thread): Registers asks it.
	session *Stopped

	// StopTimeout bounds how long WhilePaused waits for one thread to stop.
	StopTimeout time.Duration
	// NoSignalGuard keeps this target's sessions out of HoldsStopped: a
	// SIGINT, SIGTERM or SIGHUP while its threads stand still does not make
	// rbscope exit at once, for callers that end on those signals
	// themselves between their short sessions.
	NoSignalGuard bool
}

// Attach opens the live process pid for reading. It checks that the process
// exists and that its memory can be read, and explains a refusal.
func Attach(pid int) (*Live, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if procfs.Exited(pid) {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	l := &Live{pid: pid, paused: map[int]int{}, StopTimeout: 2 * time.Second, ownChild: parentOf(pid) == os.Getpid()}
	maps, err := l.Mappings()
	if err != nil {
		return nil, err
	}
	// Probe one readable mapping so that a permission problem shows now,
	// with advice, rather than as a failed read deep inside a walker.
	for _, m := range maps {
		if !strings.HasPrefix(m.Perms, "r") || m.Path == "[vvar]" || m.Path == "[vsyscall]" {
			continue
		}
		var b [8]byte
		if _, err := l.ReadAt(b[:], m.Start); err != nil {
			if errors.Is(err, ErrPermission) {
				l.closeFiles()
				return nil, PermissionError(pid)
			}
			if errors.Is(err, ErrExited) {
				l.closeFiles()
				return nil, fmt.Errorf("pid %d: %w", pid, ErrExited)
			}
			continue
		}
		break
	}
	if err := l.pin(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// PermissionError explains why reading pid was refused and what to run,
// ending with the page of the documentation that explains it.
func PermissionError(pid int) error {
	advice := "run rbscope as root or grant it CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep rbscope)"
	see := DocPermissions
	switch {
	case os.Geteuid() == 0 && !HasCapability(unix.CAP_SYS_PTRACE):
		advice = "rbscope runs as root but without CAP_SYS_PTRACE (a container drops it by default): grant it to rbscope's container (docker run --cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add: [\"SYS_PTRACE\"])"
		see = DocContainers
	case os.Geteuid() == 0:
		advice = "even root was refused: the process may be in another user namespace or a security module (AppArmor, SELinux, seccomp) forbids ptrace; run rbscope inside the process's container or grant it CAP_SYS_PTRACE there"
		see = DocContainers
	}
	if scope, ok := procfs.PtraceScope(); ok {
		switch scope {
		case 1:
			if os.Geteuid() != 0 {
				advice = "kernel.yama.ptrace_scope=1 allows only parents to trace: run rbscope as root, grant CAP_SYS_PTRACE, or set sysctl kernel.yama.ptrace_scope=0"
				see = DocPtraceScope
			}
		case 2:
			advice = "kernel.yama.ptrace_scope=2 allows tracing only with CAP_SYS_PTRACE: run rbscope as root or grant it CAP_SYS_PTRACE"
			see = DocPtraceScope
		case 3:
			advice = "kernel.yama.ptrace_scope=3 forbids all tracing until reboot; nothing can read this process"
			see = DocPtraceScope
		}
	}
	return fmt.Errorf("pid %d: %w: %s (see %s)", pid, ErrPermission, advice, see)
}

// The pages of rbscope's documentation that permission errors name, as
// paths in its repository (and under /usr/share/doc/rbscope in its
// packages).
const (
	DocPermissions = "docs/security.md#permissions"
	DocPtraceScope = "docs/security.md#ptrace_scope"
	DocContainers  = "docs/guides/containers-kubernetes.md"
)

// HasCapability reports whether rbscope holds capability c (a CAP_*
// number) in its effective set, as /proc/self/status says; true when that
// cannot be read (the kernel then decides alone).
func HasCapability(c int) bool {
	st, err := procfs.ReadStatus(os.Getpid(), 0)
	return err != nil || c < 0 || c > 63 || st.CapEff&(1<<uint(c)) != 0
}

// PID implements Target.
func (l *Live) PID() int { return l.pid }

// ReadAt implements Target.
func (l *Live) ReadAt(p []byte, addr uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !l.useMem {
		local := [1]unix.Iovec{{Base: &p[0]}}
		local[0].SetLen(len(p))
		remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
		n, err := rawProcessVMReadv(l.pid, local[:], remote[:])
		switch {
		case err == nil && n == len(p):
			return n, nil
		case err == nil:
			return n, fmt.Errorf("read at %#x: %d of %d bytes mapped", addr, n, len(p))
		case errors.Is(err, unix.ENOSYS):
			l.useMem = true
		case errors.Is(err, unix.EPERM):
			return 0, ErrPermission
		case errors.Is(err, unix.ESRCH):
			return 0, ErrExited
		default:
			return 0, fmt.Errorf("read at %#x: %w", addr, err)
		}
	}
	mem := l.id.mem // pinned at Attach: the address space attached to
	if mem == nil {
		if l.memFD == nil {
			f, err := os.Open(fmt.Sprintf("/proc/%d/mem", l.pid))
			if err != nil {
				if errors.Is(err, os.ErrPermission) {
					return 0, ErrPermission
				}
				return 0, ErrExited
			}
			l.memFD = f
		}
		mem = l.memFD
	}
	n, err := mem.ReadAt(p, int64(addr))
	if err != nil {
		return n, fmt.Errorf("read at %#x: %w", addr, err)
	}
	return n, nil
}

// Mappings implements Target by parsing /proc/PID/maps.
func (l *Live) Mappings() ([]Mapping, error) {
	maps, err := procfs.ReadMaps(l.pid)
	if errors.Is(err, os.ErrPermission) {
		return nil, PermissionError(l.pid)
	}
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return nil, fmt.Errorf("pid %d: %w", l.pid, ErrExited)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d maps: %w", l.pid, err)
	}
	if len(maps) == 0 {
		return nil, fmt.Errorf("pid %d: %w", l.pid, ErrExited)
	}
	return maps, nil
}

// Threads implements Target by listing /proc/PID/task.
func (l *Live) Threads() ([]int, error) {
	tids, err := procfs.Tasks(l.pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", l.pid, ErrExited)
	}
	return tids, nil
}

// Open implements Target: paths resolve inside the process's root directory
// (symlinks too, absolute ones included), and only a regular file that
// root owns and alone may write is opened (see OpenInRoot and RootOwned):
// rbscope opens such paths to find separate debug information, whose
// names come from the target's files, and must not read one the target's
// user planted (forged DWARF, or a sparse file that claims a gigabyte).
func (l *Live) Open(path string) (*os.File, error) {
	f, err := OpenInRoot(fmt.Sprintf("/proc/%d/root", l.pid), path, true)
	if err != nil {
		return nil, err
	}
	return RootOwned(f)
}

// Registers implements Target: the registers of a thread that stands
// still in the session running now (WhilePaused), read on the goroutine
// that runs the session's function; any other is ErrNoRegisters.
func (l *Live) Registers(tid int) (Regs, error) {
	if s := l.session; s != nil {
		return s.Registers(tid)
	}
	return Regs{}, fmt.Errorf("tid %d: the process is not paused: %w", tid, ErrNoRegisters)
}

// Exe returns the path of the process's executable, as the process sees it.
func (l *Live) Exe() string {
	return procfs.Exe(l.pid)
}

// Comm returns the process's command name.
func (l *Live) Comm() string {
	return strings.TrimSpace(procfs.Comm(l.pid, 0))
}

// startTracing, with l.mu held, starts the tracer thread if it is not
// running yet, and records that l may hold threads stopped (see
// HoldsStopped and Stop).
func (l *Live) startTracing() {
	if l.tracer == nil {
		l.tracer = newTracer()
	}
	registerPaused(l)
}

// SetTracerRealtime moves the tracer thread, the one that stops the
// threads (WhilePaused), to real-time scheduling (package realtime), or
// back with on false. A sampler that is real-time itself then waits for no
// thread of the normal class to be scheduled between its instant and the
// stop. It starts the tracer thread if it is not running yet.
func (l *Live) SetTracerRealtime(on bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.startTracing()
	t := l.tracer
	return t.do(func() error {
		if on == (t.rt != nil) {
			return nil
		}
		if !on {
			err := t.rt.Leave()
			t.rt = nil
			return err
		}
		th, err := realtime.Enter()
		t.rt = th
		return err
	})
}

// WhilePaused is the one way rbscope stops a target: it stops the given
// threads (every thread when tids is nil; threads born meanwhile are caught
// by listing them again until no new one appears; threads that have ended
// are skipped) with PTRACE_SEIZE and PTRACE_INTERRUPT, calls do with the
// stopped session, and lets them all go, in one turn of the tracer thread.
// do runs on that thread, so no hand-over between goroutines or OS threads
// falls inside the time the threads stand still, and what it does through
// the Stopped (reads, writes, injected system calls and calls) needs no
// lock. The threads are let go whatever do returns, and if it panics (the
// panic comes back as an error). While they stand still, SIGINT, SIGTERM
// and SIGHUP make rbscope exit (HoldsStopped), and the kernel lets them go;
// SIGTSTP (Ctrl-Z) waits until they run again (Stop). If rbscope dies
// anyway, the kernel lets them go too. It returns the error of the stop,
// else do's.
func (l *Live) WhilePaused(tids []int, do func(*Stopped) error) error {
	return l.WhilePausedPicked(func() []int { return tids }, do)
}

// WhilePausedPicked is WhilePaused with the threads to stop picked by pick,
// on the tracer thread right before they stop: what pick looks at (which
// threads are on a CPU) is then as fresh as it can be when the stop lands.
// When pick returns an empty, non-nil list, nothing stops and do is called
// with no thread stopped.
func (l *Live) WhilePausedPicked(pick func() []int, do func(*Stopped) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.startTracing()
	var doErr error
	err := l.tracer.do(func() error {
		defer l.detachLocked()
		tids := pick()
		if tids != nil && len(tids) == 0 {
			s := &Stopped{l: l, Threads: map[int]bool{}}
			defer func() { s.ended = true }()
			doErr = do(s)
			return nil
		}
		if err := l.pauseLocked(tids); err != nil {
			return err
		}
		s := &Stopped{l: l, Threads: make(map[int]bool, len(l.paused))}
		defer func() { s.ended = true; l.session = nil }()
		for tid := range l.paused {
			s.Threads[tid] = true
		}
		l.session = s
		doErr = do(s)
		return nil
	})
	unregisterPaused(l)
	if err != nil {
		return err
	}
	return doErr
}

// pauseLocked runs on the tracer thread. With only nil it stops every
// thread, listing them again until no new one appears.
func (l *Live) pauseLocked(only []int) error {
	for round := 0; round < 50; round++ {
		tids := only
		if tids == nil {
			var err error
			if tids, err = l.Threads(); err != nil {
				return err
			}
		}
		var fresh []int
		for _, tid := range tids {
			if _, ok := l.paused[tid]; ok {
				continue
			}
			// Thread IDs the caller names may come from the target's memory
			// (a Ruby thread's native ID): one that is no thread of this
			// process is never stopped, whatever process it names.
			if only != nil && !l.hasThread(tid) {
				continue
			}
			if err := unix.PtraceSeize(tid); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread ended meanwhile
				}
				if errors.Is(err, unix.EPERM) {
					return PermissionError(l.pid)
				}
				return fmt.Errorf("ptrace seize tid %d: %w", tid, err)
			}
			l.paused[tid] = 0
			if only != nil && !l.hasThread(tid) {
				// It ended and its ID went to another process between the
				// check and the seize (a seized thread's ID is not reused
				// until rbscope lets it go): stop it only to let it go.
				_ = unix.PtraceInterrupt(tid)
				err := l.waitStop(tid)
				_, _, _ = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(l.paused[tid]), 0, 0)
				delete(l.paused, tid)
				if err != nil {
					return err
				}
				continue
			}
			if err := unix.PtraceInterrupt(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("ptrace interrupt tid %d: %w", tid, err)
			}
			fresh = append(fresh, tid)
		}
		if len(fresh) == 0 {
			if len(l.paused) == 0 && only == nil {
				return fmt.Errorf("pid %d: %w", l.pid, ErrExited)
			}
			return nil
		}
		for _, tid := range fresh {
			if err := l.waitStop(tid); err != nil {
				return err
			}
		}
		if only != nil {
			return nil
		}
	}
	return fmt.Errorf("pid %d keeps creating threads; could not pause it", l.pid)
}

// hasThread tells whether tid is a thread of l's process.
func (l *Live) hasThread(tid int) bool {
	return procfs.HasTask(l.pid, tid)
}

// waitStop waits, bounded by StopTimeout, for tid to enter a ptrace stop.
// Every microsecond of the wait is time the target stands still. A thread
// on another CPU stops within microseconds of the interrupt, so waitStop
// first polls without pausing (stopSpin); but a thread that shares rbscope's
// CPU (two cores, or a busy machine) gets to its stop only once rbscope
// gives the CPU up, so it then polls every few microseconds, sleeping in
// between (stopPoll), for the first milliseconds, and then backs off. An
// exit is only peeked at (WNOWAIT), never reaped: the process's parent,
// which may be rbscope itself in launch mode, must still see it.
func (l *Live) waitStop(tid int) error {
	start := time.Now()
	delay := 20 * time.Microsecond
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, tid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD) || errors.Is(err, unix.ESRCH):
			delete(l.paused, tid)
			return nil
		case err != nil:
			return fmt.Errorf("wait for tid %d: %w", tid, err)
		}
		if info.Signo != 0 { // something to report
			code := info.Code
			if code == cldExited || code == cldKilled || code == cldDumped {
				delete(l.paused, tid) // ended: its zombie goes back to its parent on detach
				l.exited = append(l.exited, tid)
				return nil
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(tid, &ws, unix.WNOHANG|unix.WALL, nil); err == nil && ws.Stopped() {
				sig := ws.StopSignal()
				// A stop for the interrupt (event stop) carries SIGTRAP and a
				// non-zero event, or a group-stop signal; a signal-delivery
				// stop carries a signal we must hand back on detach.
				if ws.TrapCause() <= 0 && sig != unix.SIGTRAP && sig != unix.SIGSTOP {
					l.paused[tid] = int(sig)
				}
				return nil
			}
			continue
		}
		waited := time.Since(start)
		if waited > l.StopTimeout {
			return fmt.Errorf("thread %d of pid %d did not stop within %v (uninterruptible sleep?)", tid, l.pid, l.StopTimeout)
		}
		if waited < stopSpin {
			continue // on another CPU, the thread stops about now
		}
		if waited < 5*time.Millisecond {
			// On the tracer's own OS thread, whose timer slack is 1µs
			// (newTracer): a real sleep of about this long.
			_ = unix.Nanosleep(&unix.Timespec{Nsec: int64(stopPoll)}, nil)
			continue
		}
		if l.deadTask(tid) {
			// A process's leader killed while seized: its exit is not
			// reported while its other threads wait to be handed back.
			delete(l.paused, tid)
			l.exited = append(l.exited, tid)
			return nil
		}
		time.Sleep(delay)
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// waitStop's polling: without pause for stopSpin (measured on a 2-vCPU VM:
// the stop is seen about 8µs after the interrupt, against 48µs when
// sleeping between polls), then a sleep of stopPoll between polls.
const (
	stopSpin = 50 * time.Microsecond
	stopPoll = 5 * time.Microsecond
)

// si_code values of SIGCHLD (asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// detachLocked runs on the tracer thread and lets every seized thread go,
// and hands those that exited meanwhile back to their process's parent.
func (l *Live) detachLocked() {
	for tid, sig := range l.paused {
		_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sig), 0, 0)
		if errno == unix.ESRCH {
			l.exited = append(l.exited, tid) // killed while seized (SIGKILL ends even a stopped thread)
		}
		delete(l.paused, tid)
	}
	if len(l.exited) == 0 {
		return
	}
	// The leader's exit is reported only once its other threads are gone.
	slices.SortFunc(l.exited, func(a, b int) int { return cmp.Compare(boolInt(a == l.pid), boolInt(b == l.pid)) })
	for _, tid := range l.exited {
		l.releaseExited(tid)
	}
	l.exited = l.exited[:0]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// releaseTimeout bounds how long detachLocked waits for a thread killed
// while seized to finish exiting.
const releaseTimeout = time.Second

// releaseExited hands back a seized thread that has exited. A traced
// thread's exit is reported to its tracer first, and its process's parent
// is told only once the tracer has waited for it: until then a server's
// master would not see its killed worker end, and fork no other. The
// tracer's wait reaps nothing that is not its own child: a process's
// leader goes back to its parent, a zombie as before, for the parent's own
// wait. Only the leader of a command rbscope launched, its own child, is
// left for rbscope's wait for it (which takes it once it is no longer
// traced).
func (l *Live) releaseExited(tid int) {
	if tid == l.pid && l.ownChild {
		return
	}
	deadline := time.Now().Add(releaseTimeout)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, tid, &info, unix.WEXITED|unix.WNOHANG|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || info.Signo != 0:
			return // handed back, or no longer traced by rbscope
		case time.Now().After(deadline):
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// deadTask reports whether thread tid of l's process has exited (a zombie,
// or gone).
func (l *Live) deadTask(tid int) bool { return procfs.TaskExited(l.pid, tid) }

// parentOf returns the parent process ID of pid (0 if unknown).
func parentOf(pid int) int {
	st, err := procfs.ReadStat(pid, 0)
	if err != nil {
		return 0
	}
	return st.PPID
}

// resume lets go every thread still stopped (none, outside WhilePaused).
func (l *Live) resume() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tracer != nil && len(l.paused) > 0 {
		l.tracer.do(func() error { l.detachLocked(); return nil })
	}
	unregisterPaused(l)
	return nil
}

// Close implements Target.
func (l *Live) Close() error {
	err := l.resume()
	l.mu.Lock()
	if l.tracer != nil {
		l.tracer.stop()
		l.tracer = nil
	}
	l.mu.Unlock()
	l.closeFiles()
	return err
}

// closeFiles closes the files l holds open on its process.
func (l *Live) closeFiles() {
	if l.memFD != nil {
		l.memFD.Close()
		l.memFD = nil
	}
	l.unpin()
}

// CPUClock counts the time one thread spends on a CPU, with a perf
// task-clock counter: a reading is exact even while the thread runs (the
// kernel brings the count up to date on the thread's CPU). When two
// readings are equal, the thread did not run in between, so memory read in
// between is what it would have been with the thread stopped.
type CPUClock struct{ fd int }

// CPUClock opens a CPU-time counter for thread tid. It fails where perf
// events are not allowed (perf_event_paranoid, seccomp, some containers).
func (l *Live) CPUClock(tid int) (*CPUClock, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_TASK_CLOCK,
		// Excluding the kernel asks for the least privilege (a task clock
		// counts the thread's whole time on a CPU all the same).
		Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf task clock of tid %d: %w", tid, err)
	}
	return &CPUClock{fd: fd}, nil
}

// Read returns the thread's time on a CPU so far, in nanoseconds.
func (c *CPUClock) Read() (uint64, error) {
	var b [8]byte
	for {
		// Raw: a counter's read never blocks (see rawProcessVMReadv).
		r, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(c.fd), uintptr(unsafe.Pointer(&b[0])), 8)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		n := int(r)
		if n != 8 {
			return 0, fmt.Errorf("perf counter read of %d bytes", n)
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
}

// Close releases the counter.
func (c *CPUClock) Close() error { return unix.Close(c.fd) }

// ThreadsClock counts the time every thread of a process spends on a CPU,
// the threads born later included: a perf task clock on each of the
// threads it was opened on, inherited by every thread each of them
// creates (the kernel adds an inherited counter's count into its
// parent's). A reading is exact to the moment, even of a thread running on
// another CPU, so two readings are equal exactly when no thread of the
// process was on a CPU in between: what a sampler asks before it reads
// anything else. A reading is one raw system call per thread opened on,
// and allocates nothing.
type ThreadsClock struct {
	fds  []int
	tids []int // the thread each of fds was opened on
	buf  [8]byte
}

// maxThreadsClocks bounds the counters (open files) a ThreadsClock holds:
// a process of more threads is read without one.
const maxThreadsClocks = 256

// ThreadsClock opens a clock of every thread of the process: on each of
// tids, which should be all its threads (threads listed again after the
// clocks are open, and found missing, are opened too). It fails where perf
// events are not allowed.
func (l *Live) ThreadsClock(tids []int) (*ThreadsClock, error) {
	if len(tids) > maxThreadsClocks {
		return nil, fmt.Errorf("pid %d has %d threads: more than the %d counters a clock of its threads may hold open", l.pid, len(tids), maxThreadsClocks)
	}
	c := &ThreadsClock{}
	opened := map[int]bool{}
	for round := 0; round < 4 && len(tids) > 0; round++ {
		for _, tid := range tids {
			if opened[tid] {
				continue
			}
			if len(c.fds) >= maxThreadsClocks {
				c.Close()
				return nil, fmt.Errorf("pid %d: more threads than the %d counters a clock of its threads may hold open", l.pid, maxThreadsClocks)
			}
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK,
				Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | unix.PerfBitInherit}
			attr.Size = uint32(unsafe.Sizeof(attr))
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ESRCH) {
				continue // ended meanwhile
			}
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("perf task clock of tid %d: %w", tid, err)
			}
			opened[tid] = true
			c.fds = append(c.fds, fd)
			c.tids = append(c.tids, tid)
		}
		// A thread created by one not yet opened on, before it was, is
		// no child of a counter: list again until none is missing.
		now, err := l.Threads()
		if err != nil {
			c.Close()
			return nil, err
		}
		tids = tids[:0]
		for _, tid := range now {
			if !opened[tid] {
				tids = append(tids, tid)
			}
		}
	}
	if len(c.fds) == 0 {
		return nil, fmt.Errorf("perf task clocks of pid %d: no thread to open on", l.pid)
	}
	return c, nil
}

// readFD reads the count of one of the clock's counters.
func (c *ThreadsClock) readFD(fd int) (uint64, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&c.buf[0])), 8)
	if errno != 0 {
		return 0, fmt.Errorf("perf counter read: %w", errno)
	}
	if n != 8 {
		return 0, fmt.Errorf("perf counter read of %d bytes", n)
	}
	return binary.LittleEndian.Uint64(c.buf[:]), nil
}

// TIDs returns the threads the clock was opened on, in the order of
// ReadEach's counts (do not modify).
func (c *ThreadsClock) TIDs() []int { return c.tids }

// ReadEach reads the clock of each thread it was opened on (its own time
// and that of the threads it created since) into each[i], in TIDs' order,
// and returns their sum; each must have len(TIDs()) elements.
func (c *ThreadsClock) ReadEach(each []uint64) (uint64, error) {
	var sum uint64
	for i, fd := range c.fds {
		n, err := c.readFD(fd)
		if err != nil {
			return 0, err
		}
		each[i] = n
		sum += n
	}
	return sum, nil
}

// Close releases the counters.
func (c *ThreadsClock) Close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds, c.tids = nil, nil
}

// tracer runs ptrace requests on one locked OS thread, as Linux requires
// that every request for a tracee comes from the thread that seized it.
type tracer struct {
	reqs chan func()
	// rt is set while the thread is real-time (Live.SetTracerRealtime);
	// only the tracer thread touches it.
	rt *realtime.Thread
}

func newTracer() *tracer {
	t := &tracer{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// Sleeps on this thread (waitStop's polling) end when asked, not up
		// to the default 50µs later: the target stands still meanwhile.
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
		// Each thread that stops sends rbscope a SIGCHLD. Blocked here, it
		// is handled on another thread: on this one its handler would run
		// inside the time the target stands still (about 20µs a stop).
		var chld, old unix.Sigset_t
		chld.Val[(unix.SIGCHLD-1)/64] |= 1 << ((unix.SIGCHLD - 1) % 64)
		blocked := unix.PthreadSigmask(unix.SIG_BLOCK, &chld, &old) == nil
		for f := range t.reqs {
			f()
		}
		if t.rt.Leave() != nil {
			return // still real-time: the thread ends with the goroutine
		}
		// Every tracee is detached by now. Unlocking keeps the OS thread
		// alive: were it to end, children it had started with a parent-death
		// signal would be killed. Its timer slack and signal mask go back
		// to what they were.
		if blocked {
			_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
		}
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
		runtime.UnlockOSThread()
	}()
	return t
}

// do runs f on the tracer thread and returns its error; a panic in f comes
// back as an error (after f's deferred calls, which let the threads go).
func (t *tracer) do(f func() error) error {
	done := make(chan error, 1)
	t.reqs <- func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("internal error on the tracer thread: %v", r)
			}
		}()
		done <- f()
	}
	return <-done
}

func (t *tracer) stop() { close(t.reqs) }
