package binary

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	encbin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xi2/xz"
)

// DebugSource says where an image's symbols and debug information come
// from. The choice is made once per image (Image.DebugSource), and Symbol,
// SymbolAt, FunctionAt, DWARF and DebugFileSection all read from it:
//
//   - the symbol tables: the file's own .symtab, else the .symtab of its
//     separate debug file, else the .symtab of the ELF file it carries
//     xz-compressed in .gnu_debugdata (MiniDebugInfo, as Fedora and RHEL
//     build their libraries); and the file's .dynsym. An image read from
//     a core's memory has the dynamic symbol table its PT_DYNAMIC names.
//   - the DWARF: the file's own, else its separate debug file's.
//   - other debug sections (.debug_frame): the separate debug file's.
//
// The separate debug file is the one whose build ID is the image's, found
// by build ID under /usr/lib/debug/.build-id or by .gnu_debuglink.
type DebugSource struct {
	// DebugFile is the path of the separate debug file (as the target
	// sees it), else MiniDebugInfo when the symbols come from the image's
	// .gnu_debugdata, else "".
	DebugFile string
	// Symbols names the symbol tables read, most complete first, each as
	// "SECTION of FILE" (FILE is the image's path, or DebugFile), or
	// "dynamic symbols in memory".
	Symbols []string
	// DWARF names the file whose debug information DWARF returns (the
	// image's path, or DebugFile), or is "" when there is none.
	DWARF string

	tables    []symTable
	debugELF  *elf.File // the separate debug file, parsed; nil when none
	debugFile *os.File  // the separate debug file, closed with the image
	dwarfELF  *elf.File
}

// MiniDebugInfo is DebugSource.DebugFile for an image whose symbols come
// from its .gnu_debugdata section.
const MiniDebugInfo = ".gnu_debugdata (MiniDebugInfo)"

// memorySymbols is the name of the symbol table of an image read from a
// core's memory.
const memorySymbols = "dynamic symbols in memory"

// symTable is one symbol table: its Elf64_Sym entries and its string
// table, read when asked for.
type symTable struct {
	read func() (syms, strs []byte, err error)
}

// symEntry is the size of an Elf64_Sym.
const symEntry = 24

// DebugSource returns where the image's symbols and debug information come
// from, choosing it the first time it is asked for.
func (im *Image) DebugSource() *DebugSource {
	if im.debug != nil {
		return im.debug
	}
	src := &DebugSource{}
	im.debug = src
	if im.File == nil {
		return src
	}
	var separate string
	src.debugELF, src.debugFile, separate = im.separateDebug()
	src.DebugFile = separate
	if sec := im.File.SectionByType(elf.SHT_SYMTAB); sec != nil {
		src.addTable(im, im.File, sec, im.Path)
	} else if src.debugELF != nil && src.debugELF.SectionByType(elf.SHT_SYMTAB) != nil {
		src.addTable(im, src.debugELF, src.debugELF.SectionByType(elf.SHT_SYMTAB), separate)
	} else if sec := im.File.Section(".gnu_debugdata"); sec != nil && sec.Type != elf.SHT_NOBITS {
		// Decompressed when the symbols are first read, not to choose.
		if src.DebugFile == "" {
			src.DebugFile = MiniDebugInfo
		}
		src.Symbols = append(src.Symbols, ".symtab of "+MiniDebugInfo)
		var mini *elf.File
		read := false
		src.tables = append(src.tables, symTable{read: func() ([]byte, []byte, error) {
			if !read {
				read, mini = true, im.miniDebugInfo()
			}
			if mini == nil {
				return nil, nil, errors.New("no MiniDebugInfo read")
			}
			sec := mini.SectionByType(elf.SHT_SYMTAB)
			if sec == nil {
				return nil, nil, errors.New("MiniDebugInfo without .symtab")
			}
			return tableData(im, mini, sec)
		}})
	}
	if sec := im.File.SectionByType(elf.SHT_DYNSYM); sec != nil {
		src.addTable(im, im.File, sec, im.Path)
	}
	// The DWARF: the first of the file and its debug file that has some
	// within the budgets.
	for _, c := range []struct {
		ef   *elf.File
		r    any
		name string
	}{{im.File, im.file, im.Path}, {src.debugELF, src.debugFile, separate}} {
		if c.ef == nil || !hasDWARF(c.ef) {
			continue
		}
		if why := debugOverBudget(c.ef, c.r); why != "" {
			what := "debug information"
			if c.name != im.Path {
				what += " in " + c.name
			}
			im.Skipped = append(im.Skipped, what+": "+why)
			continue
		}
		src.dwarfELF, src.DWARF = c.ef, c.name
		break
	}
	return src
}

