// Package unwind walks a thread's native stack from its registers with the
// call frame information (CFI: .eh_frame, else .debug_frame) of the code it
// runs, as a debugger does: no frame pointers, no stack scanning. It works
// on whatever target.Target offers (a live process whose thread stands
// still, or a core), and every loop in it is bounded: the stack and the
// files it reads belong to the target, which may be hostile.
package unwind

import (
	"bytes"
	"debug/dwarf"
	encbin "encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/libc"
	"github.com/rbscope/rbscope/internal/target"
)

// Frame is one native frame.
type Frame struct {
	// PC is the frame's program counter: where its thread stands for the
	// first frame and the frame a signal interrupted, else the return
	// address into it.
	PC uint64
	// CFA is the frame's canonical frame address (the stack pointer in its
	// caller just before the call), and Size the bytes of stack the frame
	// holds: its CFA less the CFA of the frame it called (less the stack
	// pointer, for the first frame). 0 when unknown.
	CFA  uint64
	Size uint64
	// Object is the mapped file the pc lies in ("[jit]" for anonymous
	// code, the kernel's name such as "[vdso]", "?" outside every
	// mapping), and Offset the pc's place in its link-time address space (what
	// addr2line and objdump take).
	Object string
	Offset uint64
	// Function is the symbol that holds the pc, and FuncOffset the pc's
	// distance from its start; "" when no symbol is known to hold it (an
	// address is never named after a symbol that lies before its
	// function's CFI range).
	Function   string
	FuncOffset uint64
	// Signal is set on the kernel's signal frame (__restore_rt): the
	// signal that was being handled and its si_addr; the next frame is
	// the one it interrupted.
	Signal *Signal
	// FuncStart is the link-time start of the function that holds the pc:
	// its symbol's, else its CFI range's (a name for an unnamed function
	// that every pc in it shares).
	FuncStart uint64
	// File and Line are the source line of the pc, from the object's DWARF
	// line table, when Lines found one.
	File string
	Line int

	lookup uint64 // the address the frame's CFI and symbol are found by
}

// Signal is what a signal frame says of the signal it delivered.
type Signal struct {
	Number int
	Addr   uint64
}

// Name is how a frame reads: its function (+offset), else object+offset
// ("[jit]" alone for generated code).
func (f Frame) Name() string {
	if strings.HasPrefix(f.Object, "[") {
		return f.Object
	}
	if f.Function != "" {
		if f.FuncOffset != 0 {
			return fmt.Sprintf("%s+%#x", f.Function, f.FuncOffset)
		}
		return f.Function
	}
	return fmt.Sprintf("%s+%#x", filepath.Base(f.Object), f.Offset)
}

// nRegs bounds the DWARF register numbers a walk keeps: the largest
// architecture's general registers (arch.Arch.DWARF).
const nRegs = 33

// Regs are a thread's registers by DWARF number, with which are known, and
// the architecture whose numbering they follow.
type Regs struct {
	a     *arch.Arch
	v     [nRegs]uint64
	known [nRegs]bool
}

// FromTarget takes the registers of a stopped thread or a core's thread.
func FromTarget(r target.Regs) Regs {
	out := Regs{a: r.Arch}
	if r.Arch == nil {
		return out
	}
	for n, i := range r.Arch.DWARF {
		if i >= 0 && i < len(r.V) && n < nRegs {
			out.set(n, r.V[i])
		}
	}
	return out
}

func (r *Regs) set(n int, v uint64) { r.v[n], r.known[n] = v, true }

func (r *Regs) get(n uint64) (uint64, bool) {
	if n >= nRegs || !r.known[n] {
		return 0, false
	}
	return r.v[n], true
}

// pc and sp are the frame's program counter and stack pointer.
func (r *Regs) pc() (uint64, bool) { return r.get(uint64(r.a.DWARFPC)) }
func (r *Regs) sp() (uint64, bool) { return r.get(uint64(r.a.DWARFSP)) }

// Budgets: a walk ends after MaxFrames frames, and an object's CFI is not
// read past maxCFIBytes.
const (
	MaxFrames   = 512
	maxCFIBytes = 64 << 20
	// maxFrameSize: a frame larger than this is no frame but the step
	// from one stack to another (a signal handler's alternate stack).
	maxFrameSize = 256 << 20
)

