package rubyvm

import (
	"errors"
	"fmt"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
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
	// Method is, for a Ruby frame running the block of a method defined
	// with define_method (Sinatra's routes, for one), the method's name
	// as defined ("GET /hello/:name"), which its label does not carry
	// (Ruby labels the block where it was written: "block in
	// <class:App>"); empty for every other frame.
	Method string
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
	gc             *GCRead
	reuseFrames    bool
	stacks         int // stacks read so far, with reuseFrames
}

// WithExecBoundaries makes the read mark each Frame.ExecEnds (one more
// word of each frame's environment read).
func WithExecBoundaries() ReadOption { return func(c *readConfig) { c.execBoundaries = true } }

// WithReusedFrames makes the read return the threads, and each thread's
// Frames, in slices the VM keeps and fills again at its next read with
// this option: the caller must be done with them by then. A sampler that
// copies what it keeps reads without allocating them.
func WithReusedFrames() ReadOption { return func(c *readConfig) { c.reuseFrames = true } }

// GCRead is the collector's phase as a read of the threads found it
// (WithGCPhase), or why it could not be read (Err; the phase is then
// GCIdle).
type GCRead struct {
	Phase GCPhase
	Err   error
}

// errGCNotRead is WithGCPhase's error when no thread was found.
var errGCNotRead = errors.New("the GC's flags were not read: no thread found")

// WithGCPhase makes ReadThreads read the collector's phase into r (GC),
// with what it reads of the threads, at no cost of its own.
func WithGCPhase(r *GCRead) ReadOption { return func(c *readConfig) { c.gc = r } }

// WithFrameBudget bounds how many control frames the stacks of one read
// take together, when n is above zero (a crash report reads a hostile
// process once): a stack cut short keeps its innermost frames and says so
// in its error (ErrFrameBudget).
func WithFrameBudget(n int) ReadOption { return func(c *readConfig) { c.frameBudget = n } }

// withReadOptions sets the options of the read that is starting;
// endRead ends it.
func (v *VM) withReadOptions(opts []ReadOption) {
	v.read = readConfig{}
	for _, o := range opts {
		o(&v.read)
	}
}

// endRead ends the read that withReadOptions started.
func (v *VM) endRead() { v.read = readConfig{} }

// Threads walks every ractor's threads and returns their stacks.
func (v *VM) Threads(opts ...ReadOption) ([]Thread, error) {
	return v.ReadThreads(func(Thread) bool { return true }, opts...)
}

// ReadThreads walks every ractor's threads and reads who they are (TID,
// name, status, GVL); it walks the stacks only of the threads withStack
// accepts (none when it is nil), as stacks are what costs.
//
// A sampler calls it on every tick, so it reads little: one batched read
// of the VM's, its ractors' and its threads' fields where the threads are
// those of the last read (walkThreads), one for what the threads point
// at (native threads' TIDs, names, execution contexts, and the GC's flags
// WithGCPhase), and one a stack (readFrames).
func (v *VM) ReadThreads(withStack func(Thread) bool, opts ...ReadOption) ([]Thread, error) {
	v.withReadOptions(opts)
	defer v.endRead()
	v.ra.begin()
	defer v.ra.end()
	if g := v.read.gc; g != nil {
		*g = GCRead{Err: errGCNotRead} // unless the threads are found
	}
	w, err := v.walkThreads()
	var out []Thread
	for gi, g := range w.groups {
		if gi >= len(w.addrs) {
			break
		}
		ths, ecs, ecBlocks := v.threads(w.addrs[gi], w.blocks[gi], gi == 0)
		for i := range ths {
			t := &ths[i]
			t.Main = t.Addr == w.main
			t.GVL = t.Addr == g.gvlOwner
			if t.Error == "" && withStack != nil && withStack(*t) {
				frames, err := v.stack(ecs[i], ecBlocks[i])
				t.Frames = frames
				if err != nil {
					t.Error = err.Error()
				}
			}
		}
		if out == nil {
			out = ths // one group, most often: no copy
		} else {
			out = append(out, ths...)
		}
	}
	if err != nil && len(w.groups) > 0 {
		err = fmt.Errorf("listing threads: %w", err)
	}
	return out, err
}

// ReadStacks reads into ths (from ReadThreads, perhaps a moment ago) the
// stacks of the threads withStack accepts, replacing their Frames and
// Error. Each thread's current execution context is read anew (a Fiber
// switch changes it), so the stacks are as of this call: the caller can
// list threads before it stops them and read only the stacks while they
// stand still. A thread that has ended since it was listed must not be
// passed: its memory may be freed.
func (v *VM) ReadStacks(ths []Thread, withStack func(Thread) bool, opts ...ReadOption) {
	v.withReadOptions(opts)
	defer v.endRead()
	for i := range ths {
		t := &ths[i]
		if !withStack(*t) {
			continue
		}
		t.Frames, t.Error = nil, ""
		ec, err := v.m.u64(at(t.Addr, v.Layout.ThreadEC))
		if err == nil {
			t.Frames, err = v.stack(ec, nil)
		}
		if err != nil {
			t.Error = err.Error()
		}
	}
}

