// Package binary knows about the ELF images mapped into a target: where they
// are loaded, what symbols they define and what debug information they carry.
package binary

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/target"
)

// Image is one ELF file mapped into a target.
type Image struct {
	// Path is the file's path as the target sees it.
	Path string
	// Bias is what to add to a symbol's link-time address to get its
	// run-time address (non-zero for shared libraries and PIE executables).
	Bias uint64
	// File is the parsed ELF file.
	File *elf.File

	file    *os.File
	symbols map[string]elf.Symbol
	opener  func(string) (*os.File, error)
	dwarf   *dwarf.Data
	dwarfOK bool
	funcs   []funcSym // function symbols by address, for SymbolAt
}

// ErrNoSymbol is returned when a symbol is not in the image.
var ErrNoSymbol = errors.New("symbol not found")

// Open parses the ELF file at path (as seen by t) and computes its load bias
// from t's mappings of that file.
func Open(t target.Target, maps []target.Mapping, path string) (*Image, error) {
	f, err := t.Open(path)
	if _, live := t.(*target.Live); err != nil && !live {
		return nil, fmt.Errorf("open %s: %w", path, err) // a core's PID names no process here
	}
	if err != nil {
		// The file may be gone from disk (upgraded package) or hidden in
		// another mount namespace: /proc/PID/map_files still has it.
		f, err = openMapFile(t, maps, path)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: not an ELF file: %w", path, err)
	}
	im := &Image{Path: path, File: ef, file: f, opener: t.Open}
	bias, err := loadBias(ef, maps, path)
	if err != nil {
		im.Close()
		return nil, err
	}
	im.Bias = bias
	return im, nil
}

func openMapFile(t target.Target, maps []target.Mapping, path string) (*os.File, error) {
	for _, m := range maps {
		if m.Path == path || m.Path == path+" (deleted)" {
			return os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", t.PID(), m.Start, m.End))
		}
	}
	return nil, os.ErrNotExist
}

// loadBias finds the mapping of the file's first loadable segment.
func loadBias(ef *elf.File, maps []target.Mapping, path string) (uint64, error) {
	var first *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			first = p
			break
		}
	}
	if first == nil {
		return 0, fmt.Errorf("%s: no loadable segment", path)
	}
	pageOff := first.Off &^ 0xfff
	var biases []uint64
	for _, m := range maps {
		// The loader maps segments privately; a shared mapping of the same
		// file (Ruby's own crash reporter maps libruby to read its symbols)
		// is not where the code runs.
		if (m.Path == path || m.Path == path+" (deleted)") && m.Offset == pageOff && strings.HasSuffix(m.Perms, "p") {
			biases = append(biases, m.Start-(first.Vaddr&^0xfff))
		}
	}
	// A core file does not tell shared mappings from private ones: when
	// the file is mapped more than once, keep the mapping that the image's
	// other segments follow where the loader puts them.
	if len(biases) > 1 {
		for _, bias := range biases {
			if segmentsFollow(ef, maps, path, first, bias) {
				return bias, nil
			}
		}
	}
	if len(biases) > 0 {
		return biases[0], nil
	}
	return 0, fmt.Errorf("%s: not mapped in the process", path)
}

// segmentsFollow reports whether another loadable segment than first is
// mapped from path at its link-time address plus bias.
func segmentsFollow(ef *elf.File, maps []target.Mapping, path string, first *elf.Prog, bias uint64) bool {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p == first || p.Filesz == 0 {
			continue
		}
		for _, m := range maps {
			if (m.Path == path || m.Path == path+" (deleted)") && m.Offset == p.Off&^0xfff && m.Start == bias+(p.Vaddr&^0xfff) {
				return true
			}
		}
	}
	return false
}

// Close releases the file.
func (im *Image) Close() error {
	if im.file != nil {
		return im.file.Close()
	}
	return nil
}

func (im *Image) loadSymbols() {
	if im.symbols != nil {
		return
	}
	im.symbols = map[string]elf.Symbol{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if s.Name == "" || s.Section == elf.SHN_UNDEF {
				continue
			}
			if _, ok := im.symbols[s.Name]; !ok {
				im.symbols[s.Name] = s
			}
		}
	}
	if syms, err := im.File.Symbols(); err == nil {
		add(syms)
	}
	if syms, err := im.File.DynamicSymbols(); err == nil {
		add(syms)
	}
}

