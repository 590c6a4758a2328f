package stacks

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Reader reads the stacks of one process's threads, read after read: the
// one engine behind a one-shot capture (Capture), every tick of the
// sampler (record, top, agent) and the thread lists of threads and exec.
// It keeps what the reads of one process share: the native unwinder, the
// options of the VM's reads, what it learnt of the GC's flags and its
// buffers. The caller's policy says which threads stop and whose stacks
// are read (Selection). A Reader is not safe for concurrent use.
type Reader struct {
	t    target.Target
	live *target.Live // t, when it is a live process
	vm   *rubyvm.VM   // nil: no Ruby (native stacks only)
	opts ReaderOptions
	uw   *nativeUnwinder
	// noGC is set once the Ruby's layout turned out to lack the GC's
	// flags.
	noGC bool
	// readOpts are the options of the VM's paused reads; nbOpts those of
	// reads without a pause (readOpts, WithGCPhase into gcRead unless
	// noGC, and reused frames with ReaderOptions.ReuseFrames), made for
	// readOpts of nbOptsFor options and nbOptsGC.
	readOpts  []rubyvm.ReadOption
	nbOpts    []rubyvm.ReadOption
	nbOptsFor int
	nbOptsGC  bool
	gcRead    rubyvm.GCRead

	// The read under way: its selection, whether every thread of the
	// process stands still, the stopped session (a live target's), the
	// TIDs whose Ruby stacks were read, and what it found.
	sel      *Selection
	allStill bool
	st       *target.Stopped
	done     map[int]bool
	res      Read
	native   map[int]*nativeStack
	nativeAt []*nativeStack // kept for the next reads
	// The callbacks of a read, made once (a function value made at each
	// read would be allocated at each read).
	shouldReadFn func(rubyvm.Thread) bool
	stoppedFn    func(*target.Stopped) error
	heldFn       func([]int) error
}

// ReaderOptions say what a Reader reads of every thread it reads.
type ReaderOptions struct {
	// Native unwinds the native stacks of the threads read, and marks the
	// Ruby frames where the native ones run them (their exec loops).
	Native bool
	// Lines names native frames' source lines from DWARF (with Native).
	Lines bool
	// FrameBudget, when above zero, bounds how many Ruby frames one read
	// takes (rubyvm.WithFrameBudget).
	FrameBudget int
	// ReuseFrames gives the threads of a read without a pause, and their
	// frames, in slices the VM fills again at the next such read
	// (rubyvm.WithReusedFrames): for a caller that copies what it keeps.
	ReuseFrames bool
}

// Selection is a read's policy: which threads stop, and whose stacks are
// read.
type Selection struct {
	// Nonblocking reads without stopping anything (a stack may then be
	// torn); no native stack is read.
	Nonblocking bool
	// Threads is the Ruby thread list read a moment ago with nothing
	// stopped (Reader.List): only the stacks are then read while the
	// threads stand still. When nil, the list is read with the stacks.
	Threads []rubyvm.Thread
	// Pick names the threads of a live process to stop, called on the
	// tracer thread right before they stop (target.Live.WhilePausedPicked);
	// when nil, TIDs name them, nil for every thread. A core or a
	// snapshot stands still already.
	Pick func() []int
	TIDs []int
	// Want says whose stacks are read; nil for every Ruby thread. When
	// only some threads stop, the stack read for a TID is that of the
	// first thread Want accepts of those Ruby's books give that TID.
	Want func(rubyvm.Thread) bool
	// TIDOf gives a Ruby thread's TID as the kernel knows it (a forked
	// child's main thread keeps its parent's in Ruby's books); nil for
	// KernelTID over the threads that stand still.
	TIDOf func(rubyvm.Thread) int
	// GC reads the collector's phase with the stacks.
	GC bool
	// AllNative unwinds the native stack of every thread that stood
	// still, not only of the Ruby threads read (ReaderOptions.Native).
	AllNative bool
	// WhileStill, when set, runs while the threads stand still, after the
	// stacks are read, with the TIDs of those that do (not with
	// Nonblocking).
	WhileStill func(tids []int) error
}