// threadGroup is one list of threads and the GVL owner of those threads:
// a ractor's (3.0+) or, before ractors, the VM's.
type threadGroup struct {
	ractor   uint64 // the ractor's address; 0 for the VM's own group (2.7)
	head     uint64 // the address of the list head of the threads
	first    uint64 // the head's next node (the head itself when empty)
	gvlOwner uint64 // the rb_thread_t holding the GVL, 0 for none
}

// field is the offset of member sub of a struct found at off in another,
// or -1 where the layout lacks the outer one.
func field(off, sub int64) int64 {
	if off < 0 {
		return -1
	}
	return off + sub
}

// span is one read of the part of a struct that holds the fields a walk
// needs, so that several fields cost one read.
type span struct {
	lo int64
	b  []byte
}

// maxSpan bounds a span: a layout whose fields lie further apart than
// this is read field by field.
const maxSpan = 64 << 10

// spanOf returns the span that holds the 8-byte words at offs (the offsets
// below 0, fields the layout lacks, are left out), its bytes not yet read.
func spanOf(offs ...int64) (span, error) {
	lo, hi := int64(-1), int64(-1)
	for _, o := range offs {
		if o < 0 {
			continue
		}
		if lo < 0 || o < lo {
			lo = o
		}
		hi = max(hi, o+8)
	}
	if lo < 0 {
		return span{}, nil
	}
	if hi-lo > maxSpan {
		return span{}, fmt.Errorf("fields %d bytes apart: %w", hi-lo, ErrGarbage)
	}
	return span{lo: lo, b: make([]byte, hi-lo)}, nil
}

// readSpan reads, in one read, the 8-byte words at offs from base.
func (v *VM) readSpan(base uint64, offs ...int64) (span, error) {
	s, err := spanOf(offs...)
	if err != nil || len(s.b) == 0 {
		return s, err
	}
	return s, target.ReadFull(v.m.t, s.b, at(base, s.lo))
}

// u64 returns the word at off, and 0 for an offset the span does not hold
// (a field the layout lacks).
func (s span) u64(off int64) uint64 {
	if off < s.lo || off+8 > s.lo+int64(len(s.b)) {
		return 0
	}
	return le64(s.b, off-s.lo)
}

// vmFields are the offsets of the fields of the VM that a walk of its
// threads reads; ractorFields those of a ractor.
func vmFields(L *layout.Layout) []int64 {
	next := L.ListNodeNext
	return []int64{L.VMRactorMainThread, field(L.VMRactorSet, next), L.VMRactorMainRactor, field(L.VMLivingThreads, next), L.VMGVLOwner}
}

func ractorFields(L *layout.Layout) []int64 {
	next := L.ListNodeNext
	return []int64{field(L.RactorVMListNode, next), field(L.RactorThreadsSet, next), L.RactorGVLOwner}
}

// ractorGroup is ractor r's thread group, from its span (ractorFields),
// and the next node of the VM's list of ractors.
func ractorGroup(L *layout.Layout, r uint64, rs span) (threadGroup, uint64) {
	next := L.ListNodeNext
	return threadGroup{ractor: r, head: at(r, L.RactorThreadsSet), first: rs.u64(field(L.RactorThreadsSet, next)), gvlOwner: rs.u64(L.RactorGVLOwner)}, rs.u64(field(L.RactorVMListNode, next))
}

// vmGroup is the VM's own thread group, on a Ruby without ractors (2.7),
// from the VM's span (vmFields).
func vmGroup(L *layout.Layout, vm uint64, vs span) threadGroup {
	return threadGroup{head: at(vm, L.VMLivingThreads), first: vs.u64(field(L.VMLivingThreads, L.ListNodeNext)), gvlOwner: vs.u64(L.VMGVLOwner)}
}