// Symbol returns the run-time address and size of a defined symbol.
func (im *Image) Symbol(name string) (addr, size uint64, err error) {
	im.loadSymbols()
	s, ok := im.symbols[name]
	if !ok {
		return 0, 0, fmt.Errorf("%s in %s: %w", name, im.Path, ErrNoSymbol)
	}
	if elf.ST_TYPE(s.Info) == elf.STT_TLS {
		return 0, 0, fmt.Errorf("%s in %s is thread-local", name, im.Path)
	}
	return s.Value + im.Bias, s.Size, nil
}

// HasSymbol reports whether the image defines name.
func (im *Image) HasSymbol(name string) bool {
	im.loadSymbols()
	_, ok := im.symbols[name]
	return ok
}

// Code returns size bytes of the file's contents at the run-time address
// addr, read from the file rather than from the target.
func (im *Image) Code(addr, size uint64) ([]byte, error) {
	vaddr := addr - im.Bias
	for _, p := range im.File.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr+size > p.Vaddr+p.Filesz {
			continue
		}
		b := make([]byte, size)
		if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil {
			return nil, fmt.Errorf("read %s at %#x: %w", im.Path, vaddr, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s: address %#x is not in a loaded segment", im.Path, vaddr)
}

// BuildID returns the GNU build ID as hex, or "".
func (im *Image) BuildID() string {
	for _, sec := range im.File.Sections {
		if sec.Type != elf.SHT_NOTE {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		for len(data) >= 12 {
			order := im.File.ByteOrder
			nsz, dsz, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
			name := data[12:]
			nameEnd := 12 + align4(nsz)
			if uint64(len(data)) < uint64(nameEnd)+uint64(align4(dsz)) {
				break
			}
			desc := data[nameEnd : nameEnd+dsz]
			if typ == 3 && bytes.HasPrefix(name, []byte("GNU\x00")) {
				return fmt.Sprintf("%x", desc)
			}
			data = data[nameEnd+align4(dsz):]
		}
	}
	return ""
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// DWARF returns the image's debug information: from the file itself, or
// from a separate debug file found by build ID or .gnu_debuglink under
// /usr/lib/debug. It returns nil when there is none.
func (im *Image) DWARF() *dwarf.Data {
	if im.dwarfOK {
		return im.dwarf
	}
	im.dwarfOK = true
	if d := dwarfOf(im.File); d != nil {
		im.dwarf = d
		return d
	}
	for _, p := range im.debugFileCandidates() {
		f, err := im.opener(p)
		if err != nil {
			continue
		}
		ef, err := elf.NewFile(f)
		if err != nil {
			f.Close()
			continue
		}
		if d := dwarfOf(ef); d != nil {
			im.dwarf = d // the file stays open for the life of the process
			return d
		}
		f.Close()
	}
	return nil
}

func dwarfOf(ef *elf.File) *dwarf.Data {
	if ef.Section(".debug_info") == nil {
		return nil
	}
	d, err := ef.DWARF()
	if err != nil {
		return nil
	}
	return d
}

func (im *Image) debugFileCandidates() []string {
	var out []string
	if id := im.BuildID(); len(id) > 2 {
		out = append(out, filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug"))
	}
	if sec := im.File.Section(".gnu_debuglink"); sec != nil {
		if data, err := sec.Data(); err == nil {
			name := string(data)
			if i := strings.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			dir := filepath.Dir(im.Path)
			out = append(out,
				filepath.Join(dir, name),
				filepath.Join(dir, ".debug", name),
				filepath.Join("/usr/lib/debug", dir, name))
		}
	}
	return out
}

// SymbolAt returns the function symbol that contains (or most closely
// precedes) the run-time address addr, and addr's offset from it.
func (im *Image) SymbolAt(addr uint64) (name string, off uint64, ok bool) {
	if im.funcs == nil {
		im.loadSymbols()
		for n, s := range im.symbols {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				im.funcs = append(im.funcs, funcSym{s.Value, s.Size, n})
			}
		}
		sort.Slice(im.funcs, func(i, j int) bool { return im.funcs[i].start < im.funcs[j].start })
	}
	v := addr - im.Bias
	i := sort.Search(len(im.funcs), func(i int) bool { return im.funcs[i].start > v }) - 1
	if i < 0 {
		return "", 0, false
	}
	f := im.funcs[i]
	if f.size > 0 && v >= f.start+f.size+4096 {
		return "", 0, false // past the end of the last known function
	}
	return f.name, v - f.start, true
}

type funcSym struct {
	start, size uint64
	name        string
}
