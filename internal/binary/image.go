// Package binary knows about the ELF images mapped into a target: where they
// are loaded, what symbols they define and what debug information they carry.
package binary

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	encbin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"golang.org/x/sys/unix"

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
	// InMemory says the image was read from the target's memory (a core's
	// copy of the file's pages) because the file is not on this machine;
	// MemoryErr then says what of it the memory lacked (no ELF header, no
	// dynamic symbols), or is nil.
	InMemory  bool
	MemoryErr error

	// Skipped says what was not read because it is over a budget.
	Skipped []string

	file    io.Closer // the file, an io.ReaderAt too
	opener  func(string) (*os.File, error)
	debug   *DebugSource // once chosen
	symbols map[string]elf.Symbol
	dwarf   *dwarf.Data
	dwarfOK bool
	funcs   []funcSym // function symbols by address, for SymbolAt
	strtabs [][]byte  // the string tables funcs' names are in
}

// ErrNoSymbol is returned when a symbol is not in the image.
var ErrNoSymbol = errors.New("symbol not found")

// Budgets on what an image may make rbscope read. The file comes from the
// target, which may be hostile, and may declare sections far larger than it
// holds: a sparse file reads as zeros for as long as it claims to be.
const (
	// MaxSymbolTableBytes caps a symbol table and its string table (Ruby's
	// own .symtab is about 400 KB); a larger one is not read.
	MaxSymbolTableBytes = 8 << 20
	// maxNoteBytes caps a note section or segment read for the build ID.
	maxNoteBytes = 64 << 10
	// maxShstrtabBytes caps the section name table, which the ELF parser
	// reads whole.
	maxShstrtabBytes = 1 << 20
	// maxSections caps the number of section headers.
	maxSections = 1 << 16
	// MaxDebugBytes caps the debug sections of one file, as declared
	// (uncompressed): a debug build of libruby has about 60 MB.
	MaxDebugBytes = 1 << 30
)

// Open parses the ELF file mapped at path in t and computes its load bias
// from t's mappings of that file.
//
// For a live process it opens the mapped inode itself, through
// /proc/PID/map_files, never the path the target names (which the target's
// user may have replaced by a FIFO or a symlink to a file it cannot read).
// Where map_files cannot be opened it opens the path inside the process's
// root without following a final symlink and requires a regular file with
// the mapping's device and inode. In both cases the file's ELF headers and
// build ID must read the same as the image in the process's memory.
//
// For a core whose copy of the file is missing or differs (and no
// --sysroot or --exe says where it is), the image is read from the core's
// memory (OpenInMemory), and what the core lacked of it is in MemoryErr.
func Open(t target.Target, maps []target.Mapping, path string) (*Image, error) {
	f, err := openImage(t, maps, path)
	if c, ok := t.(*target.Core); ok && err != nil && c.UseOwnImage(path, err) {
		im, merr := OpenInMemory(t, maps, path)
		if im == nil {
			return nil, fmt.Errorf("open %s: %w; and from the core's memory: %w", path, err, merr)
		}
		im.MemoryErr = merr
		return im, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	im, err := newImage(f, f, path, maps)
	if err != nil {
		f.Close()
		return nil, err
	}
	im.opener = t.Open
	if _, live := t.(*target.Live); live {
		if err := im.matchesMemory(t); err != nil {
			im.Close()
			return nil, err
		}
	}
	return im, nil
}

// newImage parses the ELF file in r (closed by c) mapped at path.
func newImage(r io.ReaderAt, c io.Closer, path string, maps []target.Mapping) (*Image, error) {
	if err := checkHeaders(r); err != nil {
		return nil, fmt.Errorf("%s: not an ELF file rbscope reads: %w", path, err)
	}
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF file: %w", path, err)
	}
	bias, err := loadBias(ef, maps, path)
	if err != nil {
		return nil, err
	}
	return &Image{Path: path, File: ef, Bias: bias, file: c}, nil
}

// ErrNotMapped is returned when the file to open is not mapped in the process.
var ErrNotMapped = errors.New("not mapped in the process")

