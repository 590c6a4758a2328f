package unwind

import (
	"debug/elf"
	encbin "encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/target"
)

// memTarget is memory made of byte regions, for unwinding stacks built by
// hand (the bad input a hostile or broken process could hold).
type memTarget struct {
	regions map[uint64][]byte // start -> bytes
}

func (m *memTarget) PID() int { return 0 }
func (m *memTarget) ReadAt(p []byte, addr uint64) (int, error) {
	for start, b := range m.regions {
		if addr >= start && addr-start+uint64(len(p)) <= uint64(len(b)) {
			return copy(p, b[addr-start:]), nil
		}
	}
	return 0, fmt.Errorf("no memory at %#x", addr)
}
func (m *memTarget) Mappings() ([]target.Mapping, error) { return nil, nil }
func (m *memTarget) Threads() ([]int, error)             { return nil, nil }
func (m *memTarget) Registers(int) (target.Regs, error)  { return target.Regs{}, target.ErrNoRegisters }
func (m *memTarget) Open(string) (*os.File, error)       { return nil, os.ErrNotExist }
func (m *memTarget) Close() error                        { return nil }

// debugFrame builds a .debug_frame section: one CIE (CFA = rsp+8, return
// address at CFA-8: a function's state on entry) and an FDE per range with
// its own instructions.
func debugFrame(fdes ...fdeSpec) []byte {
	le := encbin.LittleEndian
	cieBody := []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x78, 16, 0x0c, 7, 8, 0x90, 1}
	var out []byte
	out = le.AppendUint32(out, uint32(len(cieBody)))
	out = append(out, cieBody...)
	for _, f := range fdes {
		body := le.AppendUint32(nil, 0) // the CIE at offset 0
		body = le.AppendUint64(body, f.begin)
		body = le.AppendUint64(body, f.end-f.begin)
		body = append(body, f.instructions...)
		out = le.AppendUint32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out
}

type fdeSpec struct {
	begin, end   uint64
	instructions []byte
}

// fakeUnwinder unwinds over mem with one code object at [0x1000, 0x3000)
// whose CFI is cfi, and a stack mapping at [0x7000, 0x8000).
func fakeUnwinder(t *testing.T, mem *memTarget, cfi []byte) *Unwinder {
	t.Helper()
	fdes, err := parseCFI(cfi, 0)
	if err != nil {
		t.Fatalf("setup: the hand-made CFI does not parse: %v", err)
	}
	self, err := elf.Open("/proc/self/exe") // any ELF: its symbols lie far from 0x1000
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { self.Close() })
	maps := []target.Mapping{
		{Start: 0x1000, End: 0x3000, Perms: "r-xp", Path: "/fake/libcode.so"},
		{Start: 0x5000, End: 0x6000, Perms: "r-xp"}, // anonymous code: a JIT's
		{Start: 0x7000, End: 0x8000, Perms: "rw-p", Path: "[stack]"},
	}
	u := New(mem, maps)
	u.objs["/fake/libcode.so"] = &object{im: &binary.Image{Path: "/fake/libcode.so", File: self}, cfi: &cfiTable{fdes: frame.FrameDescriptionEntries(nil).Append(fdes)}, pcs: map[uint64]*pcInfo{}}
	return u
}

// regsAt are x86_64 registers with a pc and a stack pointer.
func regsAt(pc, sp uint64) Regs {
	r := Regs{a: arch.AMD64}
	r.set(arch.AMD64.DWARFPC, pc)
	r.set(arch.AMD64.DWARFSP, sp)
	return r
}

func stack(words ...uint64) []byte {
	b := make([]byte, 0x1000)
	for i, w := range words {
		encbin.LittleEndian.PutUint64(b[0xf00+8*i:], w)
	}
	return b
}

