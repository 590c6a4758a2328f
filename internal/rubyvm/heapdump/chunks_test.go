package heapdump

import (
	"errors"
	"testing"

	"github.com/rbscope/rbscope/internal/target"
)

// slicedMemory is target.Memory that holds a copy of the process, as a
// snapshot does.
type slicedMemory struct{ target.Memory }

func (s *slicedMemory) Slice(addr uint64, n int) ([]byte, bool) {
	if addr < s.Base || addr-s.Base+uint64(n) > uint64(len(s.Data)) {
		return nil, false
	}
	return s.Data[addr-s.Base : addr-s.Base+uint64(n)], true
}

// TestChunkCacheCharges: a dump's reads through the chunk cache are
// charged what they ask, and a chunk read ahead chunkFillCharge more, not
// its 16 KiB; a snapshot's copy is read in place with no chunk; the bytes
// read are the process's; once the budget is spent reads fail with
// errReadBudget.
func TestChunkCacheCharges(t *testing.T) {
	const base = 0x100000
	mem := make([]byte, 64*chunkSize)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name   string
		target target.Target
		fill   int64
	}{
		{"live", &target.Memory{Base: base, Data: mem}, chunkFillCharge},
		{"snapshot", &slicedMemory{target.Memory{Base: base, Data: mem}}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cc chunkCache
			tgt := budgeted{Target: c.target, left: 1 << 30}
			cc.setTarget(&tgt)
			start := tgt.left
			b := make([]byte, 8)
			// 32 reads in 32 chunks, then 32 more in the same chunks.
			for round := 0; round < 2; round++ {
				for i := 0; i < 32; i++ {
					addr := uint64(base + i*chunkSize + 100 + round*8)
					if err := cc.read(b, addr); err != nil {
						t.Fatal(err)
					}
					if off := addr - base; string(b) != string(mem[off:off+8]) {
						t.Fatalf("read at %#x: %v, want %v", addr, b, mem[off:off+8])
					}
				}
			}
			if spent, want := start-tgt.left, 64*8+32*c.fill; spent != want {
				t.Errorf("64 reads of 8 bytes over 32 chunks cost %d bytes of budget, want %d", spent, want)
			}
			tgt.left = 4
			if err := cc.read(b, base); !errors.Is(err, errReadBudget) || !tgt.spent {
				t.Errorf("a read past the budget: %v (spent %v), want errReadBudget", err, tgt.spent)
			}
		})
	}
}
