package rubyvm

import (
	"errors"
	"fmt"
)

// FrameKind is what a Ruby frame is.
type FrameKind string

// Frame kinds.
const (
	KindRuby       FrameKind = "ruby"    // a frame running Ruby code (method, block, class body, eval, top)
	KindCFunc      FrameKind = "cfunc"   // a method implemented in C
	KindUnreadable FrameKind = "unknown" // a frame whose contents could not be read ("??")
)

// Frame is one Ruby-level frame, innermost first in Thread.Frames.
type Frame struct {
	Kind  FrameKind
	Label string
	// BaseLabel is the bare method name (location.base_label), for Ruby
	// frames.
	BaseLabel string
	Path      string
	Line      int
	// ExecEnds marks the outermost frame one call of the VM's exec loop
	// runs (the frame Ruby pushed with VM_FRAME_FLAG_FINISH, or the frame
	// inside a skipped one that was), when read WithExecBoundaries:
	// where Ruby frames line up with the native frames running them.
	ExecEnds bool
}

// Thread is one Ruby thread and its stack.
type Thread struct {
	// Addr is the address of the rb_thread_t.
	Addr uint64
	// Self is the Thread object's VALUE (what Thread#inspect prints).
	Self uint64
	TID  int
	// Name is Thread#name; empty when unset.
	Name string
	Main bool
	// Status is Ruby's Thread#status: "run", "sleep", "aborting" or "dead".
	Status string
	// GVL reports whether the thread holds the global VM lock.
	GVL    bool
	Frames []Frame
	// Error says why the stack could not be read (a thread dying mid-read).
	Error string
}

// Limits that keep a walk of changing or corrupt memory finite.
const (
	maxThreads = 100000
	maxRactors = 10000
	// maxFrames bounds a stack walk; a 1 MiB VM stack (Ruby's default)
	// holds about 16k control frames.
	maxFrames = 1 << 20
)

// ReadOption says how a stack read goes (Threads, ReadThreads,
// ReadStacks).
type ReadOption func(*readConfig)

// readConfig is what the ReadOptions of one read said, and what the read
// spent of its frame budget.
type readConfig struct {
	execBoundaries bool
	frameBudget    int
	framesRead     int
}

// WithExecBoundaries makes the read mark each Frame.ExecEnds (one more
// word of each frame's environment read).
func WithExecBoundaries() ReadOption { return func(c *readConfig) { c.execBoundaries = true } }

// WithFrameBudget bounds how many control frames the stacks of one read
// take together, when n is above zero (a crash report reads a hostile
// process once): a stack cut short keeps its innermost frames and says so
// in its error (ErrFrameBudget).
func WithFrameBudget(n int) ReadOption { return func(c *readConfig) { c.frameBudget = n } }

// withReadOptions sets the options of the read that is starting; the
// returned function ends it.
func (v *VM) withReadOptions(opts []ReadOption) func() {
	v.read = readConfig{}
	for _, o := range opts {
		o(&v.read)
	}
	return func() { v.read = readConfig{} }
}

// Threads walks every ractor's threads and returns their stacks.
func (v *VM) Threads(opts ...ReadOption) ([]Thread, error) {
	return v.ReadThreads(func(Thread) bool { return true }, opts...)
}