// openImage opens the file mapped at path: see Open.
func openImage(t target.Target, maps []target.Mapping, path string) (*os.File, error) {
	if _, live := t.(*target.Live); !live {
		// A core's PID names no process here; its Open opens regular
		// files only, without following links (target.OpenInRoot).
		return t.Open(path)
	}
	var m target.Mapping
	found := false
	for _, mm := range maps {
		if mm.Path == path || mm.Path == path+" (deleted)" {
			m, found = mm, true
			break
		}
	}
	if !found {
		return nil, ErrNotMapped
	}
	mapped := fmt.Sprintf("/proc/%d/map_files/%x-%x", t.PID(), m.Start, m.End)
	f, err := target.OpenRegular(mapped)
	if err == nil {
		return f, nil
	}
	if errors.Is(err, os.ErrPermission) {
		err = fmt.Errorf("%w (map_files needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE)", err)
	}
	// Without map_files: the executable is /proc/PID/exe, which the kernel
	// resolves to the inode the process runs, whatever its paths say now.
	if f, err := target.OpenRegular(fmt.Sprintf("/proc/%d/exe", t.PID())); err == nil {
		if isMapped(f, m) {
			return f, nil
		}
		f.Close()
	}
	if strings.HasSuffix(m.Path, " (deleted)") {
		return nil, fmt.Errorf("%w (and the file is deleted)", err)
	}
	// Else open the path inside the process's root, and only if it is the
	// very file that is mapped. The kernel shows the path from the root of
	// the process's mount namespace: for a process chrooted below that
	// root, it starts with the chroot's directory, which the link
	// /proc/PID/root shows the same way.
	root := fmt.Sprintf("/proc/%d/root", t.PID())
	paths := []string{path}
	if dir, lerr := os.Readlink(root); lerr == nil && dir != "/" && strings.HasPrefix(dir, "/") && strings.HasPrefix(path, dir+"/") {
		paths = append(paths, path[len(dir):])
	}
	// One line, every way tried: map_files's refusal, then each path's.
	for _, p := range paths {
		f, perr := target.OpenInRoot(root, p, false)
		if perr != nil {
			err = fmt.Errorf("%w; %w", err, perr)
			continue
		}
		if isMapped(f, m) {
			return f, nil
		}
		var st unix.Stat_t
		_ = unix.Fstat(int(f.Fd()), &st)
		err = fmt.Errorf("%w; the file now at %s inside the process's root is not the mapped one (inode %d on device %#x, mapped %d on %#x)", err, p, st.Ino, st.Dev, m.Inode, m.Dev)
		f.Close()
	}
	return nil, err
}

// isMapped reports whether f is the inode m maps.
func isMapped(f *os.File, m target.Mapping) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) == nil && st.Ino == m.Inode && st.Dev == m.Dev
}

