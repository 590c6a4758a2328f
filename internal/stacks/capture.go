package stacks

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Thread is one thread's stack: a Ruby thread's (Ruby set), with its
// native frames merged in when the capture read them, or a native thread
// that runs no Ruby.
type Thread struct {
	// TID is the kernel's thread ID as the target lists it; 0 for an M:N
	// Ruby thread that is on no native thread now.
	TID int
	// Name is the Ruby thread's name, or a native thread's kernel name
	// (comm) where the target has one.
	Name string
	// Ruby reports whether the thread runs Ruby; Main, Status (Ruby's
	// Thread#status) and GVL (it holds the global VM lock) are a Ruby
	// thread's.
	Ruby   bool
	Main   bool
	Status string
	GVL    bool
	// Frames are the thread's frames, innermost first.
	Frames []Frame
	// Unaligned reports that some Ruby frames found no exec-loop frame to
	// go beside and follow the native frames.
	Unaligned bool
	// Error says why the Ruby stack is incomplete; NativeError why the
	// native one ends before its outermost frame (or was not read).
	Error       string
	NativeError string
	// Regs are the thread's registers when its native stack was read.
	Regs *target.Regs
}

// Largest returns the thread's largest native frame (by the stack it
// holds; the innermost of equals), and false when it has no native frame.
func (th Thread) Largest() (Frame, bool) {
	var big Frame
	found := false
	for _, f := range th.Frames {
		if f.Kind == KindNative && (!found || f.Native.Size > big.Native.Size) {
			big, found = f, true
		}
	}
	return big, found
}

// NativeFrames returns the thread's native frames, innermost first.
func (th Thread) NativeFrames() []unwind.Frame {
	var out []unwind.Frame
	for _, f := range th.Frames {
		if f.Kind == KindNative {
			out = append(out, f.Native)
		}
	}
	return out
}

// Options say what a capture reads.
type Options struct {
	// Native reads every native thread's native stack too, and puts each
	// Ruby thread's Ruby frames beside the native frames running them.
	Native bool
	// Lines names native frames' source lines from DWARF (with Native).
	Lines bool
	// Nonblocking reads a live process's Ruby stacks without pausing it
	// (a stack may then be torn). It cannot go with Native.
	Nonblocking bool
	// FrameBudget, when above zero, bounds how many Ruby frames the whole
	// capture reads (rubyvm.WithFrameBudget).
	FrameBudget int
	// WhileStill, when set, runs while the target stands still, after the
	// stacks are read, with the threads standing still (not with
	// Nonblocking).
	WhileStill func(tids []int) error
}

// ErrNativeNonblocking refuses a capture of native stacks without a
// pause: registers are read from stopped threads.
var ErrNativeNonblocking = fmt.Errorf("native stacks need the threads stopped to read their registers")

// ErrEmulated says why a process's native stacks are not read: it runs
// another architecture's code under an emulator (qemu-user), whose own
// registers are all ptrace gives; its Ruby stacks read as any process's.
var ErrEmulated = errors.New("the process runs under an emulator: its threads' registers are the emulator's, not the program's")

// Capture reads the stacks of t's threads: the Ruby threads of vm (nil
// for none) and, with opts.Native, every native thread's native stack.
// A live target is paused for the read, and always resumed (a Reader's read);
// the native frames are named after it runs again. Ruby threads come
// first, in the VM's order; native threads that run no Ruby follow, by
// TID.
func Capture(t target.Target, vm *rubyvm.VM, opts Options) ([]Thread, error) {
	if opts.Native && opts.Nonblocking {
		return nil, ErrNativeNonblocking
	}
	r := NewReader(t, vm, ReaderOptions{Native: opts.Native, Lines: opts.Lines, FrameBudget: opts.FrameBudget})
	defer r.Close()
	if err := r.Prepare(); err != nil {
		return nil, err
	}
	read, err := r.Read(&Selection{Nonblocking: opts.Nonblocking, AllNative: true, WhileStill: opts.WhileStill})
	if err != nil {
		return nil, err
	}
	ruby := read.Threads
	all, _ := t.Threads()
	fixForkedMain(t.PID(), ruby, all)
	out := make([]Thread, 0, len(ruby))
	seen := map[int]bool{}
	for _, rt := range ruby {
		th := Thread{TID: rt.TID, Name: rt.Name, Ruby: true, Main: rt.Main, Status: rt.Status, GVL: rt.GVL, Error: rt.Error}
		if !opts.Native {
			th.Frames = RubyFrames(rt.Frames)
			out = append(out, th)
			continue
		}
		fs, tried, nerr := r.Native(rt.TID)
		regs, hasRegs := r.Regs(rt.TID)
		switch {
		case hasRegs:
			m := Merge(rt.Frames, fs)
			th.Frames, th.Unaligned = m.Frames, !m.Aligned
			th.NativeError = errString(nerr)
		case tried: // stopped, but its registers could not be read
			th.Frames = RubyFrames(rt.Frames)
			th.NativeError = errString(nerr)
		default:
			th.Frames = RubyFrames(rt.Frames)
			th.NativeError = "not on a native thread now"
		}
		if hasRegs {
			th.Regs = &regs
		}
		if tried {
			seen[rt.TID] = true // not listed again as a native thread
		}
		out = append(out, th)
	}
	if !opts.Native {
		return out, nil
	}
	names := nativeNames(t)
	for _, tid := range read.Stopped {
		if seen[tid] {
			continue
		}
		fs, _, nerr := r.Native(tid)
		th := Thread{TID: tid, Name: names[tid], Frames: NativeFrames(fs), NativeError: errString(nerr)}
		if regs, ok := r.Regs(tid); ok {
			th.Regs = &regs
		}
		out = append(out, th)
	}
	return out, nil
}

// KernelTID is the TID the kernel knows Ruby thread th of process pid by.
// A forked child's main thread keeps its parent's TID in Ruby's books (a
// Puma or Unicorn worker's names its master's), and the kernel knows it by
// the process ID: a main thread whose TID is not one of the process's
// tasks while the PID is, is the PID. isTask says whether a TID is one of
// the process's threads (its target's list, a task directory under /proc).
func KernelTID(pid int, th rubyvm.Thread, isTask func(tid int) bool) int {
	if th.Main && th.TID != pid && !isTask(th.TID) && isTask(pid) {
		return pid
	}
	return th.TID
}

// fixForkedMain gives the main thread of a process's Ruby threads the
// kernel's TID where Ruby's books keep another (KernelTID). tids are the
// process's threads as its target lists them.
func fixForkedMain(pid int, ruby []rubyvm.Thread, tids []int) {
	isTask := func(tid int) bool { return slices.Contains(tids, tid) }
	for i := range ruby {
		ruby[i].TID = KernelTID(pid, ruby[i], isTask)
	}
}

// nativeNames returns the kernel's names of a live process's threads (a
// core keeps none).
func nativeNames(t target.Target) map[int]string {
	names := map[int]string{}
	if l, ok := t.(*target.Live); ok {
		if tasks, err := l.Tasks(); err == nil {
			for _, k := range tasks {
				names[k.TID] = k.Comm
			}
		}
	}
	return names
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
