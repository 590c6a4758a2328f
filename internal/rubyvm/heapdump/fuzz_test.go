package heapdump

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
)

// fuzzVM is a VM of the given layout family over random memory at base,
// its VM pointer and symbol table at the start.
func fuzzVM(base uint64, data []byte, fam string) *rubyvm.VM {
	return rubyvm.OverMemory(&target.Memory{Base: base, Data: data}, layouts.For(fam), base, map[string]uint64{"ruby_global_symbols": base + 8})
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
				d := newDumper(v, &out, []rubyvm.HeapPage{{Start: base, SlotSize: slotSize, Total: n}}, Options{})
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