// checkHeaders refuses, before the ELF parser reads them, headers that would
// make it read more than the budgets allow: the section name table and the
// section headers are read whole.
func checkHeaders(r io.ReaderAt) error {
	var eh [64]byte
	if _, err := r.ReadAt(eh[:], 0); err != nil {
		return fmt.Errorf("reading the ELF header: %w", err)
	}
	if string(eh[:4]) != elf.ELFMAG {
		return errors.New("no ELF magic number")
	}
	if elf.Class(eh[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(eh[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return fmt.Errorf("%v %v, not a 64-bit little-endian ELF file", elf.Class(eh[elf.EI_CLASS]), elf.Data(eh[elf.EI_DATA]))
	}
	le := encbin.LittleEndian
	shoff, shentsize := le.Uint64(eh[0x28:]), uint64(le.Uint16(eh[0x3a:]))
	shnum, shstrndx := uint64(le.Uint16(eh[0x3c:])), uint64(le.Uint16(eh[0x3e:]))
	if shoff == 0 {
		return nil // no sections
	}
	if shentsize < 64 {
		return fmt.Errorf("section header size %d", shentsize)
	}
	sh := func(i uint64) ([64]byte, error) {
		var b [64]byte
		off := shoff + i*shentsize
		if i > maxSections || off < shoff || off > math.MaxInt64-64 {
			return b, fmt.Errorf("section header %d out of range", i)
		}
		_, err := r.ReadAt(b[:], int64(off))
		return b, err
	}
	if shnum == 0 || shstrndx == uint64(elf.SHN_XINDEX) {
		s0, err := sh(0) // the real counts live in section 0
		if err != nil {
			return fmt.Errorf("reading section header 0: %w", err)
		}
		if shnum == 0 {
			shnum = le.Uint64(s0[0x20:])
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(le.Uint32(s0[0x28:]))
		}
	}
	if shnum > maxSections {
		return fmt.Errorf("%d sections (at most %d read)", shnum, maxSections)
	}
	if shstrndx == 0 || shstrndx >= shnum {
		return nil // no name table: the parser reads none
	}
	s, err := sh(shstrndx)
	if err != nil {
		return fmt.Errorf("reading the section name table's header: %w", err)
	}
	if size := le.Uint64(s[0x20:]); size > maxShstrtabBytes {
		return fmt.Errorf("section name table of %d bytes (at most %d read)", size, maxShstrtabBytes)
	}
	return nil
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
	if im.debug != nil && im.debug.debugFile != nil {
		im.debug.debugFile.Close()
		im.debug.debugFile = nil
	}
	if im.file != nil {
		return im.file.Close()
	}
	return nil
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
		if sec.Type != elf.SHT_NOTE || sec.Size > maxNoteBytes {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		if id := buildID(data, im.File.ByteOrder); id != "" {
			return id
		}
	}
	return ""
}

// buildID finds the GNU build ID note among the notes in data and returns
// its descriptor as hex, or "". The sizes come from the file: they are
// added in 64 bits and checked against what data holds.
func buildID(data []byte, order encbin.ByteOrder) string {
	for uint64(len(data)) >= 12 {
		nsz, dsz, typ := uint64(order.Uint32(data)), uint64(order.Uint32(data[4:])), order.Uint32(data[8:])
		nameEnd := 12 + align4(nsz)
		next := nameEnd + align4(dsz)
		if next > uint64(len(data)) {
			return ""
		}
		if typ == ntGNUBuildID && nsz == 4 && string(data[12:16]) == "GNU\x00" {
			return fmt.Sprintf("%x", data[nameEnd:nameEnd+dsz])
		}
		data = data[next:]
	}
	return ""
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// ntGNUBuildID is the type of the GNU build ID note.
const ntGNUBuildID = 3

// matchesMemory checks that the file read is the image mapped in t: its ELF
// and program headers and its note segments (the build ID) must read the
// same in the target's memory at the load bias. A file replaced or
// rewritten in place since it was mapped fails, before any symbol of it is
// used to read or call into the target.
func (im *Image) matchesMemory(t target.Target) error {
	var loads []*elf.Prog
	for _, p := range im.File.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p)
		}
	}
	// inLoad reports whether the file range [off, off+n) is loaded, and
	// where in memory.
	inLoad := func(off, n uint64) (uint64, bool) {
		for _, p := range loads {
			if off >= p.Off && off+n >= off && off+n <= p.Off+p.Filesz {
				return im.Bias + p.Vaddr + (off - p.Off), true
			}
		}
		return 0, false
	}
	same := func(what string, off, n uint64) error {
		addr, ok := inLoad(off, n)
		if !ok {
			return nil
		}
		file, mem := make([]byte, n), make([]byte, n)
		if _, err := im.readFile(file, int64(off)); err != nil {
			return fmt.Errorf("%s: reading its %s: %w", im.Path, what, err)
		}
		if err := target.ReadFull(t, mem, addr); err != nil {
			return fmt.Errorf("%s: reading its mapped %s: %w", im.Path, what, err)
		}
		if !bytes.Equal(file, mem) {
			return fmt.Errorf("%s: the file's %s differ from the mapped image's: it is not the file the process runs", im.Path, what)
		}
		return nil
	}
	var eh [64]byte
	if _, err := im.readFile(eh[:], 0); err != nil {
		return fmt.Errorf("%s: %w", im.Path, err)
	}
	phoff := encbin.LittleEndian.Uint64(eh[0x20:])
	phsize := uint64(encbin.LittleEndian.Uint16(eh[0x36:])) * uint64(encbin.LittleEndian.Uint16(eh[0x38:]))
	if _, ok := inLoad(0, phoff+phsize); !ok || phoff+phsize > maxNoteBytes {
		return fmt.Errorf("%s: its ELF and program headers are not mapped: cannot check it is the file the process runs", im.Path)
	}
	if err := same("ELF and program headers", 0, phoff+phsize); err != nil {
		return err
	}
	for _, p := range im.File.Progs {
		if p.Type == elf.PT_NOTE && p.Filesz <= maxNoteBytes {
			if err := same("notes (build ID)", p.Off, p.Filesz); err != nil {
				return err
			}
		}
	}
	return nil
}

// readFile reads the image's file at off.
func (im *Image) readFile(p []byte, off int64) (int, error) {
	r, ok := im.file.(io.ReaderAt)
	if !ok {
		return 0, errors.New("the file cannot be read at an offset")
	}
	return r.ReadAt(p, off)
}

// Limits on what debug sections may declare beyond MaxDebugBytes: a
// section larger than sparseSlack must have no hole (a sparse file
// claiming a gigabyte of zeros is refused), and a compressed section may
// expand at most maxDebugInflation times (real DWARF compresses 3 to 8
// times).
const (
	maxDebugInflation = 64
	sparseSlack       = 1 << 20
)

// debugOverBudget says why the debug sections ef.DWARF would read are more
// than rbscope reads: over MaxDebugBytes as declared (uncompressed), more
// than file holds on disk, or compressed past maxDebugInflation. It
// returns "" when they are within budget. file is what ef reads (an
// *os.File gives its allocated size; other readers are in memory).
func debugOverBudget(ef *elf.File, file any) string {
	var declared uint64
	var sparse string
	f, onDisk := file.(*os.File)
	for _, s := range ef.Sections {
		if !debugSection(s.Name) {
			continue
		}
		size := s.Size
		if strings.HasPrefix(s.Name, ".zdebug_") {
			size = zdebugSize(s)
		}
		if s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_") {
			if s.FileSize > 0 && size/s.FileSize > maxDebugInflation {
				return fmt.Sprintf("%s declares %d bytes from %d compressed (at most %d times)", s.Name, size, s.FileSize, maxDebugInflation)
			}
		}
		if onDisk && sparse == "" && s.Type != elf.SHT_NOBITS && s.FileSize > sparseSlack && s.Offset <= math.MaxInt64 {
			// A hole inside the section: zeros the disk does not hold.
			// (Allocated blocks are no measure: a compressing file system
			// stores real DWARF in a fraction of its size.) A file system
			// without holes puts the first one at the end of the file.
			if hole, err := unix.Seek(int(f.Fd()), int64(s.Offset), unix.SEEK_HOLE); err == nil && uint64(hole) < s.Offset+s.FileSize {
				sparse = fmt.Sprintf("%s has a hole at offset %d (a sparse file)", s.Name, hole)
			}
		}
		declared += min(size, math.MaxUint64-declared)
	}
	if declared > MaxDebugBytes {
		return fmt.Sprintf("%d bytes declared (at most %d read)", declared, MaxDebugBytes)
	}
	return sparse
}