// TestUnwindBadStacks: each broken stack ends the walk with its reason,
// keeping the frames before it; none loops or panics.
func TestUnwindBadStacks(t *testing.T) {
	leaf := fdeSpec{0x1000, 0x1100, nil}                  // CFA = rsp+8
	noMove := fdeSpec{0x1100, 0x1200, []byte{0x0e, 0x00}} // def_cfa_offset 0: CFA = rsp, no progress
	undefRA := fdeSpec{0x1200, 0x1300, []byte{0x07, 16}}  // DW_CFA_undefined rip: the outermost frame
	cfi := debugFrame(leaf, noMove, undefRA)
	for _, c := range []struct {
		name   string
		stack  []byte
		pc, sp uint64
		frames int
		want   error // nil: reached the outermost frame
	}{
		{"outermost", stack(0x1250), 0x1010, 0x7f00, 2, nil},
		{"pc outside every mapping", stack(0xdead0000), 0x1010, 0x7f00, 2, ErrUnmapped},
		{"stack pointer outside every mapping", nil, 0x1010, 0x9f00, 1, ErrUnreadable},
		{"frame chain that does not move", stack(0x1150, 0x1150), 0x1010, 0x7f00, 2, ErrStackLoop},
		{"jit code without CFI", stack(0x5010), 0x1010, 0x7f00, 2, ErrNoCFI},
		{"code without CFI for its pc", stack(0x2010), 0x1010, 0x7f00, 2, ErrNoCFI},
		{"endless chain", stack(0x1010, 0x1010, 0x1010), 0x1010, 0x7f00, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := &memTarget{regions: map[uint64][]byte{0x7000: c.stack}}
			if c.stack == nil {
				mem.regions = nil
			}
			if c.name == "endless chain" {
				// Return addresses into a leaf all the way up: MaxFrames.
				b := make([]byte, 0x1000)
				for i := 0; i+8 <= len(b); i += 8 {
					encbin.LittleEndian.PutUint64(b[i:], 0x1010)
				}
				mem.regions = map[uint64][]byte{0x7000: b}
				c.sp = 0x7000
			}
			frames, err := fakeUnwinder(t, mem, cfi).Unwind(regsAt(c.pc, c.sp))
			if c.name == "endless chain" {
				// 512 words of return addresses: the budget ends the walk.
				if !errors.Is(err, ErrFrameBudget) || len(frames) != MaxFrames {
					t.Errorf("%d frames, %v; want %d and the frame budget", len(frames), err, MaxFrames)
				}
				return
			}
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("error %v, want %v", err, c.want)
			}
			if len(frames) != c.frames {
				t.Errorf("%d frames, want %d: %+v", len(frames), c.frames, frames)
			}
		})
	}
}

// TestUnwindFrameSizes: a frame's size is the stack it holds, its CFA less
// the CFA of the frame it called.
func TestUnwindFrameSizes(t *testing.T) {
	// big: sub $0x1000,%rsp after entry (CFA = rsp+0x1008 at its pc).
	big := fdeSpec{0x1000, 0x1100, []byte{0x41, 0x0e, 0x88, 0x20}} // advance 1; def_cfa_offset 0x1008
	leaf := fdeSpec{0x1100, 0x1200, nil}
	undefRA := fdeSpec{0x1200, 0x1300, []byte{0x07, 16}}
	b := make([]byte, 0x3000)
	le := encbin.LittleEndian
	// leaf at sp 0x7000: returns into big (0x1050); big's frame spans
	// 0x7008..0x8010 and returns into the outermost function.
	le.PutUint64(b[0x0000:], 0x1050)
	le.PutUint64(b[0x1008:], 0x1250)
	mem := &memTarget{regions: map[uint64][]byte{0x7000: b}}
	frames, err := fakeUnwinder(t, mem, debugFrame(big, leaf, undefRA)).Unwind(regsAt(0x1110, 0x7000))
	if err != nil || len(frames) != 3 {
		t.Fatalf("%d frames, %v: %+v", len(frames), err, frames)
	}
	if frames[0].Size != 8 || frames[1].Size != 0x1008 {
		t.Errorf("sizes %d and %d, want 8 and %d", frames[0].Size, frames[1].Size, 0x1008)
	}
}