// addTable adds the symbol table sec of ef (the image's file or its
// separate debug file, named from).
func (src *DebugSource) addTable(im *Image, ef *elf.File, sec *elf.Section, from string) {
	name := sec.Name + " of " + from
	src.Symbols = append(src.Symbols, name)
	src.tables = append(src.tables, symTable{read: func() ([]byte, []byte, error) {
		return tableData(im, ef, sec)
	}})
}

// tableData reads the symbol table sec of ef and its string table, when
// both are within MaxSymbolTableBytes; a larger one is left out, and said
// so in im.Skipped.
func tableData(im *Image, ef *elf.File, sec *elf.Section) ([]byte, []byte, error) {
	if sec.Type == elf.SHT_NOBITS || ef.Class != elf.ELFCLASS64 || int(sec.Link) >= len(ef.Sections) {
		return nil, nil, fmt.Errorf("%s: no table", sec.Name)
	}
	strtab := ef.Sections[sec.Link]
	if size := max(sec.Size, strtab.Size); size > MaxSymbolTableBytes {
		why := fmt.Sprintf("%s: %d bytes declared (at most %d read)", sec.Name, size, MaxSymbolTableBytes)
		if !slices.Contains(im.Skipped, why) {
			im.Skipped = append(im.Skipped, why)
		}
		return nil, nil, errors.New(why)
	}
	syms, err := sec.Data()
	if err != nil {
		return nil, nil, err
	}
	strs, err := strtab.Data()
	return syms, strs, err
}

// addMemoryTable adds the dynamic symbol table read from a core's memory.
func (src *DebugSource) addMemoryTable(syms, strs []byte) {
	src.Symbols = append(src.Symbols, memorySymbols)
	src.tables = append(src.tables, symTable{read: func() ([]byte, []byte, error) {
		return syms, strs, nil
	}})
}

// rawSym is one Elf64_Sym entry.
type rawSym struct {
	nameOff     uint32
	info        byte
	shndx       uint16
	value, size uint64
}

// eachSym calls fn for each entry of the symbol table syms but the first
// (the null symbol).
func eachSym(syms []byte, fn func(rawSym)) {
	le := encbin.LittleEndian
	for off := symEntry; off+symEntry <= len(syms); off += symEntry {
		e := syms[off : off+symEntry]
		fn(rawSym{le.Uint32(e), e[4], le.Uint16(e[6:]), le.Uint64(e[8:]), le.Uint64(e[16:])})
	}
}

// loadSymbols builds the image's symbols by name from the tables its debug
// source chose: the first definition of a name is kept.
func (im *Image) loadSymbols() {
	if im.symbols != nil {
		return
	}
	im.symbols = map[string]elf.Symbol{}
	for _, tab := range im.DebugSource().tables {
		syms, strs, err := tab.read()
		if err != nil {
			continue
		}
		eachSym(syms, func(s rawSym) {
			if s.shndx == uint16(elf.SHN_UNDEF) || uint64(s.nameOff) >= uint64(len(strs)) {
				return
			}
			name := cstr(strs[s.nameOff:min(len(strs), int(s.nameOff)+maxSymbolName)])
			if _, ok := im.symbols[name]; ok || name == "" {
				return
			}
			im.symbols[name] = elf.Symbol{Name: name, Info: s.info, Section: elf.SectionIndex(s.shndx), Value: s.value, Size: s.size}
		})
	}
}

