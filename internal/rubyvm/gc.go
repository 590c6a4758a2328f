package rubyvm

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// GCPhase is what the VM's garbage collector is doing at one moment.
type GCPhase int

// The phases rbscope tells apart.
const (
	// GCIdle: no collection step is running (between the steps of an
	// incremental mark or a lazy sweep, Ruby code runs: that is idle too).
	GCIdle GCPhase = iota
	GCMarking
	GCSweeping
	// GCOther is a collection step in another mode (compacting).
	GCOther
)

// String names the phase as profiles show it under (garbage collection).
func (p GCPhase) String() string {
	switch p {
	case GCIdle:
		return "idle"
	case GCMarking:
		return "marking"
	case GCSweeping:
		return "sweeping"
	default:
		return "other"
	}
}

// GC reads whether the garbage collector is at work and in which phase:
// objspace->flags.during_gc, set from gc_enter to gc_exit, and
// flags.mode. The collector runs on the thread that holds the GVL. It
// needs the census's layout (the objspace); without it, it returns
// layout.ErrFeatureMissing.
func (v *VM) GC() (GCPhase, error) {
	base, err := v.objspaceBase()
	if err != nil {
		return GCIdle, err
	}
	L := v.Layout
	during, err := v.bits(base, L.ObjspaceDuringGCBit, 1)
	if err != nil {
		return GCIdle, fmt.Errorf("reading the GC's flags: %w", err)
	}
	if during == 0 {
		return GCIdle, nil
	}
	mode, err := v.bits(base, L.ObjspaceModeBit, L.ObjspaceModeBits)
	if err != nil {
		return GCIdle, fmt.Errorf("reading the GC's mode: %w", err)
	}
	switch int64(mode) {
	case L.GCModeMarking:
		return GCMarking, nil
	case L.GCModeSweeping:
		return GCSweeping, nil
	default:
		return GCOther, nil
	}
}

// objspaceBase returns the address of the collector's objspace, read once
// (it lives as long as the VM). It needs the census's layout; without it,
// it returns layout.ErrFeatureMissing.
func (v *VM) objspaceBase() (uint64, error) {
	if err := v.Supports(layout.FeatureCensus); err != nil {
		return 0, err
	}
	if v.objspaceAddr == 0 {
		objspace, err := v.Objspace()
		if err != nil {
			return 0, err
		}
		v.objspaceAddr = objspace
	}
	return v.objspaceAddr, nil
}

// bits reads the n-bit field (n < 32) that starts bit bits after base.
func (v *VM) bits(base uint64, bit, n int64) (uint32, error) {
	if bit < 0 || n <= 0 || n >= 32 {
		return 0, fmt.Errorf("bit-field at bit %d, %d wide: %w", bit, n, ErrGarbage)
	}
	word, err := v.m.u64(base + uint64(bit/8))
	if err != nil {
		return 0, err
	}
	return uint32(word>>uint64(bit%8)) & (1<<uint64(n) - 1), nil
}