// muslNoCFI says why a walk stops in musl's C library: musl is built with
// -fno-asynchronous-unwind-tables, so its .eh_frame covers a few assembly
// routines only, and without frame pointers (-fomit-frame-pointer) nothing
// else says where a C function's caller is. Its debug file (Alpine's
// musl-dbg) holds .debug_frame, which rbscope reads where the file has no
// entry for the pc.
const muslNoCFI = "musl's C library has call frame information for none of its C functions (install its debug file: apk add musl-dbg on Alpine)"

// Stop reasons, for an unwind that ended before the outermost frame.
var (
	ErrNoCFI       = errors.New("no call frame information")
	ErrUnmapped    = errors.New("the pc lies outside every mapping")
	ErrStackLoop   = errors.New("the frame chain does not move up the stack")
	ErrUnreadable  = errors.New("a saved register cannot be read")
	ErrBadCFI      = errors.New("the call frame information cannot be used")
	ErrFrameBudget = fmt.Errorf("more than %d frames", MaxFrames)
)

// Unwinder unwinds the threads of one target. It keeps each object's CFI
// and symbols for its life (and the CFI per build ID for the process's).
type Unwinder struct {
	t    target.Target
	maps []target.Mapping   // sorted by start
	objs map[string]*object // by mapping path
	mem  stackMem           // the stack window, reused from walk to walk
}

// New makes an unwinder for t, whose mappings are maps.
func New(t target.Target, maps []target.Mapping) *Unwinder {
	sorted := slices.Clone(maps)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	return &Unwinder{t: t, maps: sorted, objs: map[string]*object{}, mem: stackMem{t: t}}
}

// Close closes the files the unwinder opened.
func (u *Unwinder) Close() {
	for _, o := range u.objs {
		if o != nil { // nil: a mapping without CFI rbscope reads
			o.im.Close()
		}
	}
	u.objs = map[string]*object{}
}