// Read is what one read found.
type Read struct {
	// Threads are the Ruby threads: with Selection.Threads, those whose
	// stacks were read (and any other Want accepts of the same TID, with
	// no frames), else every one, in the VM's order.
	Threads []rubyvm.Thread
	// Stopped are the TIDs of the threads that stood still, in order (in
	// a slice the next read fills again).
	Stopped []int
	// GC is the collector's phase with Selection.GC, when a thread read
	// held the GVL (the collector runs on that thread); GCIdle otherwise.
	GC rubyvm.GCPhase
}

// nativeStack is one thread's native stack as a read unwound it.
type nativeStack struct {
	frames  []unwind.Frame
	err     error
	regs    target.Regs
	hasRegs bool
	named   bool
}

// NewReader makes the reader of t's threads, whose Ruby is vm (nil: read
// native stacks only). Prepare it before its first read.
func NewReader(t target.Target, vm *rubyvm.VM, opts ReaderOptions) *Reader {
	r := &Reader{t: t, vm: vm, opts: opts, done: map[int]bool{}, native: map[int]*nativeStack{}}
	r.live, _ = t.(*target.Live)
	if opts.FrameBudget > 0 {
		r.readOpts = append(r.readOpts, rubyvm.WithFrameBudget(opts.FrameBudget))
	}
	r.shouldReadFn = r.shouldRead
	r.stoppedFn = func(st *target.Stopped) error {
		r.st = st
		defer func() { r.st = nil }()
		r.res.Stopped = r.res.Stopped[:0]
		for tid := range st.Threads {
			r.res.Stopped = append(r.res.Stopped, tid)
		}
		slices.Sort(r.res.Stopped)
		return r.readStill()
	}
	r.heldFn = func(tids []int) error {
		r.res.Stopped = append(r.res.Stopped[:0], tids...)
		slices.Sort(r.res.Stopped)
		return r.readStill()
	}
	return r
}

// Prepare readies the next read, outside any pause: with
// ReaderOptions.Native it makes the unwinder (reading the code's CFI now,
// not while threads stand still), or makes it anew when the last reads
// met code mapped since.
func (r *Reader) Prepare() error {
	if !r.opts.Native {
		return nil
	}
	if r.uw != nil {
		return r.uw.Refresh()
	}
	uw, err := newNativeUnwinder(r.t)
	if err != nil {
		return fmt.Errorf("preparing to unwind native stacks: %w", err)
	}
	r.uw = uw
	r.readOpts = append(r.readOpts, rubyvm.WithExecBoundaries())
	return nil
}

// List reads the Ruby thread list (who the threads are: TIDs, names,
// states, the GVL) without their stacks and without stopping anything.
func (r *Reader) List() ([]rubyvm.Thread, error) { return r.ListWith(nil) }

// ListWith lists the Ruby threads as List does and, in the same walk, reads
// the stacks of those want accepts (nil: none), without stopping
// anything; their frames are the caller's to keep (never reused by a later
// read).
func (r *Reader) ListWith(want func(rubyvm.Thread) bool) ([]rubyvm.Thread, error) {
	if r.vm == nil {
		return nil, nil
	}
	return r.vm.ReadThreads(want)
}

// Read reads the threads sel selects. A live process is paused for it
// (unless sel.Nonblocking), and always resumed; the native frames are
// named when asked for (Native), once it runs again.
func (r *Reader) Read(sel *Selection) (Read, error) {
	r.sel = sel
	defer func() { r.sel = nil }()
	clear(r.done)
	clear(r.native) // the last read's native stacks never join this one's
	r.res = Read{Stopped: r.res.Stopped[:0]}
	if sel.Nonblocking {
		return r.readNonblocking()
	}
	var err error
	switch {
	case r.live == nil:
		r.allStill = true
		var tids []int
		if tids, err = r.t.Threads(); err == nil {
			err = r.heldFn(tids)
		}
	case sel.Pick != nil:
		r.allStill = false
		err = r.live.WhilePausedPicked(sel.Pick, r.stoppedFn)
	default:
		r.allStill = sel.TIDs == nil
		err = r.live.WhilePaused(sel.TIDs, r.stoppedFn)
	}
	if err != nil {
		return Read{}, err
	}
	if sel.Threads != nil {
		out := sel.Threads[:0]
		for _, th := range sel.Threads {
			if r.done[r.tidOf(th)] && (sel.Want == nil || sel.Want(th)) {
				out = append(out, th)
			}
		}
		r.res.Threads = out
	}
	return r.res, nil
}