// debugSection tells whether ef.DWARF reads a section of that name: the
// debug sections, compressed or not, and their relocations.
func debugSection(name string) bool {
	name = strings.TrimPrefix(strings.TrimPrefix(name, ".rela"), ".rel")
	return strings.HasPrefix(name, ".debug_") || strings.HasPrefix(name, ".zdebug_")
}

// zdebugSize is the uncompressed size a GNU .zdebug_ section declares in
// its header ("ZLIB" and a big-endian 64-bit size), or its stored size
// when the header cannot be read.
func zdebugSize(s *elf.Section) uint64 {
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return s.Size // debug/elf gives such a section no raw reader
	}
	var h [12]byte
	if _, err := s.ReadAt(h[:], 0); err != nil || string(h[:4]) != "ZLIB" {
		return s.Size
	}
	return encbin.BigEndian.Uint64(h[4:])
}

// SymbolAt returns the function symbol that contains (or most closely
// precedes) the run-time address addr, and addr's offset from it.
func (im *Image) SymbolAt(addr uint64) (name string, off uint64, ok bool) {
	f, ok := im.funcBefore(addr)
	if !ok || f.size > 0 && addr-im.Bias >= f.start+f.size+4096 {
		return "", 0, false // past the end of the last known function
	}
	return f.name(im.strtabs), addr - im.Bias - f.start, true
}

// FunctionAt returns the function symbol that holds the run-time address
// addr: its name, link-time start and size (0 when the symbol has none).
// A symbol with a size holds only the addresses within it; ok is false
// when no symbol precedes addr or the one before it ends before addr.
func (im *Image) FunctionAt(addr uint64) (name string, start, size uint64, ok bool) {
	f, ok := im.funcBefore(addr)
	if !ok || f.size > 0 && addr-im.Bias >= f.start+f.size {
		return "", 0, 0, false
	}
	return f.name(im.strtabs), f.start, f.size, true
}
