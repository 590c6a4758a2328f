package binary

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/target"
)

// What a core may lack of an image read from its memory (Image.MemoryErr
// wraps one of them).
var (
	ErrNoELFHeader      = errors.New("the core holds no ELF header of it")
	ErrNoDynamicSymbols = errors.New("its dynamic symbols are not in the core")
)

// OpenInMemory makes an Image of path from the target's own memory rather
// than from the file: the copy of the file's pages that a core holds (gcore
// -a, or a coredump_filter that keeps file-backed pages), for a core whose
// files are not on this machine. A file offset is read at the address the
// process mapped it (NT_FILE says where); the ELF and program headers come
// from the first page, and the symbols from the dynamic segment (DT_SYMTAB,
// DT_STRTAB, and DT_GNU_HASH or DT_HASH for their number), since section
// headers are never mapped.
//
// When even the ELF header is not in memory the Image has no program
// headers and no symbols (its File is empty but for the machine, the
// core's architecture, so that callers need not test for it), and err
// says why; the VM must then be found some other way.
func OpenInMemory(t target.Target, maps []target.Mapping, path string) (*Image, error) {
	mf := &memFile{t: t}
	for _, m := range maps {
		if m.Path == path || m.Path == path+" (deleted)" {
			mf.maps = append(mf.maps, m)
		}
	}
	if len(mf.maps) == 0 {
		return nil, fmt.Errorf("%s: not mapped in the process", path)
	}
	sort.SliceStable(mf.maps, func(i, j int) bool { return mf.maps[i].Offset < mf.maps[j].Offset })
	machine := elf.EM_X86_64
	if c, ok := t.(interface{ Arch() *arch.Arch }); ok {
		machine = c.Arch().Machine // a core's, from its ELF header
	}
	empty := &Image{Path: path, InMemory: true, debug: &DebugSource{},
		File: &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Data: elf.ELFDATA2LSB, Machine: machine}}}
	ef, err := target.ReadELFHeaders(mf)
	if err != nil {
		return empty, fmt.Errorf("%s: %w: %w", path, ErrNoELFHeader, err)
	}
	bias, err := loadBias(ef, maps, path)
	if err != nil {
		return empty, err
	}
	im := &Image{Path: path, File: ef, Bias: bias, InMemory: true, debug: &DebugSource{}}
	syms, strs, err := dynamicSymbols(t, ef, bias)
	if err != nil {
		return im, fmt.Errorf("%s: %w: %w", path, ErrNoDynamicSymbols, err)
	}
	im.debug.addMemoryTable(syms, strs)
	return im, nil
}

