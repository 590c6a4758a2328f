package target

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rbscope/rbscope/internal/procfs"
)

// Auxiliary vector entries the link map's walk starts from.
const (
	atPageSize = 6
	atExecFn   = 31 // the executable's path as execve was given it
)

// Bounds of the walk: the core may be hostile.
const (
	maxLinkMapObjects = 4096
	maxDynamicEntries = 4096
	maxPathLen        = 4096
)

// linkMapFiles lists the mapped files of a core that has no NT_FILE note
// (qemu-user writes none), as a debugger does: the executable's path is
// the auxiliary vector's AT_EXECFN, its load address follows from AT_PHDR
// and its program headers, its dynamic section's DT_DEBUG points at the
// dynamic linker's r_debug, and r_debug's link map names every other
// object loaded and its load bias. Each object's file (under the sysroot
// when one is set) gives its segments, which become the mappings NT_FILE
// would have listed. The files must be at hand: a core without NT_FILE
// read with --core-only has no mapped files.
func (c *Core) linkMapFiles() ([]Mapping, error) {
	execFn, ok := c.notes.auxv[atExecFn]
	phdr, pok := c.notes.auxv[atPHDR]
	if !ok || !pok {
		return nil, errors.New("it has no NT_FILE note, and no auxiliary vector to find its executable by")
	}
	page := c.notes.auxv[atPageSize]
	if page == 0 || page&(page-1) != 0 {
		page = 4096
	}
	exe, err := c.cString(execFn)
	if err != nil {
		return nil, fmt.Errorf("it has no NT_FILE note, and its executable's path (AT_EXECFN): %w", err)
	}
	ef, f, err := c.openELF(exe)
	if err != nil {
		return nil, fmt.Errorf("it has no NT_FILE note, and its executable: %w", err)
	}
	var bias uint64
	for _, p := range ef.Progs {
		if p.Type == elf.PT_PHDR {
			bias = phdr - p.Vaddr
		}
	}
	if bias == 0 && ef.Type == elf.ET_DYN {
		// no PT_PHDR: the headers lie in the first segment, at e_phoff
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && p.Off == 0 {
				bias = phdr - p.Vaddr - elfPhoff(f)
				break
			}
		}
	}
	files := segmentsOf(ef, exe, bias, page)
	var dyn uint64
	for _, p := range ef.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = bias + p.Vaddr
		}
	}
	ef.Close()
	if dyn == 0 {
		return files, nil // a static executable loads nothing else
	}
	rdebug, err := c.dynamicEntry(dyn, elf.DT_DEBUG)
	if err != nil || rdebug == 0 {
		return files, fmt.Errorf("no NT_FILE note, and the executable's DT_DEBUG holds no r_debug: %v", err)
	}
	// struct r_debug: r_version (int), r_map at 8. struct link_map:
	// l_addr, l_name, l_ld, l_next, l_prev.
	var missing error // the first Ruby image that cannot be opened
	lm, err := c.word(rdebug + 8)
	for n := 0; err == nil && lm != 0 && n < maxLinkMapObjects; n++ {
		var l [4]uint64
		for i := range l {
			if l[i], err = c.word(lm + 8*uint64(i)); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
		if name, nerr := c.cString(l[1]); nerr == nil && name != "" && l[0] != 0 {
			name = c.resolve(name)
			if ef, _, oerr := c.openELF(name); oerr == nil {
				files = append(files, segmentsOf(ef, name, l[0], page)...)
				ef.Close()
			} else if procfs.IsRubyImage(name) && missing == nil {
				missing = oerr
			}
		}
		lm = l[3]
	}
	if err != nil {
		return c.splitAtSegments(files), fmt.Errorf("no NT_FILE note, and the dynamic linker's link map cannot be read: %w", err)
	}
	if missing != nil {
		// Its memory is in the core but not its code, nor where it lies:
		// without the file the Ruby cannot be read.
		return nil, fmt.Errorf("it has no NT_FILE note (qemu-user writes none), so its mapped files are the objects its dynamic linker loaded, by the paths it loaded them from; the Ruby among them cannot be opened: %w (--sysroot names the directory that holds the crashed system's files)", missing)
	}
	return c.splitAtSegments(files), nil
}

