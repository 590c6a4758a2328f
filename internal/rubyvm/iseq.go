package rubyvm

import (
	"fmt"
	"math/bits"
)

// iseqInfo is what rbscope keeps of one instruction sequence: where it is
// from and how to turn a pc into a line.
type iseqInfo struct {
	label     string
	path      string
	firstLine int
	encoded   uint64 // iseq_encoded
	size      uint64 // iseq_size, in VALUE words
	infoBody  uint64 // insns_info.body
	infoPos   uint64 // insns_info.positions (NULL once the succinct table exists)
	infoSize  uint64 // insns_info.size
	succTable uint64 // insns_info.succ_index_table
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
	for _, o := range []int64{L.BodyPathObj, L.BodyLabel, L.BodyFirstLineno, L.BodyIseqEncoded, L.BodyInsnsInfoBody} {
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
	}
	if info.label, err = v.rstring(le64(b, L.BodyLabel)); err != nil {
		return nil, fmt.Errorf("iseq label: %w", err)
	}
	pathobj := le64(b, L.BodyPathObj)
	if typ, _, err := v.objType(pathobj); err == nil && typ == L.TArray {
		// [path, realpath]
		if pathobj, err = v.rarrayEntry(pathobj, 0); err != nil {
			return nil, err
		}
	}
	if info.path, err = v.rstring(pathobj); err != nil {
		return nil, fmt.Errorf("iseq path: %w", err)
	}
	if n, ok := v.fixnum(le64(b, L.BodyFirstLineno)); ok {
		info.firstLine = int(n)
	}
	v.iseqs[addr] = info
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
	n, err := v.m.u32(info.infoBody + index*uint64(L.InsnInfoSize) + uint64(L.InsnInfoLineNo))
	if err != nil {
		return 0, err
	}
	return int(int32(n)), nil
}

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
