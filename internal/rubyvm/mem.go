package rubyvm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rbscope/rbscope/internal/target"
)

// ErrGarbage means memory did not hold what the layout says should be there:
// a torn read of a changing process, a dead thread, or a wrong layout.
var ErrGarbage = errors.New("memory does not look like Ruby's")

// mem reads little-endian words from a target.
type mem struct {
	t   target.Target
	buf [8]byte
}

func (m *mem) read(addr uint64, n int) ([]byte, error) {
	if addr == 0 {
		return nil, fmt.Errorf("read %d bytes at NULL: %w", n, ErrGarbage)
	}
	b := make([]byte, n)
	if err := target.ReadFull(m.t, b, addr); err != nil {
		return nil, err
	}
	return b, nil
}

func (m *mem) u64(addr uint64) (uint64, error) {
	if addr == 0 {
		return 0, fmt.Errorf("read at NULL: %w", ErrGarbage)
	}
	if err := target.ReadFull(m.t, m.buf[:8], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(m.buf[:8]), nil
}

func (m *mem) u32(addr uint64) (uint32, error) {
	if addr == 0 {
		return 0, fmt.Errorf("read at NULL: %w", ErrGarbage)
	}
	if err := target.ReadFull(m.t, m.buf[:4], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(m.buf[:4]), nil
}

// at returns base plus a layout offset.
func at(base uint64, off int64) uint64 { return base + uint64(off) }

func le64(b []byte, off int64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func le32(b []byte, off int64) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// Word reads the word (a VALUE or a pointer) at addr through the VM's
// reader of its target.
func (v *VM) Word(addr uint64) (uint64, error) { return v.m.u64(addr) }
