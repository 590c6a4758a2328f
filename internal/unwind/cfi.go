package unwind

import (
	"debug/elf"
	encbin "encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/target"
)

// cfiTable is one object's call frame information: the entries of
// .eh_frame found through its .eh_frame_hdr search table as they are asked
// for (an object holds thousands, a stack needs a few), else every entry
// parsed at once, sorted by address; and the entries of the separate
// debug file's .debug_frame, for pcs the object's own CFI does not cover
// (a C library built without unwind tables, such as musl).
type cfiTable struct {
	fdes  frame.FrameDescriptionEntries
	eh    *ehIndex
	debug frame.FrameDescriptionEntries
}

// cfiCache keeps parsed CFI by build ID: a profiler unwinds the same
// libraries thousands of times, and many processes map the same ones.
var cfiCache struct {
	sync.Mutex
	byID map[string]*cfiTable
}

// cfiOf reads im's CFI: .eh_frame, which every object the C runtime must
// unwind through carries, and .debug_frame where there is no .eh_frame;
// and its separate debug file's .debug_frame, for the pcs those leave out.
func cfiOf(im *binary.Image) (*cfiTable, error) {
	id := im.BuildID()
	if id != "" {
		cfiCache.Lock()
		t := cfiCache.byID[id]
		cfiCache.Unlock()
		if t != nil {
			return t, nil
		}
	}
	t := &cfiTable{}
	if eh, err := newEHIndex(im); err == nil {
		t.eh = eh
	} else {
		for _, name := range []string{".eh_frame", ".debug_frame"} {
			sec := im.File.Section(name)
			if sec == nil || sec.Type == elf.SHT_NOBITS {
				continue
			}
			if sec.Size > maxCFIBytes {
				return nil, fmt.Errorf("%s: %s of %d bytes: %w", im.Path, name, sec.Size, ErrBadCFI)
			}
			data, err := sec.Data()
			if err != nil {
				continue
			}
			ehAddr := uint64(0)
			if name == ".eh_frame" {
				ehAddr = sec.Addr
				if ehAddr == 0 {
					continue // not loaded: cannot resolve its pc-relative pointers
				}
			}
			fdes, err := parseCFI(data, ehAddr)
			if err != nil {
				continue
			}
			t.fdes = t.fdes.Append(fdes) // sorted, duplicates dropped
		}
	}
	if sec := im.DebugFileSection(".debug_frame"); sec != nil && sec.Size <= maxCFIBytes {
		if data, err := sec.Data(); err == nil {
			if fdes, err := parseCFI(data, 0); err == nil {
				t.debug = fdes
			}
		}
	}
	if t.eh == nil && len(t.fdes) == 0 && len(t.debug) == 0 {
		return nil, fmt.Errorf("%s: %w", im.Path, ErrNoCFI)
	}
	if id != "" {
		cfiCache.Lock()
		if cfiCache.byID == nil {
			cfiCache.byID = map[string]*cfiTable{}
		}
		cfiCache.byID[id] = t
		cfiCache.Unlock()
	}
	return t, nil
}

// ehIndex finds .eh_frame entries through .eh_frame_hdr's search table:
// sorted pairs of a function's start and its entry's address, both
// relative to the header (the encoding every linker writes).
type ehIndex struct {
	frame    []byte // .eh_frame
	addr     uint64 // its link-time address
	table    []byte // the search table: 8 bytes a pair
	hdrAddr  uint64
	mu       sync.Mutex
	byOffset map[uint32]*frame.FrameDescriptionEntry // parsed, by offset in .eh_frame
}