// memFile reads a mapped file's bytes by file offset from the process's
// memory: offset o is at Start+o-Offset of the mapping that holds it.
type memFile struct {
	t    target.Target
	maps []target.Mapping // the file's mappings, by file offset
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		o := uint64(off) + uint64(n)
		var m *target.Mapping
		for i := range f.maps {
			if mm := &f.maps[i]; o >= mm.Offset && o < mm.Offset+(mm.End-mm.Start) {
				m = mm
				break
			}
		}
		if m == nil {
			return n, fmt.Errorf("file offset %#x is not mapped in the process", o)
		}
		k := min(uint64(len(p)-n), m.Offset+(m.End-m.Start)-o)
		got, err := f.t.ReadAt(p[n:n+int(k)], m.Start+o-m.Offset)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Limits on what a dynamic segment read from memory may claim, so that a
// corrupt one cannot make rbscope allocate without bound.
const (
	maxDynSyms   = 1 << 20
	maxDynStrtab = 64 << 20
	maxDynamic   = 1 << 16 // bytes of PT_DYNAMIC
)

// dynamicSymbols reads the symbol table of the image's dynamic segment
// (its Elf64_Sym entries, the null symbol first) and its string table from
// the target's memory.
func dynamicSymbols(t target.Target, ef *elf.File, bias uint64) ([]byte, []byte, error) {
	var dyn *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p
		}
	}
	if dyn == nil {
		return nil, nil, errors.New("no PT_DYNAMIC")
	}
	le := binary.LittleEndian
	b := make([]byte, min(dyn.Memsz, maxDynamic))
	if err := target.ReadFull(t, b, bias+dyn.Vaddr); err != nil {
		return nil, nil, fmt.Errorf("PT_DYNAMIC: %w", err)
	}
	tags := map[elf.DynTag]uint64{}
	for ; len(b) >= 16; b = b[16:] {
		tag := elf.DynTag(le.Uint64(b))
		if tag == elf.DT_NULL {
			break
		}
		tags[tag] = le.Uint64(b[8:])
	}
	// The loader rewrites the address entries of a writable dynamic
	// section to run-time addresses; a read-only one keeps link-time ones.
	addr := func(tag elf.DynTag) (uint64, bool) {
		v, ok := tags[tag]
		if ok && v < bias {
			v += bias
		}
		return v, ok && v != 0
	}
	symtab, ok1 := addr(elf.DT_SYMTAB)
	strtab, ok2 := addr(elf.DT_STRTAB)
	strsz := tags[elf.DT_STRSZ]
	if !ok1 || !ok2 || strsz == 0 || strsz > maxDynStrtab {
		return nil, nil, fmt.Errorf("DT_SYMTAB %#x, DT_STRTAB %#x, DT_STRSZ %d: unusable", symtab, strtab, strsz)
	}
	if ent := tags[elf.DT_SYMENT]; ent != 0 && ent != 24 {
		return nil, nil, fmt.Errorf("DT_SYMENT %d, want 24", ent)
	}
	var count uint64
	var err error
	if h, ok := addr(elf.DT_GNU_HASH); ok {
		count, err = gnuHashCount(t, h)
	} else if h, ok := addr(elf.DT_HASH); ok {
		var nchain [4]byte
		err = target.ReadFull(t, nchain[:], h+4)
		count = uint64(le.Uint32(nchain[:]))
	} else {
		err = errors.New("neither DT_GNU_HASH nor DT_HASH: the number of symbols is unknown")
	}
	if err != nil {
		return nil, nil, err
	}
	if count > maxDynSyms {
		return nil, nil, fmt.Errorf("%d dynamic symbols", count)
	}
	strs := make([]byte, strsz)
	if err := target.ReadFull(t, strs, strtab); err != nil {
		return nil, nil, fmt.Errorf("DT_STRTAB: %w", err)
	}
	raw := make([]byte, count*24)
	if err := target.ReadFull(t, raw, symtab); err != nil {
		return nil, nil, fmt.Errorf("DT_SYMTAB: %w", err)
	}
	return raw, strs, nil
}

