package unwind

import (
	"debug/elf"
	encbin "encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/target"
)

// cfiTable is one object's frame description entries, sorted by address.
type cfiTable struct {
	fdes frame.FrameDescriptionEntries
}

// cfiCache keeps parsed CFI by build ID: a profiler unwinds the same
// libraries thousands of times, and many processes map the same ones.
var cfiCache struct {
	sync.Mutex
	byID map[string]*cfiTable
}

// cfiOf reads im's CFI: .eh_frame, which every object the C runtime must
// unwind through carries, and .debug_frame where present.
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
	var all frame.FrameDescriptionEntries
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
		all = all.Append(fdes) // sorted, duplicates dropped
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: %w", im.Path, ErrNoCFI)
	}
	t := &cfiTable{fdes: all}
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
	fde, ferr := t.fdes.FDEForPC(addr)
	if ferr != nil {
		return nil, nil, fmt.Errorf("%w for pc %#x", ErrNoCFI, addr)
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
func (r *row) cfa(regs *Regs, mem target.Target) (uint64, error) {
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

// calleeSaved are the registers a function keeps for its caller (System V
// x86_64 ABI): without a rule, they hold the same value in the caller.
var calleeSaved = []int{regRBX, regRBP, regR12, 13, 14, regR15}

// caller computes the caller's registers from the frame's (regs) and its
// CFA. The caller's pc (the return address) is unknown, ending the walk,
// when its column is undefined: the outermost frame.
func (r *row) caller(regs *Regs, cfa uint64, mem target.Target) (Regs, error) {
	var next Regs
	for _, n := range calleeSaved {
		if v, ok := regs.get(uint64(n)); ok {
			next.set(n, v)
		}
	}
	next.set(regRSP, cfa)
	for n, rule := range r.regs {
		col := n
		if n == r.ra {
			col = regRA
		}
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
				if col == regRA {
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
	if _, has := r.regs[r.ra]; !has {
		next.known[regRA] = false // no rule: the outermost frame
	}
	return next, nil
}

func read8(mem target.Target, addr uint64) (uint64, error) {
	var b [8]byte
	if err := target.ReadFull(mem, b[:], addr); err != nil {
		return 0, err
	}
	return encbin.LittleEndian.Uint64(b[:]), nil
}