// newEHIndex indexes im's .eh_frame through its .eh_frame_hdr, found by
// section or, for an image read from a core's memory, by PT_GNU_EH_FRAME.
func newEHIndex(im *binary.Image) (*ehIndex, error) {
	h, hdrAddr, data, addr, err := im.EHFrame(maxCFIBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCFI, err)
	}
	// version 1; eh_frame_ptr's encoding (any: the section header says
	// where .eh_frame is); fde_count as udata4; the table as datarel
	// sdata4.
	if len(h) < 12 || h[0] != 1 || h[2] != 0x03 || h[3] != 0x3b {
		return nil, fmt.Errorf("%w: .eh_frame_hdr encodings %#x %#x", ErrBadCFI, h[2], h[3])
	}
	ptrSize := map[byte]int{0x1b: 4, 0x03: 4, 0x0b: 4, 0x04: 8, 0x0c: 8, 0x1c: 8}[h[1]]
	if ptrSize == 0 || len(h) < 4+ptrSize+4 {
		return nil, fmt.Errorf("%w: .eh_frame_hdr pointer encoding %#x", ErrBadCFI, h[1])
	}
	n := int(encbin.LittleEndian.Uint32(h[4+ptrSize:]))
	table := h[4+ptrSize+4:]
	if n < 0 || n > len(table)/8 {
		return nil, fmt.Errorf("%w: .eh_frame_hdr declares %d entries", ErrBadCFI, n)
	}
	return &ehIndex{frame: data, addr: addr, table: table[:n*8], hdrAddr: hdrAddr, byOffset: map[uint32]*frame.FrameDescriptionEntry{}}, nil
}

// find returns the entry that covers addr, parsing it (and its CIE) alone.
func (x *ehIndex) find(addr uint64) (*frame.FrameDescriptionEntry, error) {
	n := len(x.table) / 8
	start := func(i int) uint64 {
		return x.hdrAddr + uint64(int64(int32(encbin.LittleEndian.Uint32(x.table[8*i:]))))
	}
	i := sort.Search(n, func(i int) bool { return start(i) > addr }) - 1
	if i < 0 {
		return nil, fmt.Errorf("%w for pc %#x", ErrNoCFI, addr)
	}
	fdeAddr := x.hdrAddr + uint64(int64(int32(encbin.LittleEndian.Uint32(x.table[8*i+4:]))))
	if fdeAddr < x.addr || fdeAddr-x.addr >= uint64(len(x.frame)) {
		return nil, fmt.Errorf("%w: an .eh_frame_hdr entry outside .eh_frame", ErrBadCFI)
	}
	off := uint32(fdeAddr - x.addr)
	x.mu.Lock()
	fde, ok := x.byOffset[off]
	x.mu.Unlock()
	if !ok {
		var err error
		if fde, err = x.parseAt(off); err != nil {
			return nil, err
		}
		x.mu.Lock()
		x.byOffset[off] = fde
		x.mu.Unlock()
	}
	if !fde.Cover(addr) {
		return nil, fmt.Errorf("%w for pc %#x", ErrNoCFI, addr)
	}
	return fde, nil
}

// parseAt parses the entry at offset off of .eh_frame with its CIE: the
// two are copied into a buffer of their own, the entry's CIE pointer and
// the buffer's address set so that its pc-relative fields read as they
// would in place.
func (x *ehIndex) parseAt(off uint32) (*frame.FrameDescriptionEntry, error) {
	le := encbin.LittleEndian
	entry := func(at uint64) ([]byte, error) {
		if at+8 > uint64(len(x.frame)) {
			return nil, fmt.Errorf("%w: an entry past .eh_frame's end", ErrBadCFI)
		}
		n := uint64(le.Uint32(x.frame[at:]))
		if n == 0xffffffff || at+4+n > uint64(len(x.frame)) || n < 4 {
			return nil, fmt.Errorf("%w: an entry of length %d", ErrBadCFI, n)
		}
		return x.frame[at : at+4+n], nil
	}
	fdeBytes, err := entry(uint64(off))
	if err != nil {
		return nil, err
	}
	ciePtr := uint64(le.Uint32(fdeBytes[4:]))
	if ciePtr == 0 || ciePtr > uint64(off)+4 {
		return nil, fmt.Errorf("%w: an entry without its CIE", ErrBadCFI)
	}
	cieBytes, err := entry(uint64(off) + 4 - ciePtr)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, len(cieBytes)+len(fdeBytes))
	buf = append(buf, cieBytes...)
	buf = append(buf, fdeBytes...)
	le.PutUint32(buf[len(cieBytes)+4:], uint32(len(cieBytes)+4))
	fdes, err := parseCFI(buf, x.addr+uint64(off)-uint64(len(cieBytes)))
	if err != nil {
		return nil, err
	}
	if len(fdes) != 1 {
		return nil, fmt.Errorf("%w: %d entries where one was", ErrBadCFI, len(fdes))
	}
	return fdes[0], nil
}

