package unwind

import (
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// FuzzCFI: call frame information a file declares is the target's to
// choose. Parsing it, finding the rules for any pc and applying them to a
// stack must end, without a panic, whatever the bytes.
func FuzzCFI(f *testing.F) {
	f.Add(debugFrame(fdeSpec{0x1000, 0x1100, nil}), uint64(0x1010), false)
	f.Add(debugFrame(fdeSpec{0x1000, 0x1100, []byte{0x41, 0x0e, 0x88, 0x20, 0x0a, 0x0b}}), uint64(0x1050), false)
	f.Add(debugFrame(fdeSpec{0x1000, 0x1100, []byte{0x0b, 0x0b, 0x0f, 3, 0x77, 8, 0x06}}), uint64(0x1001), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint64(0), true)
	f.Fuzz(func(t *testing.T, data []byte, pc uint64, eh bool) {
		ehAddr := uint64(0)
		if eh {
			ehAddr = 0x4000
		}
		fdes, err := parseCFI(data, ehAddr)
		if err != nil {
			return
		}
		table := &cfiTable{fdes: frame.FrameDescriptionEntries(nil).Append(fdes)}
		r, _, err := table.row(pc)
		if err != nil {
			return
		}
		mem := &memTarget{regions: map[uint64][]byte{0x7000: stack(0x1010, 0x7f80, 0x1020)}}
		regs := regsAt(pc, 0x7f00)
		regs.set(6, 0x7f40) // rbp
		cfa, err := r.cfa(&regs, mem)
		if err != nil {
			return
		}
		r.caller(&regs, cfa, mem)
	})
}

// FuzzExpr: DWARF expressions in CFI are evaluated over the target's
// registers and memory; any bytes must end in a value or an error.
func FuzzExpr(f *testing.F) {
	f.Add([]byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}) // a PLT stub's CFA
	f.Add([]byte{0x77, 0xa0, 0x01, 0x06})                                           // a signal frame's register
	f.Add([]byte{0x12, 0x12, 0x12})
	f.Fuzz(func(t *testing.T, expr []byte) {
		mem := &memTarget{regions: map[uint64][]byte{0x7000: stack(0x7f00, 0x1010)}}
		regs := regsAt(0x1010, 0x7f00)
		cfa := uint64(0x7f08)
		evalExpr(expr, &regs, mem, &cfa)
		evalExpr(expr, &regs, mem, nil)
	})
}
