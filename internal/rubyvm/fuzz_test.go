package rubyvm

import (
	"encoding/binary"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
)

// fuzzVM is a VM of the given layout family over random memory at base,
// its VM pointer and symbol table at the start.
func fuzzVM(base uint64, data []byte, fam string) *VM {
	return OverMemory(&target.Memory{Base: base, Data: data}, layouts.For(fam), base, map[string]uint64{"ruby_global_symbols": base + 8})
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
