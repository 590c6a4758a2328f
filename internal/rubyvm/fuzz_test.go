package rubyvm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
)

// fuzzMemory is a target whose whole address space is one buffer at base:
// what a torn or corrupt read of a real process can look like.
type fuzzMemory struct {
	base uint64
	mem  []byte
}

func (f *fuzzMemory) PID() int { return 0 }
func (f *fuzzMemory) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < f.base || addr-f.base >= uint64(len(f.mem)) {
		return 0, errors.New("unmapped")
	}
	n := copy(p, f.mem[addr-f.base:])
	if n < len(p) {
		return n, errors.New("unmapped")
	}
	return n, nil
}
func (f *fuzzMemory) Mappings() ([]target.Mapping, error) {
	return []target.Mapping{{Start: f.base, End: f.base + uint64(len(f.mem)), Perms: "rw-p"}}, nil
}
func (f *fuzzMemory) Threads() ([]int, error)            { return []int{1}, nil }
func (f *fuzzMemory) Registers(int) (target.Regs, error) { return target.Regs{}, target.ErrNoRegisters }
func (f *fuzzMemory) Open(string) (*os.File, error)      { return nil, os.ErrNotExist }
func (f *fuzzMemory) Pause() error                       { return nil }
func (f *fuzzMemory) Resume() error                      { return nil }
func (f *fuzzMemory) Close() error                       { return nil }

// fuzzVM is a VM of the given layout family over random memory at base,
// its VM pointer and symbol table at the start.
func fuzzVM(base uint64, data []byte, fam string) *VM {
	fm := &fuzzMemory{base: base, mem: data}
	v := &VM{T: fm, Layout: layouts.For(fam), m: mem{t: fm}, vmPtrAddr: base,
		located: map[string]uint64{"ruby_global_symbols": base + 8}}
	v.ForgetCaches()
	return v
}

// FuzzWalker feeds random memory to the thread and frame walkers: they must
// return (with an error or with garbage-free frames) and never panic or
// loop forever.
func FuzzWalker(f *testing.F) {
	const base = 0x10000
	seed := make([]byte, 4096)
	// A VM pointer that points back into the buffer, and list nodes that
	// point at themselves: the walk must still end.
	for i := 0; i+8 <= len(seed); i += 8 {
		binary.LittleEndian.PutUint64(seed[i:], base+uint64(i))
	}
	f.Add(seed)
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 8 {
			return
		}
		for _, fam := range layouts.Families() {
			v := fuzzVM(base, data, fam)
			ths, _ := v.Threads()
			for _, th := range ths {
				if len(th.Frames) > maxFrames {
					t.Fatalf("%d frames", len(th.Frames))
				}
			}
		}
	})
}

// FuzzHeapDump feeds random memory to the object decoders of heap dump as
// one heap page, for every layout: every slot must be written or skipped,
// without a panic, an endless loop or a huge allocation.
func FuzzHeapDump(f *testing.F) {
	const base = 0x10000
	seed := make([]byte, 4096)
	// Slots whose words point back into the page: types, lengths and
	// buffers all land on other slots.
	for i := 0; i+8 <= len(seed); i += 8 {
		binary.LittleEndian.PutUint64(seed[i:], base+uint64(i*7%len(seed))&^7)
	}
	for i, typ := range []uint64{0x01, 0x05, 0x07, 0x08, 0x09, 0x0a, 0x02, 0x03, 0x1c, 0x0f, 0x0e, 0x0d} {
		binary.LittleEndian.PutUint64(seed[i*40:], typ|uint64(i)<<13|uint64(i)<<32)
	}
	f.Add(seed)
	f.Add(make([]byte, 80))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 40 {
			return
		}
		for _, fam := range layouts.Families() {
			v := fuzzVM(base, data, fam)
			for _, slotSize := range []int64{40, 80} {
				n := int64(len(data)) / slotSize
				if n == 0 {
					continue
				}
				var out bytes.Buffer
				d := v.newDumper(&out, []HeapPage{{Start: base, SlotSize: slotSize, Total: n}}, DumpOptions{})
				d.bodies = [][]byte{data[:n*slotSize]}
				if v.Layout.ShapeSize > 0 {
					d.shapeList = base
				}
				for off := int64(0); off+slotSize <= n*slotSize; off += slotSize {
					d.object(base+uint64(off), data[off:off+slotSize])
				}
				if err := d.flush(true); err != nil {
					t.Fatal(err)
				}
				if d.stats.Panicked > 0 {
					t.Fatalf("a decoder panicked: %v", d.stats.Partial)
				}
				lines := bytes.Count(out.Bytes(), []byte("\n"))
				if uint64(lines) != d.stats.Objects || d.stats.Objects+d.stats.Skipped > uint64(n) {
					t.Fatalf("%d lines, %d objects, %d skipped of %d slots", lines, d.stats.Objects, d.stats.Skipped, n)
				}
				for _, line := range bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n")) {
					if len(line) > 0 && !json.Valid(line) {
						t.Fatalf("invalid JSON line %q", line)
					}
				}
			}
		}
	})
}

// FuzzCensusAndRoots feeds random memory to the heap census (objspace,
// page list, slots, class names) and to the root readers of heap dump
// (global variables, id tables, VM stacks): an error or a result, never a
// panic, an endless loop or a huge allocation.
func FuzzCensusAndRoots(f *testing.F) {
	const base = 0x10000
	seed := make([]byte, 4096)
	for i := 0; i+8 <= len(seed); i += 8 {
		binary.LittleEndian.PutUint64(seed[i:], base+uint64(i*13%len(seed))&^7)
	}
	f.Add(seed)
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 16 {
			return
		}
		for _, fam := range layouts.Families() {
			v := fuzzVM(base, data, fam)
			// What the executable's symbols would give (the fuzz VM has
			// no image): a global table in the buffer; the object space is
			// taken as checked, so that the census reads what it holds.
			v.objspaceChecked = true
			v.located["rb_global_tbl"] = base + 24
			v.HeapCensus()
			v.GlobalValues()
			v.IDTable(base + 8)
			v.VMStackValues(base + 16)
		}
	})
}
