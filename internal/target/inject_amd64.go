package target

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The x86_64 half of borrowing a thread (inject.go): its registers as
// ptrace gives them, the syscall instruction, the System V calling
// convention.

// Linux x86-64 constants that x/sys/unix does not name.
const (
	ptraceGetRegSet = 0x4204
	ptraceSetRegSet = 0x4205
	ntX86XState     = 0x202 // NT_X86_XSTATE
	// xstateMax is larger than any XSAVE area the kernel reports (AVX-512
	// needs about 2.7 KiB, AMX about 11 KiB).
	xstateMax = 16 << 10
	// redZone is the area below the stack pointer that leaf functions of
	// the System V x86-64 ABI may use without moving it.
	redZone = 128
)

// savedThread is what a borrowed thread gets back.
type savedThread struct {
	regs   unix.PtraceRegs
	xstate []byte // NT_X86_XSTATE, or the legacy FXSAVE area when xstate is nil
	fpregs []byte
}

// Syscall runs system call nr with args on thread tid, one of the stopped
// threads, and returns the kernel's result: a negative errno on failure,
// as the raw system call does.
func (s *Stopped) Syscall(tid int, nr uint64, args ...uint64) (int64, error) {
	l := s.l
	if len(args) > 6 {
		return 0, fmt.Errorf("system call %d: %d arguments, at most 6", nr, len(args))
	}
	var ret int64
	err := s.borrow(tid, func(saved *unix.PtraceRegs) error {
		at, err := l.syscallInsn(saved)
		if err != nil {
			return err
		}
		regs := *saved
		regs.Orig_rax = ^uint64(0) // no system-call restart while borrowed
		regs.Rip = at
		regs.Rax = nr
		a := make([]uint64, 6)
		copy(a, args)
		regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
		if err := unix.PtraceSetRegs(tid, &regs); err != nil {
			return fmt.Errorf("set registers of tid %d: %w", tid, err)
		}
		out, err := l.runUntil(tid, true, func(r *unix.PtraceRegs, sig unix.Signal) bool {
			return sig == unix.SIGTRAP && r.Rip == at+2
		})
		if err != nil {
			return fmt.Errorf("system call %d on tid %d: %w", nr, tid, err)
		}
		ret = int64(out.Rax)
		return nil
	})
	return ret, err
}

// Call calls the function at fn with up to six integer arguments on thread
// tid, one of the stopped threads, and returns its integer result.
// The function runs on the thread's own stack, below the red zone, and
// returns to address 0; the fault that follows is caught and discarded.
// Only functions that are safe to run at any instruction of the program
// (async-signal-safe ones) may be called.
func (s *Stopped) Call(tid int, fn uint64, args ...uint64) (uint64, error) {
	l := s.l
	if len(args) > 6 {
		return 0, fmt.Errorf("call %#x: %d arguments, at most 6", fn, len(args))
	}
	// The call ends in a fault the kernel forces on the thread; were
	// SIGSEGV blocked or ignored at that moment, forcing it would reset the
	// program's SIGSEGV handler and unblock the signal.
	if blocked, ignored, err := segvMasked(l.pid, tid); err != nil {
		return 0, err
	} else if ignored {
		return 0, fmt.Errorf("tid %d ignores SIGSEGV; rbscope cannot call functions in it", tid)
	} else if blocked {
		return 0, ErrSegvBlocked
	}
	var ret uint64
	err := s.borrow(tid, func(saved *unix.PtraceRegs) error {
		regs := *saved
		regs.Orig_rax = ^uint64(0)
		sp := (saved.Rsp - redZone - 256) &^ 15
		sp -= 8 // the return address: fn starts with rsp+8 16-byte aligned
		var zero [8]byte
		if _, err := l.writeAt(zero[:], sp); err != nil {
			return fmt.Errorf("push return address on tid %d: %w", tid, err)
		}
		regs.Rsp = sp
		regs.Rip = fn
		regs.Rax = 0
		a := make([]uint64, 6)
		copy(a, args)
		regs.Rdi, regs.Rsi, regs.Rdx, regs.Rcx, regs.R8, regs.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
		if err := unix.PtraceSetRegs(tid, &regs); err != nil {
			return fmt.Errorf("set registers of tid %d: %w", tid, err)
		}
		out, err := l.runUntil(tid, false, func(r *unix.PtraceRegs, sig unix.Signal) bool {
			return sig == unix.SIGSEGV && r.Rip == 0
		})
		if err != nil {
			return fmt.Errorf("call %#x on tid %d: %w", fn, tid, err)
		}
		ret = out.Rax
		return nil
	})
	return ret, err
}

