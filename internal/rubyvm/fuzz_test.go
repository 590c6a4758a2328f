package rubyvm

import (
	"encoding/binary"
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
func (f *fuzzMemory) Threads() ([]int, error)       { return []int{1}, nil }
func (f *fuzzMemory) Open(string) (*os.File, error) { return nil, os.ErrNotExist }
func (f *fuzzMemory) Pause() error                  { return nil }
func (f *fuzzMemory) Resume() error                 { return nil }
func (f *fuzzMemory) Close() error                  { return nil }

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
			fm := &fuzzMemory{base: base, mem: data}
			v := &VM{T: fm, Layout: layouts.For(fam), m: mem{t: fm}, vmPtrAddr: base}
			v.ForgetCaches()
			v.symbolsLooked = true
			v.symbolsAddr = base + 8
			ths, _ := v.Threads()
			for _, th := range ths {
				if len(th.Frames) > maxFrames {
					t.Fatalf("%d frames", len(th.Frames))
				}
			}
		}
	})
}