// threadGroups lists the VM's thread lists, one per ractor or, on a Ruby
// without ractors (2.7), the VM's living threads, and returns the main
// thread's rb_thread_t.
func (v *VM) threadGroups(vm uint64) ([]threadGroup, uint64, error) {
	L := v.Layout
	vs, err := v.readSpan(vm, vmFields(v.Layout)...)
	if err != nil {
		return nil, 0, err
	}
	mainThread := vs.u64(L.VMRactorMainThread)
	if L.VMRactorSet < 0 {
		if L.VMLivingThreads < 0 {
			return nil, 0, fmt.Errorf("the layout has neither ractors nor the VM's living threads: %w", ErrGarbage)
		}
		return []threadGroup{vmGroup(v.Layout, vm, vs)}, mainThread, nil
	}
	// The ractors' list, each ractor's fields read with its next node.
	head := at(vm, L.VMRactorSet)
	var gs []threadGroup
	ractorOf := func(r uint64) (threadGroup, uint64, error) {
		rs, err := v.readSpan(r, ractorFields(v.Layout)...)
		if err != nil {
			return threadGroup{}, 0, err
		}
		g, next := ractorGroup(v.Layout, r, rs)
		return g, next, nil
	}
	for node := vs.u64(field(L.VMRactorSet, L.ListNodeNext)); node != head; {
		if node == 0 || len(gs) >= maxRactors {
			err = fmt.Errorf("ractor list at %#x is broken or too long: %w", head, ErrGarbage)
			break
		}
		var g threadGroup
		if g, node, err = ractorOf(node - uint64(L.RactorVMListNode)); err != nil {
			break
		}
		gs = append(gs, g)
	}
	if err != nil || len(gs) == 0 {
		main := vs.u64(L.VMRactorMainRactor)
		if main == 0 {
			return nil, 0, fmt.Errorf("no ractor found: %w", errors.Join(err, ErrGarbage))
		}
		g, _, err2 := ractorOf(main)
		if err2 != nil {
			return nil, 0, fmt.Errorf("no ractor found: %w", errors.Join(err, err2))
		}
		return []threadGroup{g}, mainThread, nil
	}
	return gs, mainThread, nil
}

// threadBlockLen is how much of an rb_thread_t one read takes: every field
// a thread's identity needs, and its list node.
func threadBlockLen(L *layout.Layout) int64 {
	size := L.ThreadName + 8
	for _, o := range []int64{L.ThreadSelf, L.ThreadEC, L.ThreadTID, L.ThreadNT, L.ThreadPthread, (L.ThreadStatusBit + L.ThreadStatusLen) / 8, L.ThreadListNode + L.ListNodeNext} {
		size = max(size, o+8)
	}
	return size
}

// threadBlocks walks a thread list: each rb_thread_t is read once, and
// that read gives the next node too. It returns the threads and their
// blocks, and what it found before an error.
func (v *VM) threadBlocks(g threadGroup) ([]uint64, [][]byte, error) {
	L := v.Layout
	size := int(threadBlockLen(v.Layout))
	var addrs []uint64
	var blocks [][]byte
	for node := g.first; node != g.head; {
		if node == 0 || len(addrs) >= maxThreads {
			return addrs, blocks, fmt.Errorf("list at %#x is broken or too long: %w", g.head, ErrGarbage)
		}
		th := node - uint64(L.ThreadListNode)
		b, err := v.m.read(th, size)
		if err != nil {
			return addrs, blocks, err
		}
		addrs, blocks = append(addrs, th), append(blocks, b)
		node = le64(b, L.ThreadListNode+L.ListNodeNext)
	}
	return addrs, blocks, nil
}

// thread reads one rb_thread_t and returns it with the address of its
// execution context; a failure is recorded in Thread.Error.
func (v *VM) thread(th uint64) (Thread, uint64) {
	b, err := v.m.read(th, int(threadBlockLen(v.Layout)))
	if err != nil {
		return Thread{Addr: th, Error: err.Error()}, 0
	}
	ths, ecs, _ := v.threads([]uint64{th}, [][]byte{b}, false)
	return ths[0], ecs[0]
}

// The ranges of threads' batched second read, per thread.
const (
	rangeTID  = iota // a native thread's TID
	rangeName        // the name's String
	rangeEC          // the execution context's stack fields
	rangesPerThread
)

// ecBlockLen is how much of an execution context readStackBounds reads.
func ecBlockLen(L *layout.Layout) int {
	return int(max(L.ECVMStack, L.ECVMStackSize, L.ECCFP) + 8)
}

