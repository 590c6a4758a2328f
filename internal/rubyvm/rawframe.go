package rubyvm

import (
	"fmt"
)

// DecodeControlFrame decodes one control frame whose iseq, pc and ep
// words another reader copied out of the target (a BPF program's frame
// walk), as a stack read decodes the frames it reads itself. stack, when
// not empty, is a copy of the thread's value stack from stackBase taken
// with the frame: the environments that lie in it are read from it, as a
// stack read does with its own copy; what lies outside (an environment
// moved to the heap, method entries, iseqs) is read from the target now.
// ok is false for frames Ruby's own backtraces skip.
func (v *VM) DecodeControlFrame(iseq, pc, ep, stackBase uint64, stack []byte) (f Frame, ok bool, err error) {
	L := v.Layout
	cf := make([]byte, L.CFPSize)
	put := func(off int64, val uint64) {
		for i := int64(0); i < 8; i++ {
			cf[off+i] = byte(val >> (8 * i))
		}
	}
	put(L.CFPIseq, iseq)
	put(L.CFPPC, pc)
	put(L.CFPEP, ep)
	if len(stack) > 0 {
		v.env = valueStack{base: stackBase, b: stack}
		defer func() { v.env = valueStack{} }()
	}
	return v.frame(cf)
}

// EnvWords returns the environment data words of the frame whose ep is ep
// (from VM_ENV_DATA_INDEX_ME_CREF to VM_ENV_DATA_INDEX_FLAGS) when they lie
// in stack, a copy of the value stack from stackBase: what, with the
// frame's iseq and pc, decides how DecodeControlFrame decodes it.
func (v *VM) EnvWords(ep, stackBase uint64, stack []byte) (words [3]uint64, ok bool) {
	L := v.Layout
	for i, idx := range [3]int64{L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags} {
		addr := uint64(int64(ep) + idx*8)
		if addr < stackBase || addr-stackBase+8 > uint64(len(stack)) {
			return words, false
		}
		words[i] = le64(stack, int64(addr-stackBase))
	}
	return words, true
}

// maxGCFlagsBytes bounds the bytes GCFlags names.
const maxGCFlagsBytes = 16

// GCFlags returns where the collector's flags (objspace->flags.during_gc
// and mode) lie in the target, as bytes for another reader to copy at one
// moment and GCPhaseFrom to decode. It needs what GC needs.
func (v *VM) GCFlags() (addr uint64, n int, err error) {
	base, err := v.objspaceBase()
	if err != nil {
		return 0, 0, err
	}
	L := v.Layout
	lo := min(L.ObjspaceDuringGCBit, L.ObjspaceModeBit) / 8
	hi := max(L.ObjspaceDuringGCBit/8, (L.ObjspaceModeBit+L.ObjspaceModeBits-1)/8) + 8
	if L.ObjspaceDuringGCBit < 0 || L.ObjspaceModeBit < 0 || L.ObjspaceModeBits <= 0 || L.ObjspaceModeBits >= 32 || hi-lo > maxGCFlagsBytes {
		return 0, 0, fmt.Errorf("GC flags at bits %d and %d: %w", L.ObjspaceDuringGCBit, L.ObjspaceModeBit, ErrGarbage)
	}
	return base + uint64(lo), int(hi - lo), nil
}

// GCPhaseFrom decodes the collector's phase, as GC reads it, from a copy
// of the bytes GCFlags names.
func (v *VM) GCPhaseFrom(b []byte) GCPhase {
	L := v.Layout
	lo := min(L.ObjspaceDuringGCBit, L.ObjspaceModeBit) / 8 * 8
	bits := func(bit, n int64) (uint32, bool) {
		off := (bit - lo) / 8
		if off < 0 || off+8 > int64(len(b)) {
			return 0, false
		}
		return uint32(le64(b, off)>>uint64(bit%8)) & (1<<uint64(n) - 1), true
	}
	during, ok := bits(L.ObjspaceDuringGCBit, 1)
	if !ok || during == 0 {
		return GCIdle
	}
	mode, ok := bits(L.ObjspaceModeBit, L.ObjspaceModeBits)
	switch {
	case !ok:
		return GCOther
	case int64(mode) == L.GCModeMarking:
		return GCMarking
	case int64(mode) == L.GCModeSweeping:
		return GCSweeping
	}
	return GCOther
}