// gnuHashCount returns the number of dynamic symbols from a GNU hash table
// at addr: one past the last symbol of the longest-reaching bucket's chain.
func gnuHashCount(t target.Target, addr uint64) (uint64, error) {
	le := binary.LittleEndian
	var hdr [16]byte
	if err := target.ReadFull(t, hdr[:], addr); err != nil {
		return 0, fmt.Errorf("DT_GNU_HASH: %w", err)
	}
	nbuckets, symoff, bloom := uint64(le.Uint32(hdr[:])), uint64(le.Uint32(hdr[4:])), uint64(le.Uint32(hdr[8:]))
	if nbuckets == 0 || nbuckets > maxDynSyms || bloom > maxDynSyms {
		return 0, fmt.Errorf("DT_GNU_HASH: %d buckets, %d bloom words", nbuckets, bloom)
	}
	buckets := make([]byte, nbuckets*4)
	bucketsAt := addr + 16 + bloom*8
	if err := target.ReadFull(t, buckets, bucketsAt); err != nil {
		return 0, fmt.Errorf("DT_GNU_HASH buckets: %w", err)
	}
	last := uint64(0)
	for i := uint64(0); i < nbuckets; i++ {
		last = max(last, uint64(le.Uint32(buckets[i*4:])))
	}
	if last < symoff {
		return symoff, nil
	}
	chainAt := bucketsAt + nbuckets*4
	var w [4]byte
	for i := last; i < maxDynSyms; i++ {
		if err := target.ReadFull(t, w[:], chainAt+(i-symoff)*4); err != nil {
			return 0, fmt.Errorf("DT_GNU_HASH chain: %w", err)
		}
		if le.Uint32(w[:])&1 != 0 {
			return i + 1, nil
		}
	}
	return 0, errors.New("DT_GNU_HASH: a chain without end")
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// EHFrame returns the image's .eh_frame_hdr and .eh_frame with their
// link-time addresses, each at most limit bytes: from the section headers,
// else from the PT_GNU_EH_FRAME segment (an image read from a core's
// memory has no section headers), whose header points at .eh_frame; that
// then runs to the end of its loaded segment, since no header gives its
// size. The header's entries say how much of it is read.
func (im *Image) EHFrame(limit uint64) (hdr []byte, hdrAddr uint64, frame []byte, frameAddr uint64, err error) {
	if h, eh := im.File.Section(".eh_frame_hdr"), im.File.Section(".eh_frame"); h != nil && eh != nil && eh.Addr != 0 {
		if h.Size > limit || eh.Size > limit {
			return nil, 0, nil, 0, fmt.Errorf("%s: .eh_frame_hdr of %d bytes, .eh_frame of %d (at most %d read)", im.Path, h.Size, eh.Size, limit)
		}
		if hdr, err = h.Data(); err != nil {
			return nil, 0, nil, 0, err
		}
		if frame, err = eh.Data(); err != nil {
			return nil, 0, nil, 0, err
		}
		return hdr, h.Addr, frame, eh.Addr, nil
	}
	var seg *elf.Prog
	for _, p := range im.File.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			seg = p
		}
	}
	if seg == nil {
		return nil, 0, nil, 0, fmt.Errorf("%s: no .eh_frame_hdr section or PT_GNU_EH_FRAME segment", im.Path)
	}
	if seg.Filesz < 8 || seg.Filesz > limit {
		return nil, 0, nil, 0, fmt.Errorf("%s: PT_GNU_EH_FRAME of %d bytes", im.Path, seg.Filesz)
	}
	hdrAddr = seg.Vaddr
	if hdr, err = im.Code(im.Bias+hdrAddr, seg.Filesz); err != nil {
		return nil, 0, nil, 0, fmt.Errorf("PT_GNU_EH_FRAME: %w", err)
	}
	// eh_frame_ptr, in the encoding hdr[1] names: pc-relative (to the
	// field) or absolute, 4 or 8 bytes.
	le := binary.LittleEndian
	var ptr uint64
	switch enc := hdr[1]; enc {
	case 0x1b: // pcrel sdata4
		ptr = hdrAddr + 4 + uint64(int64(int32(le.Uint32(hdr[4:]))))
	case 0x03, 0x0b: // udata4, sdata4
		ptr = uint64(le.Uint32(hdr[4:]))
	case 0x04, 0x0c, 0x1c: // udata8, sdata8, pcrel sdata8
		if len(hdr) < 12 {
			return nil, 0, nil, 0, fmt.Errorf("%s: .eh_frame_hdr of %d bytes", im.Path, len(hdr))
		}
		ptr = le.Uint64(hdr[4:])
		if enc == 0x1c {
			ptr += hdrAddr + 4
		}
	default:
		return nil, 0, nil, 0, fmt.Errorf("%s: .eh_frame_hdr pointer encoding %#x", im.Path, enc)
	}
	for _, p := range im.File.Progs {
		if p.Type != elf.PT_LOAD || ptr < p.Vaddr || ptr >= p.Vaddr+p.Filesz {
			continue
		}
		n := min(p.Vaddr+p.Filesz-ptr, limit)
		if frame, err = im.Code(im.Bias+ptr, n); err != nil {
			return nil, 0, nil, 0, fmt.Errorf(".eh_frame: %w", err)
		}
		return hdr, hdrAddr, frame, ptr, nil
	}
	return nil, 0, nil, 0, fmt.Errorf("%s: .eh_frame at %#x is not in a loaded segment", im.Path, ptr)
}