// threads decodes the rb_thread_t blocks of addrs (threadBlocks) and
// returns the threads with the addresses of their execution contexts and
// those contexts' stack fields as read (nil where unread), for stack. What
// the threads point at, their native threads' TIDs, their names and their
// execution contexts, is read for all of them in one batched read; for
// the first group (first), the collector's flags too when the read asks
// for them (WithGCPhase), and its counts (checkCaches). The contexts and
// blocks returned are valid until the next call.
func (v *VM) threads(addrs []uint64, blocks [][]byte, first bool) ([]Thread, []uint64, [][]byte) {
	L := v.Layout
	var ths []Thread
	if v.read.reuseFrames && first {
		// The first group's threads, in the slice ReadThreads returns
		// when there is one group (most often).
		v.threadPool = grownThreads(v.threadPool, len(addrs))
		ths = v.threadPool
	} else {
		ths = make([]Thread, len(addrs))
	}
	// The second reads, into buffers kept between reads (a sampler reads
	// at every tick): rangesPerThread a thread, then the GC's flags and
	// its counts (checkCaches).
	sc := &v.idScratch
	sc.grow(len(addrs))
	ecs, ecBlocks := sc.ecs, sc.ecBlocks
	raddrs, bufs, ok, nts, names := sc.addrs, sc.bufs, sc.ok, sc.nts, sc.names
	gcRange := len(addrs) * rangesPerThread
	for i, b := range blocks {
		t := &ths[i]
		r := i * rangesPerThread
		t.Addr, t.Self = addrs[i], le64(b, L.ThreadSelf)
		ecs[i] = le64(b, L.ThreadEC)
		switch {
		case L.ThreadTID < 0 && L.ThreadNT < 0 && L.ThreadPthread >= 0:
			// No TID of its own (2.7): the C library's struct pthread has it.
			t.TID = v.tidOfPthread(le64(b, L.ThreadPthread))
		case L.ThreadTID >= 0:
			t.TID = v.ownTID(int(int32(le32(b, L.ThreadTID))))
		case L.ThreadNT >= 0 && L.NativeThreadTID >= 0:
			if nts[i] = le64(b, L.ThreadNT); nts[i] != 0 {
				raddrs[r+rangeTID], bufs[r+rangeTID] = at(nts[i], L.NativeThreadTID), sc.buf(r+rangeTID, 4)
			}
		}
		t.Status = threadStatus(v.Layout, b)
		if names[i] = le64(b, L.ThreadName); v.IsHeapObject(names[i]) {
			raddrs[r+rangeName], bufs[r+rangeName] = names[i], sc.buf(r+rangeName, v.names.readLen(names[i], strHeaderLen(L)))
		}
		if ecs[i] != 0 {
			raddrs[r+rangeEC], bufs[r+rangeEC] = ecs[i], sc.buf(r+rangeEC, ecBlockLen(v.Layout))
		}
	}
	var gcErr error
	if g := v.read.gc; first && g != nil {
		var addr uint64
		var n int
		if addr, n, gcErr = v.GCFlags(); gcErr == nil {
			raddrs[gcRange], bufs[gcRange] = addr, sc.buf(gcRange, n)
		}
	}
	// A core's memory does not change: its caches need no check.
	countsRange, counts := gcRange+1, false
	if first && v.live {
		var addr uint64
		var n int
		if addr, n, counts = v.gcCounts(); counts {
			raddrs[countsRange], bufs[countsRange] = addr, sc.buf(countsRange, n)
		}
	}
	v.readBatchAhead(raddrs, bufs, ok, true)
	if first && v.live {
		// Before any stack is read through the caches.
		v.checkCaches(v.Layout, bufs[countsRange], counts && ok[countsRange])
	}
	if g := v.read.gc; first && g != nil {
		switch {
		case gcErr != nil:
			*g = GCRead{Phase: GCIdle, Err: gcErr}
		case !ok[gcRange]:
			phase, err := v.GC() // read alone, for its error
			*g = GCRead{Phase: phase, Err: err}
		default:
			*g = GCRead{Phase: v.GCPhaseFrom(bufs[gcRange])}
		}
	}
	for i, b := range blocks {
		t := &ths[i]
		r := i * rangesPerThread
		if nts[i] != 0 {
			if ok[r+rangeTID] {
				t.TID = v.ownTID(int(int32(le32(bufs[r+rangeTID], 0))))
			}
			if t.TID <= 0 && L.NativeThreadPthread >= 0 {
				// A thread just born has not written its tid yet; its
				// struct pthread had it from clone.
				if pt, err := v.m.u64(at(nts[i], L.NativeThreadPthread)); err == nil {
					t.TID = v.tidOfPthread(pt)
				}
			}
		}
		if t.TID <= 0 && L.ThreadTID >= 0 && L.ThreadPthread >= 0 {
			t.TID = v.tidOfPthread(le64(b, L.ThreadPthread)) // as above (3.1's own tid)
		}
		if len(bufs[r+rangeName]) > 0 && ok[r+rangeName] {
			t.Name = v.threadName(names[i], bufs[r+rangeName])
		}
		if len(bufs[r+rangeEC]) > 0 && ok[r+rangeEC] {
			ecBlocks[i] = bufs[r+rangeEC]
		}
	}
	return ths, ecs, ecBlocks
}