// borrow saves tid's registers, runs f (on the tracer thread, where the
// session's do runs) and restores them whatever f did. Meanwhile rbscope's
// own oom_score_adj is -1000 (see holdOffOOM).
func (s *Stopped) borrow(tid int, f func(saved *unix.PtraceRegs) error) (err error) {
	if s.ended {
		return errEnded
	}
	if !s.Threads[tid] {
		return fmt.Errorf("tid %d is not stopped", tid)
	}
	defer holdOffOOM()()
	// The thread is stopped: while it is, its PID cannot be reused. Check
	// that it is still the process attached to before touching it.
	if err := s.l.CheckSame(); err != nil {
		return err
	}
	var saved savedThread
	if err := saved.save(tid); err != nil {
		return err
	}
	// Deferred: a panic in f must not let the thread go with borrowed
	// registers.
	defer func() {
		if rerr := saved.restore(tid); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return f(&saved.regs)
}

func (s *savedThread) save(tid int) error {
	if err := unix.PtraceGetRegs(tid, &s.regs); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrExited
		}
		return fmt.Errorf("read registers of tid %d: %w", tid, err)
	}
	buf := make([]byte, xstateMax)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceGetRegSet, uintptr(tid), ntX86XState, uintptr(unsafe.Pointer(&iov)), 0, 0); e == 0 {
		s.xstate = buf[:iov.Len]
		return nil
	}
	fp := make([]byte, 512)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETFPREGS, uintptr(tid), 0, uintptr(unsafe.Pointer(&fp[0])), 0, 0); e != 0 {
		return fmt.Errorf("read floating-point registers of tid %d: %w", tid, e)
	}
	s.fpregs = fp
	return nil
}

func (s *savedThread) restore(tid int) error {
	if err := unix.PtraceSetRegs(tid, &s.regs); err != nil {
		return fmt.Errorf("restore registers of tid %d: %w", tid, err)
	}
	if s.xstate != nil {
		iov := unix.Iovec{Base: &s.xstate[0]}
		iov.SetLen(len(s.xstate))
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceSetRegSet, uintptr(tid), ntX86XState, uintptr(unsafe.Pointer(&iov)), 0, 0); e != 0 {
			return fmt.Errorf("restore vector registers of tid %d: %w", tid, e)
		}
		return nil
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SETFPREGS, uintptr(tid), 0, uintptr(unsafe.Pointer(&s.fpregs[0])), 0, 0); e != 0 {
		return fmt.Errorf("restore floating-point registers of tid %d: %w", tid, e)
	}
	return nil
}

// runUntil resumes tid (one instruction at a time when step is set) until
// it stops in a state done accepts. Signals that arrive meanwhile are kept
// and delivered when the thread is let go. It runs on the tracer thread.
func (l *Live) runUntil(tid int, step bool, done func(*unix.PtraceRegs, unix.Signal) bool) (*unix.PtraceRegs, error) {
	deadline := time.Now().Add(InjectTimeout)
	for {
		var err error
		if step {
			err = unix.PtraceSingleStep(tid)
		} else {
			err = unix.PtraceCont(tid, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		sig, err := l.waitAnyStop(tid, deadline)
		if err != nil {
			return nil, err
		}
		var regs unix.PtraceRegs
		if err := unix.PtraceGetRegs(tid, &regs); err != nil {
			return nil, fmt.Errorf("read registers: %w", err)
		}
		if done(&regs, sig) {
			return &regs, nil
		}
		switch sig {
		case unix.SIGTRAP, unix.SIGSTOP:
			// A step that has not reached its end yet, or a ptrace event.
		case unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGFPE:
			return nil, fmt.Errorf("faulted with %v at %#x", sig, regs.Rip)
		default:
			l.paused[tid] = int(sig) // the program's own signal: deliver later
		}
	}
}

// syscallInsn returns the address of a syscall instruction (0f 05) in the
// process: the one the thread is blocked in, or else one found in the C
// library's code (or any other executable mapping).
func (l *Live) syscallInsn(regs *unix.PtraceRegs) (uint64, error) {
	if int64(regs.Orig_rax) >= 0 && regs.Rip >= 2 {
		var b [2]byte
		if _, err := l.ReadAt(b[:], regs.Rip-2); err == nil && b == [2]byte{0x0f, 0x05} {
			return regs.Rip - 2, nil
		}
	}
	if l.syscallAt != 0 {
		return l.syscallAt, nil
	}
	maps, err := l.Mappings()
	if err != nil {
		return 0, err
	}
	isLibc := func(m Mapping) bool {
		return strings.Contains(m.Path, "/libc.so") || strings.Contains(m.Path, "/libc-")
	}
	for pass := 0; pass < 2; pass++ {
		for _, m := range maps {
			if !strings.Contains(m.Perms, "x") || (pass == 0) != isLibc(m) || m.Path == "[vsyscall]" {
				continue
			}
			for off := m.Start; off < m.End; off += 1 << 20 {
				n := min(m.End-off, 1<<20)
				buf := make([]byte, n)
				if _, err := l.ReadAt(buf, off); err != nil {
					break
				}
				if i := bytes.Index(buf, []byte{0x0f, 0x05}); i >= 0 {
					l.syscallAt = off + uint64(i)
					return l.syscallAt, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("pid %d: no syscall instruction found in its code", l.pid)
}