// parseCFI parses a CFI section; the parser panics on some malformed input,
// which is refused like any other.
func parseCFI(data []byte, ehAddr uint64) (fdes frame.FrameDescriptionEntries, err error) {
	defer func() {
		if p := recover(); p != nil {
			fdes, err = nil, fmt.Errorf("%w: %v", ErrBadCFI, p)
		}
	}()
	fdes, err = frame.Parse(data, encbin.LittleEndian, 0, 8, ehAddr)
	for _, f := range fdes {
		if f.CIE == nil {
			return nil, fmt.Errorf("%w: an entry without its CIE", ErrBadCFI)
		}
	}
	return fdes, err
}

// fdeRange is the address range one entry covers (link-time addresses).
type fdeRange struct{ begin, end uint64 }

// row is the CFI's rule set for one pc: how to find the CFA and the
// caller's registers.
type row struct {
	cfaRule frame.DWRule
	regs    map[uint64]frame.DWRule
	ra      uint64
	signal  bool // the entry is a signal frame's ('S' augmentation)
}

// row returns the rules at addr (a link-time address) and the range of the
// entry that covers it.
func (t *cfiTable) row(addr uint64) (r *row, fr *fdeRange, err error) {
	var fde *frame.FrameDescriptionEntry
	if t.eh != nil {
		fde, err = t.eh.find(addr)
	} else if fde, err = t.fdes.FDEForPC(addr); err != nil {
		err = fmt.Errorf("%w for pc %#x", ErrNoCFI, addr)
	}
	if errors.Is(err, ErrNoCFI) && len(t.debug) > 0 {
		if d, derr := t.debug.FDEForPC(addr); derr == nil {
			fde, err = d, nil
		}
	}
	if err != nil {
		return nil, nil, err
	}
	fr = &fdeRange{fde.Begin(), fde.End()}
	defer func() {
		if p := recover(); p != nil { // malformed instructions
			r, err = nil, fmt.Errorf("%w: %v", ErrBadCFI, p)
		}
	}()
	ctx, err := fde.EstablishFrame(addr)
	if err != nil {
		return nil, fr, fmt.Errorf("%w: %v", ErrBadCFI, err)
	}
	return &row{cfaRule: ctx.CFA, regs: ctx.Regs, ra: ctx.RetAddrReg, signal: strings.ContainsRune(fde.CIE.Augmentation, 'S')}, fr, nil
}

// cfa computes the frame's CFA from its registers.
func (r *row) cfa(regs *Regs, mem target.Reader) (uint64, error) {
	switch r.cfaRule.Rule {
	case frame.RuleCFA:
		v, ok := regs.get(r.cfaRule.Reg)
		if !ok {
			return 0, fmt.Errorf("%w: the CFA's register %d", ErrUnreadable, r.cfaRule.Reg)
		}
		return v + uint64(r.cfaRule.Offset), nil
	case frame.RuleExpression: // DW_CFA_def_cfa_expression (PLT stubs, signal frames)
		return evalExpr(r.cfaRule.Expression, regs, mem, nil)
	}
	return 0, fmt.Errorf("%w: CFA rule %d", ErrBadCFI, r.cfaRule.Rule)
}

