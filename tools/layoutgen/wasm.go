package main

import (
	"bytes"
	"debug/dwarf"
	"errors"
	"fmt"
	"os"
)

// wasmDWARF reads the DWARF a WebAssembly module keeps in its custom
// sections (.debug_info, .debug_abbrev, ...). The binary format is a magic
// "\0asm", a 4-byte version, then sections: an id byte and a LEB128 size;
// a custom section (id 0) starts with a LEB128-length name.
func wasmDWARF(file string) (*dwarf.Data, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	secs, err := wasmCustomSections(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if secs[".debug_info"] == nil || secs[".debug_abbrev"] == nil {
		return nil, fmt.Errorf("%s has no DWARF (.debug_info and .debug_abbrev custom sections)", file)
	}
	d, err := dwarf.New(secs[".debug_abbrev"], secs[".debug_aranges"], nil, secs[".debug_info"],
		secs[".debug_line"], nil, secs[".debug_ranges"], secs[".debug_str"])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, name := range []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists", ".debug_loclists"} {
		if s := secs[name]; s != nil {
			if err := d.AddSection(name, s); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, name, err)
			}
		}
	}
	return d, nil
}

// wasmCustomSections returns the custom sections of a wasm module by name.
func wasmCustomSections(b []byte) (map[string][]byte, error) {
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("\x00asm")) {
		return nil, errors.New("not a WebAssembly module")
	}
	if v := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24; v != 1 {
		return nil, fmt.Errorf("WebAssembly binary version %d, want 1", v)
	}
	secs := map[string][]byte{}
	for i := 8; i < len(b); {
		id := b[i]
		size, n, err := uleb128(b[i+1:])
		if err != nil {
			return nil, fmt.Errorf("section at %#x: %w", i, err)
		}
		start := i + 1 + n
		end := start + int(size)
		if size > uint64(len(b)) || end > len(b) {
			return nil, fmt.Errorf("section at %#x runs past the end", i)
		}
		if id == 0 {
			nlen, m, err := uleb128(b[start:end])
			if err != nil || uint64(end-start-m) < nlen {
				return nil, fmt.Errorf("custom section at %#x has a bad name", i)
			}
			name := string(b[start+m : start+m+int(nlen)])
			if _, dup := secs[name]; !dup {
				secs[name] = b[start+m+int(nlen) : end]
			}
		}
		i = end
	}
	return secs, nil
}

func uleb128(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("bad LEB128")
}