// grownThreads returns ths resized to n zero Threads, reallocated only to
// grow.
func grownThreads(ths []Thread, n int) []Thread {
	if cap(ths) < n {
		return make([]Thread, n)
	}
	ths = ths[:n]
	clear(ths)
	return ths
}

// grown returns *buf resized to n bytes, reallocated only to grow.
func grown(buf *[]byte, n int) []byte {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return (*buf)[:n]
}

// idScratch holds the buffers of threads' batched second reads, kept
// between reads and grown as needed.
type idScratch struct {
	addrs      []uint64
	bufs, keep [][]byte
	ok         []bool
	nts, names []uint64
	ecs        []uint64
	ecBlocks   [][]byte
}

// grow readies the buffers for n threads, the GC's flags and its counts,
// every range empty.
func (sc *idScratch) grow(n int) {
	ranges := n*rangesPerThread + 2
	if len(sc.addrs) < ranges {
		sc.addrs, sc.bufs, sc.ok = make([]uint64, ranges), make([][]byte, ranges), make([]bool, ranges)
		sc.keep = make([][]byte, ranges)
		sc.nts, sc.names = make([]uint64, n), make([]uint64, n)
		sc.ecs, sc.ecBlocks = make([]uint64, n), make([][]byte, n)
	}
	sc.addrs, sc.bufs, sc.ok = sc.addrs[:ranges], sc.bufs[:ranges], sc.ok[:ranges]
	sc.nts, sc.names, sc.ecs, sc.ecBlocks = sc.nts[:n], sc.names[:n], sc.ecs[:n], sc.ecBlocks[:n]
	clear(sc.addrs)
	clear(sc.bufs)
	clear(sc.nts)
	clear(sc.names)
	clear(sc.ecs)
	clear(sc.ecBlocks)
}

// buf returns range i's buffer of n bytes, reusing the one kept for it.
func (sc *idScratch) buf(i, n int) []byte {
	if cap(sc.keep[i]) < n {
		sc.keep[i] = make([]byte, n)
	}
	return sc.keep[i][:n]
}

// threadStatus decodes Thread#status from a thread's block.
func threadStatus(L *layout.Layout, b []byte) string {
	word := le64(b, L.ThreadStatusBit/8)
	switch int64(word>>uint64(L.ThreadStatusBit%8)) & (1<<uint64(L.ThreadStatusLen) - 1) {
	case L.ThreadRunnable:
		return "run"
	case L.ThreadStopped, L.ThreadStoppedForever:
		return "sleep"
	case L.ThreadKilled:
		return "dead"
	}
	return "unknown"
}

// VMStack returns the VM stack that thread th (a Thread's Addr) runs on
// now, [lo, hi): its current execution context's vm_stack and
// vm_stack_size. Ruby 3.0 and later allocate a thread's VM stack on its
// machine stack (thread_start_func_2's alloca of thread_vm_stack_size,
// 1 MiB by default), so the native frame that starts the thread holds
// it; the main thread's and a Fiber's are allocated apart.
func (v *VM) VMStack(th uint64) (lo, hi uint64, err error) {
	ec, err := v.m.u64(at(th, v.Layout.ThreadEC))
	if err != nil {
		return 0, 0, err
	}
	st, err := v.readStackBounds(ec, nil)
	if err != nil {
		return 0, 0, err
	}
	return st.vmStack, st.end, nil
}

type stackBounds struct {
	vmStack uint64 // lowest address of the VM stack
	end     uint64 // one past the last control frame
	cfp     uint64 // innermost control frame
}