// Unwind walks the stack of the thread whose registers are regs, innermost
// frame first, and returns the frames it found, not yet named (see
// Symbolize). The error says why the
// walk stopped before the outermost frame (nil when it reached it); the
// frames before that stay valid.
func (u *Unwinder) Unwind(regs Regs) ([]Frame, error) {
	var frames []Frame
	if regs.a == nil {
		return nil, fmt.Errorf("%w: no registers", ErrUnreadable)
	}
	mem := &u.mem
	mem.base, mem.buf = 0, mem.buf[:0] // the stack moved since the last walk
	prevCFA, _ := regs.sp()
	exact := true // the pc is where the thread stands, not a return address
	for len(frames) < MaxFrames {
		pc, ok := regs.pc()
		if !ok || pc == 0 {
			return frames, nil // the outermost frame
		}
		lookup := pc
		if !exact {
			lookup = pc - 1 // inside the call instruction
		}
		f := Frame{PC: pc, Object: "?"}
		m, ok := u.mapping(lookup)
		if !ok {
			frames = append(frames, f)
			return frames, fmt.Errorf("%w (%#x)", ErrUnmapped, pc)
		}
		f.Object = m.Path
		if next, ok := u.sigreturn(&regs, pc, mem); ok {
			// The signal trampoline, without CFI: the interrupted
			// thread's registers are in the kernel's signal frame.
			if m.Path == "" {
				f.Object = "[signal trampoline]"
			}
			f.Offset = pc - m.Start
			f.Signal = signalAt(&regs, mem)
			frames = append(frames, f)
			exact = true
			prevCFA, _ = next.sp()
			regs = next
			continue
		}
		o := u.object(m)
		if o == nil || o.cfi == nil {
			if m.Path == "" {
				f.Object = "[jit]" // executable anonymous memory: generated code
			}
			f.Offset = lookup - m.Start
			if o != nil {
				f.lookup = lookup // its symbols may name it
			}
			frames = append(frames, f)
			return frames, fmt.Errorf("%w for %s", ErrNoCFI, f.Object)
		}
		f.Offset = pc - o.im.Bias
		f.lookup = lookup
		at := o.at(lookup)
		row, err := at.row, at.err
		if at.fde != nil {
			f.FuncStart = at.fde.begin
		}
		if err != nil {
			frames = append(frames, f)
			if errors.Is(err, ErrNoCFI) && libc.IsMusl(m.Path) {
				return frames, fmt.Errorf("%s: %w: %s", filepath.Base(f.Object), err, muslNoCFI)
			}
			return frames, fmt.Errorf("%s: %w", filepath.Base(f.Object), err)
		}
		cfa, err := row.cfa(&regs, mem)
		if err != nil {
			frames = append(frames, f)
			return frames, fmt.Errorf("%s: %w", f.Name(), err)
		}
		f.CFA = cfa
		if cfa > prevCFA && cfa-prevCFA <= maxFrameSize && !row.signal {
			f.Size = cfa - prevCFA // else another stack: a signal's (sigaltstack)
		}
		next, err := row.caller(&regs, cfa, mem)
		if err != nil {
			frames = append(frames, f)
			return frames, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if row.signal {
			f.Signal = signalAt(&regs, mem)
		}
		frames = append(frames, f)
		if _, ok := next.pc(); !ok {
			return frames, nil // the outermost frame
		}
		nsp, _ := next.sp()
		// The caller's stack pointer lies above the frame's; a leaf
		// function that keeps its return address in the link register
		// (arm64) leaves it where it was, and only the pc moves.
		npc, _ := next.pc()
		if !row.signal && len(frames) > 1 && (nsp < prevCFA || nsp == prevCFA && (npc == pc || !regs.a.LinkRegister)) {
			return frames, ErrStackLoop
		}
		exact = row.signal // the next frame is the interrupted one
		prevCFA = cfa
		if row.signal {
			prevCFA = nsp
		}
		regs = next
	}
	return frames, ErrFrameBudget
}

// at returns what the object says of the pc lookup (a run-time
// address): its CFI row and the function that holds it, from the cache of
// pcs already seen (a profiler sees the same few thousand again and again).
func (o *object) at(lookup uint64) *pcInfo {
	if pi, ok := o.pcs[lookup]; ok {
		return pi
	}
	if len(o.pcs) >= maxCachedPCs {
		clear(o.pcs)
	}
	pi := &pcInfo{err: ErrNoCFI}
	if o.cfi != nil {
		pi.row, pi.fde, pi.err = o.cfi.row(lookup - o.im.Bias)
	}
	o.pcs[lookup] = pi
	return pi
}

// Symbolize names the frames Unwind returned (Function, FuncOffset): it
// reads symbol tables, which need not be read while the thread stands
// still, and only those of the objects the frames lie in.
func (u *Unwinder) Symbolize(frames []Frame) {
	for i := range frames {
		f := &frames[i]
		o := u.objs[f.Object]
		if o == nil || f.lookup == 0 {
			continue
		}
		pi := o.at(f.lookup)
		if !pi.named {
			pi.named = true
			// The function symbol that holds the pc; one without a size
			// holds it only if it starts within the CFI range of the pc's
			// function: else it is another, earlier function, and the
			// frame is object+offset.
			if name, start, size, ok := o.im.FunctionAt(f.lookup); ok && !(size == 0 && pi.fde != nil && start < pi.fde.begin) {
				pi.function, pi.start = name, start
			}
		}
		if pi.function != "" {
			f.Function, f.FuncOffset, f.FuncStart = pi.function, f.PC-o.im.Bias-pi.start, pi.start
		}
	}
}

// Lines finds each frame's source file and line in the DWARF line table of
// its object (its own, or its separate debug file's), where there is one.
// Reading debug information takes long (half a second for a debug build
// of libruby), so it is asked for apart from Symbolize.
func (u *Unwinder) Lines(frames []Frame) {
	for i := range frames {
		f := &frames[i]
		o := u.objs[f.Object]
		if o == nil || f.lookup == 0 {
			continue
		}
		if o.lines == nil {
			o.lines = map[dwarf.Offset]*dwarf.LineReader{}
			o.dwarf = o.im.DWARF()
		}
		if o.dwarf == nil {
			continue
		}
		pc := f.lookup - o.im.Bias
		cu, err := o.dwarf.Reader().SeekPC(pc)
		if err != nil || cu == nil {
			continue
		}
		lr, ok := o.lines[cu.Offset]
		if !ok {
			lr, _ = o.dwarf.LineReader(cu)
			o.lines[cu.Offset] = lr
		}
		var le dwarf.LineEntry
		if lr != nil && lr.SeekPC(pc, &le) == nil && le.File != nil {
			f.File, f.Line = le.File.Name, le.Line
		}
	}
}

// pcInfo is what an object says of one pc.
type pcInfo struct {
	row *row
	fde *fdeRange
	err error
	// function and start name the pc, once named is set (Symbolize).
	named    bool
	function string
	start    uint64 // the function's link-time start
}

// maxCachedPCs bounds each object's cache of pcs.
const maxCachedPCs = 1 << 16

// mapping returns the mapping that holds addr (u.maps is sorted by start).
func (u *Unwinder) mapping(addr uint64) (target.Mapping, bool) {
	i := sort.Search(len(u.maps), func(i int) bool { return u.maps[i].End > addr })
	if i < len(u.maps) && u.maps[i].Contains(addr) {
		return u.maps[i], true
	}
	return target.Mapping{}, false
}

// sigreturn reports whether pc is the architecture's signal trampoline
// (arch.Arch.SigreturnCode), and if so returns the registers of the
// thread the signal interrupted, from the signal frame at the stack
// pointer.
func (u *Unwinder) sigreturn(regs *Regs, pc uint64, mem target.Reader) (Regs, bool) {
	a := regs.a
	if len(a.SigreturnCode) == 0 {
		return Regs{}, false
	}
	code := make([]byte, len(a.SigreturnCode))
	if err := target.ReadFull(u.t, code, pc); err != nil || !bytes.Equal(code, a.SigreturnCode) {
		return Regs{}, false
	}
	sp, ok := regs.sp()
	if !ok {
		return Regs{}, false
	}
	raw := make([]byte, 8*len(a.Regs))
	if err := target.ReadFull(mem, raw, sp+a.SigframeRegs); err != nil {
		return Regs{}, false
	}
	v := make([]uint64, len(a.Regs))
	for i := range v {
		v[i] = encbin.LittleEndian.Uint64(raw[8*i:])
	}
	return FromTarget(target.Regs{Arch: a, V: v}), true
}

// signalAt reads the siginfo of the signal frame whose registers are regs
// (arch.Arch.SiginfoInFrame says where the kernel put it).
func signalAt(regs *Regs, mem target.Reader) *Signal {
	sp, ok := regs.sp()
	if !ok {
		return nil
	}
	var b [24]byte
	if n, _ := mem.ReadAt(b[:], sp+regs.a.SiginfoInFrame); n < len(b) {
		return nil
	}
	signo := int(int32(encbin.LittleEndian.Uint32(b[0:])))
	if signo <= 0 || signo > 64 {
		return nil
	}
	return &Signal{Number: signo, Addr: encbin.LittleEndian.Uint64(b[16:])}
}

// object is one mapped file's CFI and symbols.
type object struct {
	im  *binary.Image
	cfi *cfiTable // nil when the file has none rbscope reads: its symbols still name its frames
	pcs map[uint64]*pcInfo
	// dwarf and lines are the object's debug information and its line
	// tables by unit, once Lines has looked.
	dwarf *dwarf.Data
	lines map[dwarf.Offset]*dwarf.LineReader
}

// object returns the CFI and symbols of the file mapped at m, or nil when
// it is no file rbscope can open (anonymous memory, a file it cannot
// open). A file without CFI rbscope reads has a nil cfi.
func (u *Unwinder) object(m target.Mapping) *object {
	if o, seen := u.objs[m.Path]; seen {
		return o
	}
	u.objs[m.Path] = nil
	if !strings.HasPrefix(m.Path, "/") {
		return nil
	}
	im, err := binary.Open(u.t, u.maps, m.Path)
	if err != nil {
		return nil
	}
	cfi, _ := cfiOf(im)
	o := &object{im: im, cfi: cfi, pcs: map[uint64]*pcInfo{}}
	u.objs[m.Path] = o
	return o
}

// Preload reads the CFI of every mapped file with code, so that
// unwinding a stopped thread reads only its stack.
func (u *Unwinder) Preload() {
	for _, m := range u.maps {
		if strings.Contains(m.Perms, "x") && strings.HasPrefix(m.Path, "/") {
			u.object(m)
		}
	}
}