// readStill reads the Ruby stacks, the GC's phase and the native stacks
// while the threads of r.res.Stopped stand still.
func (r *Reader) readStill() error {
	sel := r.sel
	if r.vm != nil {
		if sel.Threads == nil {
			ths, err := r.vm.ReadThreads(r.shouldReadFn, r.readOpts...)
			if err != nil {
				return err
			}
			r.res.Threads = ths
		} else {
			r.vm.ReadStacks(sel.Threads, r.shouldReadFn, r.readOpts...)
			r.res.Threads = sel.Threads
		}
		if sel.GC {
			r.res.GC = r.gcPhase(r.res.Threads)
		}
	}
	if r.uw != nil {
		if sel.AllNative {
			for _, tid := range r.res.Stopped {
				r.unwind(tid)
			}
		} else {
			for tid := range r.done {
				if tid > 0 && r.stopped(tid) {
					r.unwind(tid)
				}
			}
		}
	}
	if sel.WhileStill != nil {
		return sel.WhileStill(r.res.Stopped)
	}
	return nil
}

// shouldRead says whether the read under way reads th's stack, and notes
// the TIDs read.
func (r *Reader) shouldRead(th rubyvm.Thread) bool {
	sel := r.sel
	if sel.Want != nil && !sel.Want(th) {
		return false
	}
	tid := r.tidOf(th)
	if r.allStill {
		r.done[tid] = true
		return true
	}
	if !r.stopped(tid) || r.done[tid] {
		return false
	}
	r.done[tid] = true
	return true
}

func (r *Reader) tidOf(th rubyvm.Thread) int {
	if r.sel != nil && r.sel.TIDOf != nil {
		return r.sel.TIDOf(th)
	}
	return KernelTID(r.t.PID(), th, r.stopped)
}

// stopped says whether thread tid stands still in the read under way.
func (r *Reader) stopped(tid int) bool {
	if r.st != nil {
		return r.st.Threads[tid]
	}
	return r.allStill && slices.Contains(r.res.Stopped, tid)
}

// unwind unwinds thread tid's native stack while it stands still.
func (r *Reader) unwind(tid int) {
	ns := r.nativeSlot(tid)
	var regs target.Regs
	var err error
	if r.st != nil {
		regs, err = r.st.Registers(tid)
	} else {
		regs, err = r.t.Registers(tid)
	}
	if err != nil {
		ns.err = err
		return
	}
	if r.vm != nil && regs.Arch != nil && regs.Arch.Machine != r.vm.Image.File.Machine {
		ns.err = fmt.Errorf("%w (its Ruby is %s code, the registers %s's)", ErrEmulated, arch.MachineName(r.vm.Image.File.Machine), regs.Arch.Name)
		return
	}
	ns.regs, ns.hasRegs = regs, true
	ns.frames, ns.err = r.uw.Unwind(regs)
}

// nativeSlot returns the native stack of tid for the read under way,
// emptied, reusing the slots of earlier reads.
func (r *Reader) nativeSlot(tid int) *nativeStack {
	var ns *nativeStack
	if n := len(r.nativeAt); n > 0 && len(r.native) < n {
		ns = r.nativeAt[len(r.native)]
	} else {
		ns = &nativeStack{}
		r.nativeAt = append(r.nativeAt, ns)
	}
	*ns = nativeStack{frames: ns.frames[:0]}
	r.native[tid] = ns
	return ns
}

