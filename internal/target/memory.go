package target

import (
	"errors"
	"os"
)

// Memory is a Target whose whole address space is one buffer, Data at
// Base, with one thread, no registers and no files: what a torn or
// corrupt read of a real process can look like, for the fuzzers of the
// readers above target.
type Memory struct {
	Base uint64
	Data []byte
}

// errUnmapped is a read of Memory outside its buffer.
var errUnmapped = errors.New("unmapped")

// PID is 0: Memory is no process.
func (f *Memory) PID() int { return 0 }

// ReadAt reads the buffer; outside it, the read fails as at an unmapped
// address.
func (f *Memory) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < f.Base || addr-f.Base >= uint64(len(f.Data)) {
		return 0, errUnmapped
	}
	n := copy(p, f.Data[addr-f.Base:])
	if n < len(p) {
		return n, errUnmapped
	}
	return n, nil
}

// Mappings is the buffer, one writable mapping.
func (f *Memory) Mappings() ([]Mapping, error) {
	return []Mapping{{Start: f.Base, End: f.Base + uint64(len(f.Data)), Perms: "rw-p"}}, nil
}

// Threads is one thread, 1.
func (f *Memory) Threads() ([]int, error) { return []int{1}, nil }

// Registers has none to give.
func (f *Memory) Registers(int) (Regs, error) { return Regs{}, ErrNoRegisters }

// Open opens no file.
func (f *Memory) Open(string) (*os.File, error) { return nil, os.ErrNotExist }

// Close does nothing.
func (f *Memory) Close() error { return nil }