// readStackBounds reads an execution context's VM stack and checks that its
// control frame pointer lies inside it, on a frame boundary. b, when not
// nil, holds the context's stack fields as already read (ecBlockLen bytes).
func (v *VM) readStackBounds(ec uint64, b []byte) (stackBounds, error) {
	L := v.Layout
	if ec == 0 {
		return stackBounds{}, fmt.Errorf("thread has no execution context: %w", ErrGarbage)
	}
	if len(b) < ecBlockLen(v.Layout) {
		var err error
		if b, err = v.m.read(ec, ecBlockLen(v.Layout)); err != nil {
			return stackBounds{}, err
		}
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

// stack reads the Ruby frames of an execution context, innermost first;
// ecBlock, when not nil, is the context's stack fields as already read.
func (v *VM) stack(ec uint64, ecBlock []byte) ([]Frame, error) {
	L := v.Layout
	st, err := v.readStackBounds(ec, ecBlock)
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
	raw, err := v.readFrames(st, n)
	if err != nil {
		return nil, err
	}
	defer v.endWalk(st.vmStack)
	// At most n frames: the appends below never grow the slice.
	var frames []Frame
	if r := &v.read; r.reuseFrames {
		// Into a slice of the VM's, one for each stack of the read.
		for len(v.framePool) <= r.stacks {
			v.framePool = append(v.framePool, nil)
		}
		if uint64(cap(v.framePool[r.stacks])) < n {
			v.framePool[r.stacks] = make([]Frame, 0, n)
		}
		frames = v.framePool[r.stacks][:0]
		r.stacks++
	} else {
		frames = make([]Frame, 0, n)
	}
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
		if err != nil && v.MayBeHalfPushed(int(i)) {
			continue
		}
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

// readFrames reads n control frames from st.cfp, and with them, in the
// same batched read, what the walk of their environments will want: the
// value stack below them up to the innermost frame's sp, where most
// environments lie (read once, not a word at a time), and the
// environments outside it (on the heap) that the last walk of this stack
// read one by one. Neither is known before the frames are read, so the
// read takes what the last walk of the stack needed (stackHint) and reads
// again only what falls outside: a thread sampled again and again mostly
// stands at about the same depth. The reads go into buffers kept between
// reads (a sampler reads at every tick): nothing returned points into
// them. It sets v.env and v.envPre for the walk; endWalk ends it.
func (v *VM) readFrames(st stackBounds, n uint64) ([]byte, error) {
	L := v.Layout
	raw := grown(&v.stackBufs[0], int(n)*int(L.CFPSize))
	h := v.hints[st.vmStack]
	if h == nil {
		if v.hints == nil || len(v.hints) >= maxStackHints {
			v.hints = map[uint64]*stackHint{}
		}
		h = &stackHint{}
		v.hints[st.vmStack] = h
	}
	guess := min(h.valueStack, st.cfp-st.vmStack, maxValueStackRead)
	if L.CFPSP < 0 {
		guess = 0 // no sp to check the guess against
	}
	b := &v.frameBatch
	b.addrs = append(b.addrs[:0], st.cfp, st.vmStack)
	b.bufs = append(b.bufs[:0], raw, grown(&v.stackBufs[1], int(guess)))
	v.envPre = v.envPre[:0]
	for i, e := range h.envs {
		if i >= len(v.envBufs) {
			v.envBufs = append(v.envBufs, nil)
		}
		b.addrs, b.bufs = append(b.addrs, e.addr), append(b.bufs, grown(&v.envBufs[i], e.n))
	}
	for len(b.ok) < len(b.bufs) {
		b.ok = append(b.ok, false)
	}
	b.ok = b.ok[:len(b.bufs)]
	// The next call of ReadThreads reads the frames ahead, a few more
	// than now (a thread may be deeper by then).
	v.ra.note(max(st.vmStack, st.cfp-frameSlack*uint64(L.CFPSize)), int(st.end-max(st.vmStack, st.cfp-frameSlack*uint64(L.CFPSize))))
	v.readBatchAhead(b.addrs, b.bufs, b.ok, false)
	raw = b.bufs[0]
	for i, e := range h.envs {
		v.envPre = append(v.envPre, envData{addr: e.addr, b: b.bufs[2+i], ok: b.ok[2+i]})
	}
	if !b.ok[0] {
		// Read alone, for its error.
		if err := target.ReadFull(v.m.t, raw, st.cfp); err != nil {
			return nil, err
		}
	}
	v.env, v.envMiss = valueStack{}, v.envMiss[:0]
	if sp := cfpSP(raw, L.CFPSP); sp > st.vmStack && sp-st.vmStack <= maxValueStackRead {
		need := sp - st.vmStack
		vs := b.bufs[1] // as much as the batch read
		if !b.ok[1] || need > uint64(len(vs)) {
			vs = grown(&v.stackBufs[1], int(need))
			if target.ReadFull(v.m.t, vs, st.vmStack) != nil {
				vs = nil
			}
		}
		if vs != nil {
			v.env = valueStack{base: st.vmStack, b: vs[:need]}
		}
		h.valueStack = (need + valueStackSlack + 511) &^ 511
		v.ra.note(st.vmStack, int(min(h.valueStack, st.cfp-st.vmStack, maxValueStackRead)))
	}
	return raw, nil
}

// frameSlack is how many more control frames than a walk read the next
// call of ReadThreads reads ahead.
const frameSlack = 16

// readBatchAhead reads the ranges of addrs into bufs as target.ReadBatch
// does, but takes each range that was read ahead (readAhead) from there,
// its buffer replaced by those bytes, and reads only the others; with note,
// it notes every range for the next call to read ahead.
func (v *VM) readBatchAhead(addrs []uint64, bufs [][]byte, ok []bool, note bool) {
	b := &v.aheadBatch
	b.addrs, b.bufs, b.idx = b.addrs[:0], b.bufs[:0], b.idx[:0]
	for i := range bufs {
		if ok[i] = len(bufs[i]) == 0; ok[i] {
			continue
		}
		if note {
			v.ra.note(addrs[i], len(bufs[i]))
		}
		if d, hit := v.ra.take(addrs[i], len(bufs[i])); hit {
			bufs[i], ok[i] = d, true
			continue
		}
		b.addrs, b.bufs, b.idx = append(b.addrs, addrs[i]), append(b.bufs, bufs[i]), append(b.idx, i)
	}
	if len(b.bufs) == 0 {
		return
	}
	for len(b.ok) < len(b.bufs) {
		b.ok = append(b.ok, false)
	}
	b.ok = b.ok[:len(b.bufs)]
	target.ReadBatch(v.m.t, b.addrs, b.bufs, b.ok)
	for j, i := range b.idx {
		ok[i] = b.ok[j]
	}
}

// endWalk ends the walk of the stack at vmStack: the environments it read
// one by one are those the next walk of that stack reads with its frames,
// and the next call of ReadThreads reads ahead.
func (v *VM) endWalk(vmStack uint64) {
	if h := v.hints[vmStack]; h != nil {
		h.envs = append(h.envs[:0], v.envMiss...)
		for _, e := range h.envs {
			v.ra.note(e.addr, e.n)
		}
	}
	v.env, v.envPre, v.envMiss = valueStack{}, v.envPre[:0], v.envMiss[:0]
}

// stackHint is what the last walk of a VM stack (by its lowest address)
// read: how much of its value stack, and the environments outside it.
type stackHint struct {
	valueStack uint64
	envs       []envAt
}

// envAt is a range of an environment a walk read from the target.
type envAt struct {
	addr uint64
	n    int
}

// envData is an environment read with the frames (readFrames).
type envData struct {
	addr uint64
	b    []byte
	ok   bool
}

// batch is the ranges of a batched read, kept between reads (idx: where
// each came from, for readBatchAhead).
type batch struct {
	addrs []uint64
	bufs  [][]byte
	ok    []bool
	idx   []int
}

// Bounds of the hints readFrames keeps: stacks (threads, fibers) hinted
// at, environments a stack, and how much more of a value stack than the
// last walk needed a read takes.
const (
	maxStackHints   = 1024
	maxHintEnvs     = 16
	valueStackSlack = 1024
)

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

// MayBeHalfPushed reports whether the control frame i frames from the
// innermost (0) may be one the VM is still writing, as a thread can be
// caught at any instruction. On a Ruby that makes a new frame the
// thread's current one before it fills it in (Layout.CFPPublishedFirst),
// the innermost frame holds, for a few instructions, what an earlier
// frame left in its slot. Such a frame that does not decode is left out
// of the stack, not shown as unreadable: the thread is in its caller,
// making the call. (One that decodes shows the earlier frame; that is not
// told apart.)
func (v *VM) MayBeHalfPushed(i int) bool {
	return i == 0 && v.Layout.CFPPublishedFirst != 0
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
			if info.young {
				v.noteYoung(cacheLine, iseq, pc)
			}
		}
		// Without its owner (an environment that cannot be read) the
		// frame keeps its path and line, under the bare label; an
		// environment that cannot be its own makes the frame unreadable.
		owner, bmethod, err := v.frameOwner(ep)
		if errors.Is(err, errForeignEnv) {
			return Frame{}, false, err
		}
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
			if info.young || v.ownerYoung(owner) {
				v.noteYoung(cacheLabel, iseq, owner)
			}
		}
		f := Frame{Kind: KindRuby, Label: label, BaseLabel: info.baseLabel, Path: info.path, Line: line}
		if bmethod != 0 {
			if _, name, err := v.methodName(bmethod); err == nil && name != "?" {
				f.Method = name
			}
		}
		return f, true, nil
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
	owner, name, err := v.methodName(me)
	if err != nil {
		return Frame{}, false, err
	}
	label := v.methodLabel(owner, name)
	if name != "?" {
		v.cfuncs[meCref] = label
		if v.youngAt(meCref) || v.ownerYoung(owner) {
			v.noteYoung(cacheCFunc, meCref, 0)
		}
	}
	return Frame{Kind: KindCFunc, Label: label}, true, nil
}

// methodName returns the owner of method entry me and the method's name as
// it was defined (its definition's original ID: an alias names the
// original), "?" where the name cannot be read.
func (v *VM) methodName(me uint64) (owner uint64, name string, err error) {
	L := v.Layout
	b, err := v.m.read(me, int(max(L.MEOwner, L.MEDef, L.MECalledID)+8))
	if err != nil {
		return 0, "", err
	}
	id := le64(b, L.MECalledID)
	if def := le64(b, L.MEDef); def != 0 {
		if orig, err := v.m.u64(at(def, L.DefOriginalID)); err == nil {
			id = orig
		}
	}
	if name, err = v.IDName(id); err != nil {
		name = "?"
	}
	return le64(b, L.MEOwner), name, nil
}

// errForeignEnv means a Ruby frame whose environment is not a Ruby
// frame's (a C function's, or no frame's): one caught half pushed (see
// MayBeHalfPushed), or garbage.
var errForeignEnv = fmt.Errorf("a Ruby frame whose environment is not a Ruby frame's: %w", ErrGarbage)

// rubyFrameMagic reports whether magic (an environment's flags under
// VM_FRAME_MAGIC_MASK) is the type of a frame that runs an iseq.
func rubyFrameMagic(L *layout.Layout, magic int64) bool {
	switch magic {
	case L.FrameMagicMethod, L.FrameMagicBlock, L.FrameMagicClass, L.FrameMagicTop, L.FrameMagicEval, L.FrameMagicRescue:
		return true
	}
	return false
}

// frameOwner returns the owner of the method a Ruby frame runs in, found
// as rb_vm_frame_method_entry finds it: the first method entry on the way
// from the frame's environment to its local one; 0 for code outside any
// method (top level, class bodies). bmethod is the method entry of a
// method defined with define_method whose block the frame runs (a bmethod
// frame: Ruby pushes the block's frame with the method entry in its own,
// not local, environment; other block frames hold a cref or nothing
// there), 0 for any other frame.
func (v *VM) frameOwner(ep uint64) (owner, bmethod uint64, err error) {
	L := v.Layout
	if ep == 0 {
		return 0, 0, nil
	}
	lo := min(L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags)
	n := int(max(L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags)-lo+1) * 8
	for depth := 0; depth < maxIseqNesting; depth++ {
		env, err := v.envRead(uint64(int64(ep)+lo*8), n)
		if err != nil {
			return 0, 0, err
		}
		word := func(i int64) uint64 { return le64(env, (i-lo)*8) }
		if depth == 0 && !rubyFrameMagic(v.Layout, int64(word(L.EnvIndexFlags))&L.FrameMagicMask) {
			return 0, 0, errForeignEnv
		}
		local := int64(word(L.EnvIndexFlags))&L.EnvFlagLocal != 0
		meCref := word(L.EnvIndexMECref)
		if owner, ok := v.owners[meCref]; ok && local {
			return owner, 0, nil
		}
		if me, ok := v.methodEntryOf(meCref, local); ok {
			owner, err := v.m.u64(at(me, L.MEOwner))
			if err != nil {
				return 0, 0, err
			}
			if depth == 0 && !local {
				return owner, me, nil
			}
			if local {
				v.owners[meCref] = owner
				if v.youngAt(meCref) {
					v.noteYoung(cacheOwner, meCref, 0)
				}
			}
			return owner, 0, nil
		}
		if local {
			v.owners[meCref] = 0 // a cref: code outside any method
			if v.youngAt(meCref) {
				v.noteYoung(cacheOwner, meCref, 0)
			}
			return 0, 0, nil
		}
		if ep = word(L.EnvIndexSpecval) &^ uint64(L.EnvGuardMask); ep == 0 { // VM_ENV_PREV_EP
			return 0, 0, nil
		}
	}
	return 0, 0, fmt.Errorf("environment chain too long: %w", ErrGarbage)
}

// methodEntryOf is check_method_entry: obj (an ep[me_cref] value) as a
// method entry, looking through a svar when canBeSvar.
func (v *VM) methodEntryOf(obj uint64, canBeSvar bool) (uint64, bool) {
	L := v.Layout
	if !v.IsHeapObject(obj) {
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
	// Read with the frames, as the last walk of this stack needed it.
	for _, e := range v.envPre {
		if e.ok && addr >= e.addr && addr-e.addr+uint64(n) <= uint64(len(e.b)) {
			v.hintEnv(e.addr, len(e.b))
			return e.b[addr-e.addr : addr-e.addr+uint64(n)], nil
		}
	}
	v.hintEnv(addr, n)
	return v.m.read(addr, n)
}

// hintEnv notes that the walk under way needed n bytes at addr outside its
// value stack, for the next walk of the stack to read with its frames.
func (v *VM) hintEnv(addr uint64, n int) {
	if v.env.b == nil || len(v.envMiss) >= maxHintEnvs {
		return // no walk of a stack under way, or enough noted
	}
	for _, e := range v.envMiss {
		if e.addr == addr && e.n >= n {
			return
		}
	}
	v.envMiss = append(v.envMiss, envAt{addr: addr, n: n})
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