// DWARF returns the image's debug information, from where its debug source
// says (see DebugSource), or nil when there is none.
func (im *Image) DWARF() *dwarf.Data {
	if im.dwarfOK {
		return im.dwarf
	}
	im.dwarfOK = true
	src := im.DebugSource()
	if src.dwarfELF == nil {
		return nil
	}
	if d, err := src.dwarfELF.DWARF(); err == nil {
		im.dwarf = d
	}
	return im.dwarf
}

// DebugFileSection returns the section called name of the image's debug
// file (see DebugSource), or nil when there is no debug file or it holds
// no such section with contents.
func (im *Image) DebugFileSection(name string) *elf.Section {
	ef := im.DebugSource().debugELF
	if ef == nil {
		return nil
	}
	if sec := ef.Section(name); sec != nil && sec.Type != elf.SHT_NOBITS {
		return sec
	}
	return nil
}

// hasDWARF reports whether ef has debug information.
func hasDWARF(ef *elf.File) bool {
	return ef.Section(".debug_info") != nil || ef.Section(".zdebug_info") != nil
}

// separateDebug finds the image's separate debug file, by build ID or
// .gnu_debuglink (opened through the target: see target.Target's Open),
// and returns it with its path as the target sees it; nil when there is
// none. Only a file whose build ID is the image's is
// taken.
func (im *Image) separateDebug() (*elf.File, *os.File, string) {
	id := im.BuildID()
	if id == "" || im.opener == nil {
		// Without a build ID nothing proves a debug file is this image's:
		// a name from .gnu_debuglink alone could be any file the target's
		// user placed there.
		return nil, nil, ""
	}
	for _, p := range im.debugFileCandidates() {
		f, err := im.opener(p)
		if err != nil {
			continue
		}
		if err := checkHeaders(f); err != nil {
			f.Close()
			continue
		}
		ef, err := elf.NewFile(f)
		if err != nil || (&Image{File: ef}).BuildID() != id {
			f.Close() // not the debug file of this image
			continue
		}
		return ef, f, p
	}
	return nil, nil, ""
}

func (im *Image) debugFileCandidates() []string {
	var out []string
	if id := im.BuildID(); len(id) > 2 {
		out = append(out, filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug"))
	}
	if sec := im.File.Section(".gnu_debuglink"); sec != nil && sec.Size <= maxNoteBytes {
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

// Budgets on MiniDebugInfo: the compressed section, and what it expands to.
const (
	maxMiniDebugBytes    = 8 << 20
	maxMiniDebugInflated = 32 << 20
	// maxMiniDebugDict bounds the dictionary its xz stream may ask for
	// (xz's largest preset uses 64 MB).
	maxMiniDebugDict = 64 << 20
)

// miniDebugInfo returns the ELF file a stripped file carries, xz-compressed,
// in its .gnu_debugdata section (MiniDebugInfo): a .symtab naming the
// static functions. nil when there is none or it is over budget.
func (im *Image) miniDebugInfo() *elf.File {
	sec := im.File.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > maxMiniDebugBytes {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	// The stream names its dictionary's size, which the decoder allocates:
	// a few bytes may ask for gigabytes. The decoder refuses past dictMax.
	r, err := xz.NewReader(bytes.NewReader(data), maxMiniDebugDict)
	if err != nil {
		return nil
	}
	inner, err := io.ReadAll(io.LimitReader(r, maxMiniDebugInflated+1))
	if err != nil || len(inner) > maxMiniDebugInflated {
		im.Skipped = append(im.Skipped, fmt.Sprintf(".gnu_debugdata: not read (%v, or over %d bytes)", err, maxMiniDebugInflated))
		return nil
	}
	if checkHeaders(bytes.NewReader(inner)) != nil {
		return nil
	}
	ef, err := elf.NewFile(bytes.NewReader(inner))
	if err != nil {
		return nil
	}
	return ef
}