// Native returns thread tid's native stack as the last read unwound it,
// named (with source lines under ReaderOptions.Lines; call it once the
// threads run again), why it ends before its outermost frame or could not
// be read; read is false when the read did not try to read it.
func (r *Reader) Native(tid int) (frames []unwind.Frame, read bool, err error) {
	ns, ok := r.native[tid]
	if !ok {
		return nil, false, nil
	}
	if !ns.named && len(ns.frames) > 0 {
		r.uw.Name(ns.frames, r.opts.Lines)
		ns.named = true
	}
	return ns.frames, true, ns.err
}

// Regs returns thread tid's registers as the last read found them, when
// it unwound that thread's native stack.
func (r *Reader) Regs(tid int) (target.Regs, bool) {
	if ns, ok := r.native[tid]; ok && ns.hasRegs {
		return ns.regs, true
	}
	return target.Regs{}, false
}

// readNonblocking reads the threads and their stacks without stopping
// anything: the GC's phase comes with the threads, in the same read.
func (r *Reader) readNonblocking() (Read, error) {
	if r.vm == nil {
		return Read{}, nil
	}
	sel := r.sel
	want := sel.Want
	if want == nil {
		want = func(rubyvm.Thread) bool { return true }
	}
	gc := sel.GC && !r.noGC
	if r.nbOpts == nil || r.nbOptsFor != len(r.readOpts) || r.nbOptsGC != gc {
		r.nbOpts = slices.Clip(r.readOpts)
		if r.opts.ReuseFrames {
			r.nbOpts = append(r.nbOpts, rubyvm.WithReusedFrames())
		}
		if gc {
			r.nbOpts = append(r.nbOpts, rubyvm.WithGCPhase(&r.gcRead))
		}
		r.nbOptsFor, r.nbOptsGC = len(r.readOpts), gc
	}
	ths, err := r.vm.ReadThreads(want, r.nbOpts...)
	if err != nil {
		return Read{}, err
	}
	r.res.Threads = ths
	if gc {
		r.res.GC = r.gcPhaseRead(ths)
	}
	return r.res, nil
}

// ReadStacks reads into ths, listed a moment ago (List), the stacks of the
// threads want accepts, without stopping anything.
func (r *Reader) ReadStacks(ths []rubyvm.Thread, want func(rubyvm.Thread) bool) {
	if r.vm != nil {
		r.vm.ReadStacks(ths, want)
	}
}

// GCPhase reads what the GC is doing when one of ths, just read, holds the
// GVL (the GC runs on that thread); GCIdle otherwise, and always once the
// Ruby's layout has turned out to lack the GC's flags.
func (r *Reader) GCPhase(ths []rubyvm.Thread) rubyvm.GCPhase { return r.gcPhase(ths) }

func (r *Reader) gcPhase(ths []rubyvm.Thread) rubyvm.GCPhase {
	if r.noGC || !holdsGVL(ths) {
		return rubyvm.GCIdle
	}
	phase, err := r.vm.GC()
	if errors.Is(err, layout.ErrFeatureMissing) {
		r.noGC = true
	}
	if err != nil {
		return rubyvm.GCIdle
	}
	return phase
}

// gcPhaseRead is gcPhase for threads read WithGCPhase(&r.gcRead): the
// phase that read found.
func (r *Reader) gcPhaseRead(ths []rubyvm.Thread) rubyvm.GCPhase {
	if errors.Is(r.gcRead.Err, layout.ErrFeatureMissing) {
		r.noGC = true
	}
	if !holdsGVL(ths) || r.gcRead.Err != nil {
		return rubyvm.GCIdle
	}
	return r.gcRead.Phase
}

func holdsGVL(ths []rubyvm.Thread) bool {
	for _, th := range ths {
		if th.GVL {
			return true
		}
	}
	return false
}

// Close releases the files the reader's unwinder holds.
func (r *Reader) Close() {
	if r.uw != nil {
		r.uw.Close()
		r.uw = nil
	}
}