// splitAtSegments cuts each file mapping where the core's segments begin
// and end, as the kernel's maps are cut where permissions change (a
// segment's read-only part after relocation, RELRO, and its writable
// rest), so that each piece takes its own segment's permissions.
func (c *Core) splitAtSegments(files []Mapping) []Mapping {
	var out []Mapping
	for _, m := range files {
		start := m.Start
		for _, s := range c.segs {
			for _, cut := range []uint64{s.vaddr, s.end()} {
				if cut > start && cut < m.End {
					out = append(out, Mapping{Start: start, End: cut, Offset: m.Offset + start - m.Start, Path: m.Path})
					start = cut
				}
			}
		}
		out = append(out, Mapping{Start: start, End: m.End, Offset: m.Offset + start - m.Start, Path: m.Path})
	}
	return out
}

// resolve returns the path a loaded object's name leads to, its symbolic
// links followed inside the sysroot ("/" without one): the dynamic linker
// keeps the name it looked the object up by (libruby-3.1.so.3.1), which
// NT_FILE would have resolved (libruby-3.1.so.3.1.2). The name as is when
// it leads nowhere.
func (c *Core) resolve(name string) string {
	root := "/"
	if c.opts.Sysroot != "" {
		root = filepath.Clean(c.opts.Sysroot)
	}
	if c.opts.CoreOnly {
		return name
	}
	f, err := OpenInRoot(root, c.inSysroot(name), true)
	if err != nil {
		return name
	}
	defer f.Close()
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return name
	}
	if root == "/" {
		return real
	}
	if rel, ok := strings.CutPrefix(real, root+"/"); ok {
		return "/" + rel
	}
	return name
}

// openELF opens a file of the crashed process (Open: under the sysroot,
// checked against the core) as ELF.
func (c *Core) openELF(path string) (*elf.File, io.ReaderAt, error) {
	f, err := c.Open(path)
	if err != nil {
		return nil, nil, err
	}
	c.files[path] = f
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if ef.Machine != c.arch.Machine {
		ef.Close()
		return nil, nil, fmt.Errorf("%s is for %v, the core for %v: %w", path, ef.Machine, c.arch.Machine, ErrFileMismatch)
	}
	return ef, f, nil
}

// elfPhoff is the ELF64 header's e_phoff.
func elfPhoff(r io.ReaderAt) uint64 {
	var b [8]byte
	if _, err := r.ReadAt(b[:], 0x20); err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// segmentsOf lists the file mappings of ef's loadable segments loaded at
// bias, in pages, as NT_FILE lists them.
func segmentsOf(ef *elf.File, path string, bias, page uint64) []Mapping {
	var out []Mapping
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		start := (bias + p.Vaddr) &^ (page - 1)
		end := (bias + p.Vaddr + p.Filesz + page - 1) &^ (page - 1)
		out = append(out, Mapping{Start: start, End: end, Offset: p.Off &^ (page - 1), Path: path})
	}
	return out
}

// dynamicEntry returns the value of the first tag entry of the dynamic
// section at dyn.
func (c *Core) dynamicEntry(dyn uint64, tag elf.DynTag) (uint64, error) {
	for i := uint64(0); i < maxDynamicEntries; i++ {
		t, err := c.word(dyn + 16*i)
		if err != nil {
			return 0, err
		}
		if elf.DynTag(t) == elf.DT_NULL {
			return 0, nil
		}
		if elf.DynTag(t) == tag {
			return c.word(dyn + 16*i + 8)
		}
	}
	return 0, fmt.Errorf("no DT_NULL in %d entries", maxDynamicEntries)
}

func (c *Core) word(addr uint64) (uint64, error) {
	var b [8]byte
	if err := ReadFull(c, b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// cString reads a NUL-terminated string of at most maxPathLen bytes.
func (c *Core) cString(addr uint64) (string, error) {
	var out []byte
	var b [256]byte
	for len(out) < maxPathLen {
		n, err := c.ReadAt(b[:], addr+uint64(len(out)))
		if i := indexZero(b[:n]); i >= 0 {
			return string(append(out, b[:i]...)), nil
		}
		out = append(out, b[:n]...)
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("a string at %#x runs past %d bytes", addr, maxPathLen)
}

func indexZero(b []byte) int {
	for i, x := range b {
		if x == 0 {
			return i
		}
	}
	return -1
}