// caller computes the caller's registers from the frame's (regs) and its
// CFA. Registers the ABI has a function keep (arch.Arch.CalleeSaved) hold
// the same value in the caller unless a rule says otherwise. The caller's
// pc is the return address column's value (the CIE names the column); it
// is unknown, ending the walk, when the column is undefined, or has no
// rule on an architecture whose calls push the return address (on one
// with a link register, no rule leaves it in the register).
func (r *row) caller(regs *Regs, cfa uint64, mem target.Reader) (Regs, error) {
	a := regs.a
	next := Regs{a: a}
	for _, n := range a.CalleeSaved {
		if v, ok := regs.get(uint64(n)); ok {
			next.set(n, v)
		}
	}
	next.set(a.DWARFSP, cfa)
	if a.LinkRegister {
		if v, ok := regs.get(r.ra); ok {
			next.set(int(r.ra), v)
		}
	}
	for n, rule := range r.regs {
		col := n
		if col >= nRegs {
			continue
		}
		switch rule.Rule {
		case frame.RuleUndefined:
			next.known[col] = false
		case frame.RuleSameVal:
			if v, ok := regs.get(n); ok {
				next.set(int(col), v)
			}
		case frame.RuleOffset:
			v, err := read8(mem, cfa+uint64(rule.Offset))
			if err != nil {
				if col == r.ra {
					return next, fmt.Errorf("%w: the return address at %#x", ErrUnreadable, cfa+uint64(rule.Offset))
				}
				next.known[col] = false
				continue
			}
			next.set(int(col), v)
		case frame.RuleValOffset:
			next.set(int(col), cfa+uint64(rule.Offset))
		case frame.RuleRegister:
			if v, ok := regs.get(rule.Reg); ok {
				next.set(int(col), v)
			} else {
				next.known[col] = false
			}
		case frame.RuleExpression, frame.RuleValExpression:
			v, err := evalExpr(rule.Expression, regs, mem, &cfa)
			if err == nil && rule.Rule == frame.RuleExpression {
				v, err = read8(mem, v)
			}
			if err != nil {
				next.known[col] = false
				continue
			}
			next.set(int(col), v)
		}
	}
	pc, ok := next.get(r.ra)
	if _, has := r.regs[r.ra]; !ok || !has && !a.LinkRegister {
		next.known[a.DWARFPC] = false // no rule: the outermost frame
		return next, nil
	}
	next.set(a.DWARFPC, pc&a.AddrMask)
	return next, nil
}

func read8(mem target.Reader, addr uint64) (uint64, error) {
	var b [8]byte
	if err := target.ReadFull(mem, b[:], addr); err != nil {
		return 0, err
	}
	return encbin.LittleEndian.Uint64(b[:]), nil
}

// stackMem serves a walk's reads from a window of the stack read at once:
// a frame's saved registers and return address lie together, and one
// system call per window beats one per word. Reads outside the window go
// to the target, and move the window there.
type stackMem struct {
	t    target.Target
	base uint64
	buf  []byte
}

// stackWindow is how much of the stack one read brings in.
const stackWindow = 4 << 10

func (m *stackMem) ReadAt(p []byte, addr uint64) (int, error) {
	if addr >= m.base && addr-m.base+uint64(len(p)) <= uint64(len(m.buf)) {
		return copy(p, m.buf[addr-m.base:]), nil
	}
	if len(p) <= 64 {
		if cap(m.buf) < stackWindow {
			m.buf = make([]byte, stackWindow)
		}
		m.buf = m.buf[:cap(m.buf)]
		n, _ := m.t.ReadAt(m.buf, addr) // a window may run past the mapping's end
		m.base, m.buf = addr, m.buf[:n]
		if n >= len(p) {
			return copy(p, m.buf), nil
		}
	}
	return m.t.ReadAt(p, addr)
}
