package rubyvm

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/rbscope/rbscope/internal/target"
)

// PathNotInCore is the path of a frame whose path is a string the core
// does not hold (a literal in the read-only data of a Ruby image that is
// not on this machine).
const PathNotInCore = "(not in the core)"

// iseqInfo is what rbscope keeps of one instruction sequence: where it is
// from and how to turn a pc into a line.
type iseqInfo struct {
	label     string // location.label, as the compiler wrote it
	baseLabel string // location.base_label: the method name of a block
	typ       int64  // enum rb_iseq_type
	parent    uint64 // parent_iseq
	local     uint64 // local_iseq
	cTrace    bool   // a builtin that backtraces show as a C method
	path      string
	firstLine int
	encoded   uint64 // iseq_encoded
	size      uint64 // iseq_size, in VALUE words
	infoBody  uint64 // insns_info.body
	infoPos   uint64 // insns_info.positions (NULL once the succinct table exists)
	infoSize  uint64 // insns_info.size
	succTable uint64 // insns_info.succ_index_table
	young     bool   // the iseq was young when read (cachegen.go)
}

// iseq reads (and caches) an instruction sequence's location and line table.
func (v *VM) iseq(addr uint64) (*iseqInfo, error) {
	if info, ok := v.iseqs[addr]; ok {
		return info, nil
	}
	L := v.Layout
	typ, flags, err := v.objType(addr)
	if err != nil {
		return nil, err
	}
	if typ != L.TImemo || int64(flags>>uint64(L.FlUShift))&L.ImemoMask != L.ImemoIseq {
		return nil, fmt.Errorf("%#x is not an instruction sequence: %w", addr, ErrGarbage)
	}
	body, err := v.m.u64(at(addr, L.IseqBody))
	if err != nil {
		return nil, err
	}
	end := L.BodyInsnsInfoSuccTbl + 8
	for _, o := range []int64{L.BodyPathObj, L.BodyLabel, L.BodyBaseLabel, L.BodyFirstLineno, L.BodyIseqEncoded, L.BodyInsnsInfoBody, L.BodyType, L.BodyParentIseq, L.BodyLocalIseq, L.BodyBuiltinAttrs} {
		if o+8 > end {
			end = o + 8
		}
	}
	b, err := v.m.read(body, int(end))
	if err != nil {
		return nil, err
	}
	info := &iseqInfo{
		encoded:   le64(b, L.BodyIseqEncoded),
		size:      uint64(le32(b, L.BodyIseqSize)),
		infoBody:  le64(b, L.BodyInsnsInfoBody),
		infoPos:   le64(b, L.BodyInsnsInfoPos),
		infoSize:  uint64(le32(b, L.BodyInsnsInfoSize)),
		succTable: le64(b, L.BodyInsnsInfoSuccTbl),
		typ:       int64(int32(le32(b, L.BodyType))),
		parent:    le64(b, L.BodyParentIseq),
		local:     le64(b, L.BodyLocalIseq),
	}
	if L.BodyBuiltinAttrs >= 0 && L.BuiltinAttrCTrace > 0 {
		info.cTrace = int64(le32(b, L.BodyBuiltinAttrs))&L.BuiltinAttrCTrace != 0
	}
	if info.label, err = v.rstring(le64(b, L.BodyLabel)); err != nil {
		// The label of the main script's and a required file's top-level
		// iseq is a literal in libruby's read-only data, which a core may
		// leave out; the iseq's type says what it is.
		switch int64(le32(b, L.BodyType)) {
		case L.IseqTypeMain:
			info.label = "<main>"
		case L.IseqTypeTop:
			info.label = "<top (required)>"
		case L.IseqTypeEval, L.IseqTypeRescue, L.IseqTypeEnsure:
			// Named after the code they run in (iseqLabel).
			if info.parent == 0 {
				return nil, fmt.Errorf("iseq label: %w", err)
			}
		default:
			return nil, fmt.Errorf("iseq label: %w", err)
		}
	}
	if info.baseLabel, err = v.rstring(le64(b, L.BodyBaseLabel)); err != nil {
		info.baseLabel = info.label
	}
	pathobj := le64(b, L.BodyPathObj)
	if typ, _, err := v.objType(pathobj); err == nil && typ == L.TArray {
		// [path, realpath]
		if pathobj, err = v.rarrayEntry(pathobj, 0); err != nil {
			return nil, err
		}
	}
	if info.path, err = v.rstring(pathobj); err != nil {
		// A String whose bytes are a literal in libruby's read-only data
		// (3.1's "(eval)") is unreadable in a core that lacks that data;
		// the frame is still worth showing.
		if typ, _, terr := v.objType(pathobj); terr != nil || typ != L.TString || !errors.Is(err, target.ErrNotInCore) {
			return nil, fmt.Errorf("iseq path: %w", err)
		}
		info.path = PathNotInCore
	}
	if n, ok := v.Fixnum(le64(b, L.BodyFirstLineno)); ok {
		info.firstLine = int(n)
	}
	v.iseqs[addr] = info
	if info.young = young(L, flags); info.young {
		v.noteYoung(cacheIseq, addr, 0)
	}
	return info, nil
}

