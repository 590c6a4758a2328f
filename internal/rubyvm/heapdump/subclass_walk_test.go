package heapdump

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// TestSubclassWalkBounded: a class's subclass list that loops (memory a
// hostile or corrupt process made up) ends where the walk comes back to
// an entry, and the walks of a whole dump take at most its budget of
// steps (one an object and a margin), so that ten thousand classes on
// one looping list do not walk it ten thousand times over.
func TestSubclassWalkBounded(t *testing.T) {
	const base = 0x10000
	for _, fam := range layouts.Families() {
		L := layouts.For(fam)
		if L.ClassExtSubclasses < 0 || L.SubclassKlass < 0 || L.SubclassNext < 0 {
			continue
		}
		t.Run(fam, func(t *testing.T) {
			data := make([]byte, 1<<16)
			put := func(addr, val uint64) { binary.LittleEndian.PutUint64(data[addr-base:], val) }
			// ext's list: entries 0..9, the last one back to entry 3.
			const ext, entries, stride = base + 0x100, base + 0x1000, 64
			put(uint64(ext+L.ClassExtSubclasses), entries)
			for i := uint64(0); i < 10; i++ {
				next := entries + (i+1)*stride
				if i == 9 {
					next = entries + 3*stride
				}
				put(entries+i*stride+uint64(L.SubclassNext), next)
			}
			v := fuzzVM(base, data, fam)
			d := newDumper(v, io.Discard, []rubyvm.HeapPage{{Start: base, SlotSize: 40, Total: 100}}, Options{})
			budget := d.subclassSteps
			if err := d.subclasses(ext); err != nil {
				t.Fatalf("one walk: %v", err)
			}
			if steps := budget - d.subclassSteps; steps < 10 || steps > 40 {
				t.Fatalf("one walk of a list of 10 entries that loops took %d steps", steps)
			}
			var err error
			calls := 0
			for ; calls < 100000 && err == nil; calls++ {
				err = d.subclasses(ext)
			}
			if !errors.Is(err, errSubclassBudget) {
				t.Fatalf("%d walks of the loop: no end of the budget (%v)", calls, err)
			}
			if d.subclassSteps != 0 {
				t.Errorf("the walks ended with %d steps of the budget left, or past it", d.subclassSteps)
			}
			if budget > 1<<16+100 {
				t.Errorf("budget %d for a heap of 100 slots", budget)
			}
		})
	}
}
