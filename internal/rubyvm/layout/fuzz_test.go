package layout

import (
	"debug/dwarf"
	"debug/elf"
	"os"
	"testing"
)

// FuzzFromDWARF builds layouts from random DWARF sections (a debug file
// found by build-id can be anyone's): an error or a layout, never a panic
// or an endless walk. The seeds are this test binary's own sections, cut
// short.
func FuzzFromDWARF(f *testing.F) {
	if exe, err := os.Executable(); err == nil {
		if ef, err := elf.Open(exe); err == nil {
			sec := func(name string, n int) []byte {
				s := ef.Section(name)
				if s == nil {
					return nil
				}
				b, _ := s.Data()
				return b[:min(len(b), n)]
			}
			f.Add(sec(".debug_abbrev", 4096), sec(".debug_info", 16384), sec(".debug_str", 16384))
			ef.Close()
		}
	}
	f.Add([]byte{1, 0x11, 1, 0, 0, 0}, []byte{0, 0, 0, 0, 4, 0}, []byte{})
	f.Fuzz(func(t *testing.T, abbrev, info, str []byte) {
		d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, str)
		if err != nil {
			return
		}
		FromDWARF(d, "3.3", "fuzz")
	})
}