// line returns the source line of the instruction at pc, as Ruby's own
// backtraces compute it: the pc points after the current instruction, so
// the position looked up is the one before it.
func (v *VM) line(info *iseqInfo, pc uint64) (int, error) {
	if pc < info.encoded || (pc-info.encoded)%8 != 0 {
		return 0, fmt.Errorf("pc %#x outside its iseq: %w", pc, ErrGarbage)
	}
	pos := (pc - info.encoded) / 8
	if pos > info.size {
		return 0, fmt.Errorf("pc %#x past the end of its iseq: %w", pc, ErrGarbage)
	}
	if pos > 0 {
		pos--
	}
	var index uint64
	switch {
	case info.infoSize == 0:
		return info.firstLine, nil
	case info.infoSize == 1:
		index = 0
	case info.infoPos != 0:
		i, err := v.positionIndex(info, pos)
		if err != nil {
			return 0, err
		}
		index = i
	case info.succTable != 0:
		rank, err := v.succIndexLookup(info.succTable, pos)
		if err != nil {
			return 0, err
		}
		if rank == 0 || rank > info.infoSize {
			return 0, fmt.Errorf("line table rank %d of %d: %w", rank, info.infoSize, ErrGarbage)
		}
		index = rank - 1
	default:
		return info.firstLine, nil
	}
	if index >= info.infoSize {
		return 0, fmt.Errorf("line table index %d of %d: %w", index, info.infoSize, ErrGarbage)
	}
	L := v.Layout
	lineAt := func(i uint64) (int, error) {
		n, err := v.m.u32(info.infoBody + i*uint64(L.InsnInfoSize) + uint64(L.InsnInfoLineNo))
		return int(int32(n)), err
	}
	line, err := lineAt(index)
	// Ruby 2.7 gives a few instructions line 0 (the nop that ends a block,
	// where `next` lands): such an instruction is on the line of the one
	// before it (a sample of a block's loop fell there 1 time in 2,000).
	for back := 0; err == nil && line == 0 && index > 0 && back < maxLineLookBack; back++ {
		index--
		line, err = lineAt(index)
	}
	if err != nil {
		return 0, err
	}
	if line == 0 {
		return info.firstLine, nil
	}
	return line, nil
}

// maxLineLookBack bounds how many line-table entries before an
// instruction's own line looks at for one with a line.
const maxLineLookBack = 8

// positionIndex finds the last insns_info entry whose position is <= pos in
// the plain positions array (kept by Rubies built with VM checks).
func (v *VM) positionIndex(info *iseqInfo, pos uint64) (uint64, error) {
	if info.infoSize > 1<<20 {
		return 0, fmt.Errorf("line table of %d entries: %w", info.infoSize, ErrGarbage)
	}
	b, err := v.m.read(info.infoPos, int(info.infoSize)*4)
	if err != nil {
		return 0, err
	}
	var idx uint64
	for i := uint64(0); i < info.infoSize; i++ {
		if uint64(le32(b, int64(i*4))) > pos {
			break
		}
		idx = i
	}
	return idx, nil
}

// The succinct bit-vector that Ruby (iseq.c, succ_index_table) keeps instead
// of the positions array: bit p is set when an insns_info entry starts at
// position p, and the rank (set bits at or before p) is the entry's index+1.
// The first positions are ranked in an immediate part of 64-bit words, each
// holding 9 ranks of 7 bits; the rest in blocks of 512 bits with a 32-bit
// block rank and 7 small-block ranks of 9 bits.
const (
	succImmRanksPerWord = 9
	succImmRankBits     = 7
	succSmallRankBits   = 9
)