// ReadThreads walks every ractor's threads and reads who they are (TID,
// name, status, GVL); it walks the stacks only of the threads withStack
// accepts (none when it is nil), as stacks are what costs.
func (v *VM) ReadThreads(withStack func(Thread) bool, opts ...ReadOption) ([]Thread, error) {
	defer v.withReadOptions(opts)()
	L := v.Layout
	vm, err := v.vmPtr()
	if err != nil {
		return nil, err
	}
	mainThread, _ := v.m.u64(at(vm, L.VMRactorMainThread))
	groups, err := v.threadGroups(vm)
	if err != nil {
		return nil, err
	}
	var out []Thread
	for _, g := range groups {
		gvlOwner, _ := v.m.u64(g.gvlOwner)
		ths, err := v.list(g.threads, L.ThreadListNode, maxThreads)
		if err != nil {
			return out, fmt.Errorf("listing threads: %w", err)
		}
		for _, th := range ths {
			t, ec := v.thread(th)
			t.Main = th == mainThread
			t.GVL = th == gvlOwner
			if t.Error == "" && withStack != nil && withStack(t) {
				frames, err := v.stack(ec)
				t.Frames = frames
				if err != nil {
					t.Error = err.Error()
				}
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// ReadStacks reads into ths (from ReadThreads, perhaps a moment ago) the
// stacks of the threads withStack accepts, replacing their Frames and
// Error. Each thread's current execution context is read anew (a Fiber
// switch changes it), so the stacks are as of this call: the caller can
// list threads before it stops them and read only the stacks while they
// stand still. A thread that has ended since it was listed must not be
// passed: its memory may be freed.
func (v *VM) ReadStacks(ths []Thread, withStack func(Thread) bool, opts ...ReadOption) {
	defer v.withReadOptions(opts)()
	for i := range ths {
		t := &ths[i]
		if !withStack(*t) {
			continue
		}
		t.Frames, t.Error = nil, ""
		ec, err := v.m.u64(at(t.Addr, v.Layout.ThreadEC))
		if err == nil {
			t.Frames, err = v.stack(ec)
		}
		if err != nil {
			t.Error = err.Error()
		}
	}
}

// threadGroup is one list of threads and where the GVL owner of those
// threads is kept: a ractor's (3.0+) or, before ractors, the VM's.
type threadGroup struct {
	threads  uint64 // the list head of the threads
	gvlOwner uint64 // the address of the GVL owner's rb_thread_t pointer
}

// threadGroups lists the VM's thread lists: one per ractor, or the VM's
// living threads on a Ruby without ractors (2.7).
func (v *VM) threadGroups(vm uint64) ([]threadGroup, error) {
	L := v.Layout
	if L.VMRactorSet < 0 {
		if L.VMLivingThreads < 0 {
			return nil, fmt.Errorf("the layout has neither ractors nor the VM's living threads: %w", ErrGarbage)
		}
		return []threadGroup{{threads: at(vm, L.VMLivingThreads), gvlOwner: at(vm, L.VMGVLOwner)}}, nil
	}
	rs, err := v.ractors(vm)
	if err != nil {
		return nil, err
	}
	gs := make([]threadGroup, len(rs))
	for i, r := range rs {
		gs[i] = threadGroup{threads: at(r, L.RactorThreadsSet), gvlOwner: at(r, L.RactorGVLOwner)}
	}
	return gs, nil
}

// ractors lists the ractors of the VM (the main one for ordinary programs).
func (v *VM) ractors(vm uint64) ([]uint64, error) {
	L := v.Layout
	rs, err := v.list(at(vm, L.VMRactorSet), L.RactorVMListNode, maxRactors)
	if err != nil || len(rs) == 0 {
		main, err2 := v.m.u64(at(vm, L.VMRactorMainRactor))
		if err2 != nil || main == 0 {
			return nil, fmt.Errorf("no ractor found: %w", errors.Join(err, err2, ErrGarbage))
		}
		return []uint64{main}, nil
	}
	return rs, nil
}

// list walks a ccan circular list whose head is at head and returns the
// containing structs (node address minus nodeOff), at most max of them.
func (v *VM) list(head uint64, nodeOff int64, max int) ([]uint64, error) {
	L := v.Layout
	var out []uint64
	node, err := v.m.u64(at(head, L.ListNodeNext))
	if err != nil {
		return nil, err
	}
	for node != head {
		if node == 0 || len(out) >= max {
			return out, fmt.Errorf("list at %#x is broken or too long: %w", head, ErrGarbage)
		}
		out = append(out, node-uint64(nodeOff))
		if node, err = v.m.u64(at(node, L.ListNodeNext)); err != nil {
			return out, err
		}
	}
	return out, nil
}

// thread reads one rb_thread_t and returns it with the address of its
// execution context; a failure is recorded in Thread.Error.
func (v *VM) thread(th uint64) (Thread, uint64) {
	L := v.Layout
	t := Thread{Addr: th}
	size := L.ThreadName + 8
	for _, o := range []int64{L.ThreadSelf, L.ThreadEC, L.ThreadTID, L.ThreadNT, L.ThreadPthread, (L.ThreadStatusBit + L.ThreadStatusLen) / 8} {
		if o+8 > size {
			size = o + 8
		}
	}
	b, err := v.m.read(th, int(size))
	if err != nil {
		t.Error = err.Error()
		return t, 0
	}
	t.Self = le64(b, L.ThreadSelf)
	switch {
	case L.ThreadTID < 0 && L.ThreadNT < 0 && L.ThreadPthread >= 0:
		// No TID of its own (2.7): glibc's struct pthread has it.
		t.TID = v.tidOfPthread(le64(b, L.ThreadPthread))
	case L.ThreadTID >= 0:
		t.TID = v.ownTID(int(int32(le32(b, L.ThreadTID))))
	case L.ThreadNT >= 0 && L.NativeThreadTID >= 0:
		if nt := le64(b, L.ThreadNT); nt != 0 {
			if tid, err := v.m.u32(at(nt, L.NativeThreadTID)); err == nil {
				t.TID = v.ownTID(int(int32(tid)))
			}
			if t.TID <= 0 && L.NativeThreadPthread >= 0 {
				// A thread just born has not written its tid yet; its
				// struct pthread had it from clone.
				if pt, err := v.m.u64(at(nt, L.NativeThreadPthread)); err == nil {
					t.TID = v.tidOfPthread(pt)
				}
			}
		}
	}
	if t.TID <= 0 && L.ThreadTID >= 0 && L.ThreadPthread >= 0 {
		t.TID = v.tidOfPthread(le64(b, L.ThreadPthread)) // as above (3.1's own tid)
	}
	word := le64(b, L.ThreadStatusBit/8)
	status := int64(word>>uint64(L.ThreadStatusBit%8)) & (1<<uint64(L.ThreadStatusLen) - 1)
	switch status {
	case L.ThreadRunnable:
		t.Status = "run"
	case L.ThreadStopped, L.ThreadStoppedForever:
		t.Status = "sleep"
	case L.ThreadKilled:
		t.Status = "dead"
	default:
		t.Status = "unknown"
	}
	if name := le64(b, L.ThreadName); v.isHeapObject(name) {
		t.Name, _ = v.rstring(name)
	}
	return t, le64(b, L.ThreadEC)
}

type stackBounds struct {
	vmStack uint64 // lowest address of the VM stack
	end     uint64 // one past the last control frame
	cfp     uint64 // innermost control frame
}

// readStackBounds reads an execution context's VM stack and checks that its
// control frame pointer lies inside it, on a frame boundary.
func (v *VM) readStackBounds(ec uint64) (stackBounds, error) {
	L := v.Layout
	if ec == 0 {
		return stackBounds{}, fmt.Errorf("thread has no execution context: %w", ErrGarbage)
	}
	b, err := v.m.read(ec, int(max(L.ECVMStack, L.ECVMStackSize, L.ECCFP)+8))
	if err != nil {
		return stackBounds{}, err
	}
	st := stackBounds{vmStack: le64(b, L.ECVMStack), cfp: le64(b, L.ECCFP)}
	words := le64(b, L.ECVMStackSize)
	if st.vmStack == 0 || words == 0 || words > 1<<28 {
		return st, fmt.Errorf("VM stack %#x of %d words: %w", st.vmStack, words, ErrGarbage)
	}
	st.end = st.vmStack + words*8
	if st.cfp < st.vmStack || st.cfp > st.end || (st.end-st.cfp)%uint64(L.CFPSize) != 0 {
		return st, fmt.Errorf("control frame %#x outside VM stack %#x-%#x: %w", st.cfp, st.vmStack, st.end, ErrGarbage)
	}
	return st, nil
}

// stack reads the Ruby frames of an execution context, innermost first.
func (v *VM) stack(ec uint64) ([]Frame, error) {
	L := v.Layout
	st, err := v.readStackBounds(ec)
	if err != nil {
		return nil, err
	}
	n := (st.end - st.cfp) / uint64(L.CFPSize)
	if n == 0 {
		return nil, nil
	}
	if n > maxFrames {
		return nil, fmt.Errorf("%d control frames: %w", n, ErrGarbage)
	}
	// Within a frame budget only the innermost frames are read; the last
	// one read is then a real frame, not the dummy one.
	var cut uint64
	if r := &v.read; r.frameBudget > 0 {
		left := uint64(max(r.frameBudget-r.framesRead, 0))
		if n > left {
			cut, n = n-left, left
		}
		r.framesRead += int(n)
		if n == 0 {
			return nil, fmt.Errorf("%w: %d frames not read", ErrFrameBudget, cut)
		}
	}
	raw, err := v.m.read(st.cfp, int(n)*int(L.CFPSize))
	if err != nil {
		return nil, err
	}
	// The frames' environments mostly lie in the value stack below them,
	// up to the innermost frame's sp: read that once, not a word at a time.
	v.env = valueStack{}
	if sp := cfpSP(raw, L.CFPSP); sp > st.vmStack && sp-st.vmStack <= maxValueStackRead {
		if b, err := v.m.read(st.vmStack, int(sp-st.vmStack)); err == nil {
			v.env = valueStack{base: st.vmStack, b: b}
		}
	}
	defer func() { v.env = valueStack{} }()
	frames := make([]Frame, 0, n)
	var errs int
	var firstErr error
	// The bottom-most control frame is the VM's dummy top frame, which
	// Ruby's own backtraces leave out too.
	last := n - 1 // the dummy frame's index, unless the budget cut it off
	if cut > 0 {
		last = n
	}
	for i := uint64(0); i < last; i++ {
		cf := raw[i*uint64(L.CFPSize):]
		f, ok, err := v.frame(cf)
		finish := v.read.execBoundaries && v.finishes(cf)
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = err
			}
			f, ok = Frame{Kind: KindUnreadable, Label: "??"}, true
		}
		switch {
		case ok:
			f.ExecEnds = finish
			frames = append(frames, f)
		case finish && len(frames) > 0:
			frames[len(frames)-1].ExecEnds = true
		}
	}
	if errs > 0 {
		return frames, fmt.Errorf("%d frame(s) unreadable, first: %w", errs, firstErr)
	}
	if cut > 0 {
		return frames, fmt.Errorf("%w: the %d outermost frames not read", ErrFrameBudget, cut)
	}
	return frames, nil
}

// finishes tells whether the control frame at the start of cf was pushed
// with VM_FRAME_FLAG_FINISH: the first frame of a call of the exec loop.
func (v *VM) finishes(cf []byte) bool {
	L := v.Layout
	ep := le64(cf, L.CFPEP)
	if ep == 0 || L.FrameFlagFinish <= 0 {
		return false
	}
	b, err := v.envRead(uint64(int64(ep)+L.EnvIndexFlags*8), 8)
	return err == nil && int64(le64(b, 0))&L.FrameFlagFinish != 0
}

// ErrFrameBudget means a read stopped at its frame budget (WithFrameBudget).
var ErrFrameBudget = errors.New("frame budget spent")

// frame decodes one control frame. ok is false for frames Ruby's own
// backtraces skip (dummy frames, C-level blocks).
func (v *VM) frame(cf []byte) (Frame, bool, error) {
	L := v.Layout
	pc, iseq, ep := le64(cf, L.CFPPC), le64(cf, L.CFPIseq), le64(cf, L.CFPEP)
	if iseq != 0 {
		if pc == 0 {
			return Frame{}, false, nil
		}
		// An IFUNC frame also carries a pointer here, but never a pc.
		info, err := v.iseq(iseq)
		if err != nil {
			return Frame{}, false, err
		}
		key := [2]uint64{iseq, pc}
		line, ok := v.lines[key]
		if !ok {
			var err error
			if line, err = v.line(info, pc); err != nil {
				return Frame{}, false, err
			}
			v.lines[key] = line
		}
		// Without its owner (an environment that cannot be read) the
		// frame keeps its path and line, under the bare label.
		owner, _ := v.frameOwner(ep)
		if info.cTrace {
			return Frame{Kind: KindCFunc, Label: v.methodLabel(owner, info.label)}, true, nil
		}
		lkey := [2]uint64{iseq, owner}
		label, ok := v.labels[lkey]
		if !ok {
			if label, err = v.iseqLabel(iseq, owner); err != nil {
				return Frame{}, false, err
			}
			v.labels[lkey] = label
		}
		return Frame{Kind: KindRuby, Label: label, BaseLabel: info.baseLabel, Path: info.path, Line: line}, true, nil
	}
	if ep == 0 {
		return Frame{}, false, nil
	}
	// One read covers the environment data from ep[me_cref] to ep[flags].
	lo := min(L.EnvIndexMECref, L.EnvIndexFlags)
	env, err := v.envRead(uint64(int64(ep)+lo*8), int(max(L.EnvIndexMECref, L.EnvIndexFlags)-lo+1)*8)
	if err != nil {
		return Frame{}, false, err
	}
	flags := le64(env, (L.EnvIndexFlags-lo)*8)
	if int64(flags)&L.FrameMagicMask != L.FrameMagicCFunc {
		return Frame{}, false, nil
	}
	meCref := le64(env, (L.EnvIndexMECref-lo)*8)
	if label, ok := v.cfuncs[meCref]; ok {
		return Frame{Kind: KindCFunc, Label: label}, true, nil
	}
	me, err := v.methodEntry(meCref)
	if err != nil {
		return Frame{}, false, err
	}
	b, err := v.m.read(me, int(max(L.MEOwner, L.MEDef, L.MECalledID)+8))
	if err != nil {
		return Frame{}, false, err
	}
	id := le64(b, L.MECalledID)
	if def := le64(b, L.MEDef); def != 0 {
		if orig, err := v.m.u64(at(def, L.DefOriginalID)); err == nil {
			id = orig
		}
	}
	name, err := v.idName(id)
	if err != nil {
		name = "?"
	}
	label := v.methodLabel(le64(b, L.MEOwner), name)
	if name != "?" {
		v.cfuncs[meCref] = label
	}
	return Frame{Kind: KindCFunc, Label: label}, true, nil
}

// frameOwner returns the owner of the method a Ruby frame runs in, found
// as rb_vm_frame_method_entry finds it: the first method entry on the way
// from the frame's environment to its local one; 0 for code outside any
// method (top level, class bodies).
func (v *VM) frameOwner(ep uint64) (uint64, error) {
	L := v.Layout
	if ep == 0 {
		return 0, nil
	}
	lo := min(L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags)
	n := int(max(L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags)-lo+1) * 8
	for depth := 0; depth < maxIseqNesting; depth++ {
		env, err := v.envRead(uint64(int64(ep)+lo*8), n)
		if err != nil {
			return 0, err
		}
		word := func(i int64) uint64 { return le64(env, (i-lo)*8) }
		local := int64(word(L.EnvIndexFlags))&L.EnvFlagLocal != 0
		meCref := word(L.EnvIndexMECref)
		if owner, ok := v.owners[meCref]; ok && local {
			return owner, nil
		}
		if me, ok := v.methodEntryOf(meCref, local); ok {
			owner, err := v.m.u64(at(me, L.MEOwner))
			if err != nil {
				return 0, err
			}
			if local {
				v.owners[meCref] = owner
			}
			return owner, nil
		}
		if local {
			v.owners[meCref] = 0 // a cref: code outside any method
			return 0, nil
		}
		if ep = word(L.EnvIndexSpecval) &^ uint64(L.EnvGuardMask); ep == 0 { // VM_ENV_PREV_EP
			return 0, nil
		}
	}
	return 0, fmt.Errorf("environment chain too long: %w", ErrGarbage)
}

// methodEntryOf is check_method_entry: obj (an ep[me_cref] value) as a
// method entry, looking through a svar when canBeSvar.
func (v *VM) methodEntryOf(obj uint64, canBeSvar bool) (uint64, bool) {
	L := v.Layout
	if !v.isHeapObject(obj) {
		return 0, false
	}
	typ, flags, err := v.objType(obj)
	if err != nil || typ != L.TImemo {
		return 0, false
	}
	switch int64(flags>>uint64(L.FlUShift)) & L.ImemoMask {
	case L.ImemoMent:
		return obj, true
	case L.ImemoSvar:
		if !canBeSvar {
			return 0, false
		}
		inner, err := v.m.u64(at(obj, L.SvarCrefME))
		if err != nil {
			return 0, false
		}
		return v.methodEntryOf(inner, false)
	}
	return 0, false
}

// methodEntry finds the callable method entry of a C frame from its local
// environment's ep[VM_ENV_DATA_INDEX_ME_CREF] value, looking through a svar.
func (v *VM) methodEntry(obj uint64) (uint64, error) {
	L := v.Layout
	for i := 0; i < 2; i++ {
		typ, flags, err := v.objType(obj)
		if err != nil {
			return 0, err
		}
		if typ != L.TImemo {
			break
		}
		switch int64(flags>>uint64(L.FlUShift)) & L.ImemoMask {
		case L.ImemoMent:
			return obj, nil
		case L.ImemoSvar:
			if obj, err = v.m.u64(at(obj, L.SvarCrefME)); err != nil {
				return 0, err
			}
			continue
		}
		break
	}
	return 0, fmt.Errorf("C frame without a method entry: %w", ErrGarbage)
}

// maxValueStackRead bounds the value stack read at once for a stack walk
// (Ruby's default VM stack is 1 MiB).
const maxValueStackRead = 1 << 20

// valueStack is a copy of a thread's value stack, read for one stack walk.
type valueStack struct {
	base uint64
	b    []byte
}

// envRead reads n bytes of an environment at addr: from the copy of the
// value stack when it holds them, else from the target (an environment
// that escaped to the heap, for a block or a Proc).
func (v *VM) envRead(addr uint64, n int) ([]byte, error) {
	if e := v.env; addr >= e.base && addr-e.base+uint64(n) <= uint64(len(e.b)) {
		return e.b[addr-e.base : addr-e.base+uint64(n)], nil
	}
	return v.m.read(addr, n)
}

// cfpSP is the sp of the control frame at the start of raw, or 0 when the
// layout lacks the field (a build whose DWARF has no rb_control_frame_t.sp:
// the value stack is then read a word at a time).
func cfpSP(raw []byte, off int64) uint64 {
	if off < 0 {
		return 0
	}
	return le64(raw, off)
}

// ExecLoopFunctions are the native functions one call of which runs Ruby
// frames up to one marked Frame.ExecEnds: vm_exec (static before 3.0) and
// rb_vm_exec.
var ExecLoopFunctions = []string{"rb_vm_exec", "vm_exec"}

// CFuncCallPrefixes begin the names of the VM's functions that call a C
// method's function (vm_call_cfunc_with_frame, vm_call0_cfunc_with_frame,
// ...): the C function's native frame lies just inside theirs.
var CFuncCallPrefixes = []string{"vm_call_cfunc", "vm_call0_cfunc"}