func (v *VM) succIndexLookup(table, pos uint64) (uint64, error) {
	L := v.Layout
	immSize := uint64(L.SuccImmPartWords) * succImmRanksPerWord
	if pos < immSize {
		w, err := v.m.u64(at(table, L.SuccImmPart) + pos/succImmRanksPerWord*8)
		if err != nil {
			return 0, err
		}
		shift := (pos % succImmRanksPerWord) * succImmRankBits
		return (w >> shift) & (1<<succImmRankBits - 1), nil
	}
	blockBits := uint64(L.SuccBlockWords) * 64
	x := pos - immSize
	blockAddr := at(table, L.SuccPart) + (x/blockBits)*uint64(L.SuccBlockSize)
	blk, err := v.m.read(blockAddr, int(L.SuccBlockSize))
	if err != nil {
		return 0, err
	}
	bit := x % blockBits
	small := bit / 64
	var smallRank uint64
	if small > 0 {
		smallRank = (le64(blk, L.SuccBlockSmall) >> ((small - 1) * succSmallRankBits)) & (1<<succSmallRankBits - 1)
	}
	word := le64(blk, L.SuccBlockBits+int64(small*8))
	popcnt := uint64(bits.OnesCount64(word << (63 - bit%64)))
	return uint64(le32(blk, L.SuccBlockRank)) + smallRank + popcnt, nil
}

// maxIseqNesting bounds the walk up an iseq's parents (blocks in blocks).
const maxIseqNesting = 1000

// iseqLabel names a frame running iseq as Ruby 3.4's backtraces do
// (calculate_iseq_label in vm_backtrace.c), on every Ruby version: a
// method is qualified by its owner (Foo#bar, Foo.bar), a block says how
// deep it is in what (block (2 levels) in Foo#bar), and rescue, ensure and
// eval code is named after the code it runs in. owner is the frame's
// method entry's owner, 0 when it has none.
func (v *VM) iseqLabel(iseq uint64, owner uint64) (string, error) {
	L := v.Layout
	for depth := 0; depth < maxIseqNesting; depth++ {
		info, err := v.iseq(iseq)
		if err != nil {
			return "", err
		}
		switch info.typ {
		case L.IseqTypeMethod:
			return v.methodLabel(owner, info.label), nil
		case L.IseqTypeBlock, L.IseqTypePlain:
			level, local := 0, iseq
			if info.parent == 0 || info.local == iseq {
				return info.label, nil
			}
			// Steps, not only block levels, bound the walk: a torn or
			// hostile parent chain may loop through other iseq types.
			for steps := 0; info.local != local; steps++ {
				li, err := v.iseq(local)
				if err != nil {
					return "", err
				}
				if li.typ == L.IseqTypeBlock {
					level++
				}
				if local = li.parent; local == 0 || steps > maxIseqNesting {
					return "", fmt.Errorf("iseq %#x: parent chain does not reach its local iseq: %w", iseq, ErrGarbage)
				}
			}
			// The local iseq is its own local: one that names another
			// would send this recursion round for ever.
			if li, err := v.iseq(local); err != nil {
				return "", err
			} else if (li.typ == L.IseqTypeBlock || li.typ == L.IseqTypePlain) && li.parent != 0 && li.local != local {
				return "", fmt.Errorf("iseq %#x: its local iseq %#x has a local iseq of its own: %w", iseq, local, ErrGarbage)
			}
			in, err := v.iseqLabel(local, owner)
			if err != nil {
				return "", err
			}
			if level <= 1 {
				return "block in " + in, nil
			}
			return fmt.Sprintf("block (%d levels) in %s", level, in), nil
		case L.IseqTypeRescue, L.IseqTypeEnsure, L.IseqTypeEval:
			if info.parent == 0 {
				return info.label, nil
			}
			iseq = info.parent
		default: // top, main, class bodies
			return info.label, nil
		}
	}
	return "", fmt.Errorf("iseq %#x nested too deep: %w", iseq, ErrGarbage)
}
