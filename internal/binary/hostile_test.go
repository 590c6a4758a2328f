package binary

import (
	"bytes"
	"debug/elf"
	encbin "encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/rbscope/rbscope/internal/target"
)

// testSection is one section of an ELF file built by buildELF.
type testSection struct {
	name    string
	typ     elf.SectionType
	link    uint32
	entsize uint64
	data    []byte
	size    uint64 // declared size when data is nil (a sparse region)
	off     uint64 // file offset when data is nil
}

// buildELF writes a little-endian ELF64 shared object: one PT_LOAD of the
// first 64 KiB at vaddr 0, a PT_NOTE over every SHT_NOTE section, and the
// sections given (after a null section, before .shstrtab).
func buildELF(secs []testSection) []byte {
	le := encbin.LittleEndian
	var shstr bytes.Buffer
	shstr.WriteByte(0)
	nameOff := func(n string) uint32 { o := shstr.Len(); shstr.WriteString(n + "\x00"); return uint32(o) }
	const phoff, phnum = 64, 2
	body := bytes.Repeat([]byte{0}, 64+56*phnum)
	type hdr struct {
		name                 uint32
		typ                  elf.SectionType
		flags, off, size, es uint64
		link                 uint32
	}
	hdrs := []hdr{{}}
	var noteOff, noteSize uint64
	for _, s := range secs {
		h := hdr{name: nameOff(s.name), typ: s.typ, link: s.link, es: s.entsize}
		if s.data != nil {
			for len(body)%8 != 0 {
				body = append(body, 0)
			}
			h.off, h.size = uint64(len(body)), uint64(len(s.data))
			body = append(body, s.data...)
		} else {
			h.off, h.size = s.off, s.size
		}
		if s.typ == elf.SHT_NOTE {
			h.flags = uint64(elf.SHF_ALLOC)
			noteOff, noteSize = h.off, h.size
		}
		hdrs = append(hdrs, h)
	}
	hdrs = append(hdrs, hdr{name: nameOff(".shstrtab"), typ: elf.SHT_STRTAB})
	hdrs[len(hdrs)-1].off, hdrs[len(hdrs)-1].size = uint64(len(body)), uint64(shstr.Len())
	body = append(body, shstr.Bytes()...)
	for len(body)%8 != 0 {
		body = append(body, 0)
	}
	shoff := uint64(len(body))
	for _, h := range hdrs {
		b := make([]byte, 64)
		le.PutUint32(b, h.name)
		le.PutUint32(b[4:], uint32(h.typ))
		le.PutUint64(b[8:], h.flags)
		le.PutUint64(b[0x18:], h.off)
		le.PutUint64(b[0x20:], h.size)
		le.PutUint32(b[0x28:], h.link)
		le.PutUint64(b[0x38:], h.es)
		body = append(body, b...)
	}
	copy(body, "\x7fELF\x02\x01\x01")
	le.PutUint16(body[0x10:], uint16(elf.ET_DYN))
	le.PutUint16(body[0x12:], uint16(elf.EM_X86_64))
	le.PutUint32(body[0x14:], 1)
	le.PutUint64(body[0x20:], phoff)
	le.PutUint64(body[0x28:], shoff)
	le.PutUint16(body[0x34:], 64)
	le.PutUint16(body[0x36:], 56)
	le.PutUint16(body[0x38:], phnum)
	le.PutUint16(body[0x3a:], 64)
	le.PutUint16(body[0x3c:], uint16(len(hdrs)))
	le.PutUint16(body[0x3e:], uint16(len(hdrs)-1))
	ph := body[phoff:]
	le.PutUint32(ph, uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R))
	le.PutUint64(ph[0x20:], 0x10000) // filesz
	le.PutUint64(ph[0x28:], 0x10000) // memsz
	le.PutUint64(ph[0x30:], 0x1000)
	ph = ph[56:]
	le.PutUint32(ph, uint32(elf.PT_NOTE))
	le.PutUint64(ph[8:], noteOff)
	le.PutUint64(ph[0x10:], noteOff)
	le.PutUint64(ph[0x20:], noteSize)
	le.PutUint64(ph[0x28:], noteSize)
	return body
}

// note is one ELF note.
func note(name string, typ uint32, desc []byte, descsz uint32) []byte {
	le := encbin.LittleEndian
	b := make([]byte, 12)
	le.PutUint32(b, uint32(len(name)+1))
	le.PutUint32(b[4:], descsz)
	le.PutUint32(b[8:], typ)
	b = append(b, name+"\x00"...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return append(b, desc...)
}

const testPath = "/hostile/libruby.so"

var testMaps = []target.Mapping{{Start: 0x7f0000000000, End: 0x7f0000010000, Perms: "r--p", Path: testPath}}

// TestBuildIDBadNote: a build-ID note whose descriptor size wraps 32-bit
// arithmetic (0xFFFFFFFD, which aligns to 0) made BuildID slice out of
// range and panic, in `rbscope stack` and in the crash handler.
func TestBuildIDBadNote(t *testing.T) {
	good := note("GNU", ntGNUBuildID, []byte{1, 2, 3, 4}, 4)
	if id := buildID(good, encbin.LittleEndian); id != "01020304" {
		t.Fatalf("a good note reads as build ID %q: the test's notes are wrong", id)
	}
	for _, descsz := range []uint32{0xFFFFFFFD, 0xFFFFFFFF, 0x7FFFFFFF, 5} {
		bad := note("GNU", ntGNUBuildID, []byte{1, 2, 3, 4}, descsz)
		if id := buildID(bad, encbin.LittleEndian); id != "" {
			t.Errorf("descsz %#x: build ID %q from a note that does not hold it", descsz, id)
		}
		raw := buildELF([]testSection{{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: bad}})
		im, err := newImage(bytes.NewReader(raw), nil, testPath, testMaps)
		if err != nil {
			t.Fatalf("descsz %#x: %v", descsz, err)
		}
		if id := im.BuildID(); id != "" {
			t.Errorf("descsz %#x: image build ID %q", descsz, id)
		}
	}
	raw := buildELF([]testSection{{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: good}})
	im, err := newImage(bytes.NewReader(raw), nil, testPath, testMaps)
	if err != nil {
		t.Fatal(err)
	}
	if id := im.BuildID(); id != "01020304" {
		t.Errorf("image build ID %q, want 01020304", id)
	}
}

// sparseFile writes raw as name in a temporary directory, extends it with a
// hole to size bytes, and opens it (closed when the test ends).
func sparseFile(t *testing.T, name string, raw []byte, size int64) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return path, f
}

// TestHugeDeclaredSymtab: a 48 KB sparse file declaring a 96 MB .symtab
// (it reads as zeros, 4M symbols) took the crash handler to half a GB. The
// loader must not read it, and must say it did not.
func TestHugeDeclaredSymtab(t *testing.T) {
	const huge = 96 << 20
	strtab := []byte("\x00ruby_version\x00")
	raw := buildELF([]testSection{
		{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: note("GNU", ntGNUBuildID, []byte{9, 9}, 2)},
		{name: ".symtab", typ: elf.SHT_SYMTAB, link: 3, entsize: 24, off: 48 << 10, size: huge},
		{name: ".strtab", typ: elf.SHT_STRTAB, data: strtab},
	})
	path, f := sparseFile(t, "sparse.so", raw, 48<<10+huge)
	var st = statBlocks(t, path)
	if st.size < huge || st.disk > 1<<20 {
		t.Fatalf("setup: the file is %d bytes long and takes %d on disk: not a sparse file holding a 96 MB table", st.size, st.disk)
	}
	im, err := newImage(f, nil, path, []target.Mapping{{Start: 0x7f0000000000, End: 0x7f0000010000, Perms: "r--p", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if s := im.File.Section(".symtab"); s == nil || s.Size != huge {
		t.Fatalf("setup: the parser does not see a %d-byte .symtab", huge)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	im.HasSymbol("ruby_version")
	im.SymbolAt(0x7f0000000100)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("reading the symbols allocated %d MB", grew>>20)
	}
	if !strings.Contains(strings.Join(im.Skipped, " "), ".symtab") {
		t.Errorf("the skipped table is not reported: %q", im.Skipped)
	}
}

// TestHugeSectionNameTable: the section name table is read whole by the
// ELF parser: one declared larger than the budget is refused before.
func TestHugeSectionNameTable(t *testing.T) {
	raw := buildELF(nil)
	le := encbin.LittleEndian
	shoff := le.Uint64(raw[0x28:])
	shstrndx := uint64(le.Uint16(raw[0x3e:]))
	if _, err := newImage(bytes.NewReader(raw), nil, testPath, testMaps); err != nil {
		t.Fatalf("setup: the unmodified file is refused: %v", err)
	}
	le.PutUint64(raw[shoff+shstrndx*64+0x20:], 200<<20)
	if _, err := newImage(bytes.NewReader(raw), nil, testPath, testMaps); err == nil || !strings.Contains(err.Error(), "name table") {
		t.Errorf("a 200 MB section name table: %v", err)
	}
}

type blocks struct{ size, disk int64 }

func statBlocks(t *testing.T, path string) blocks {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no stat_t")
	}
	return blocks{fi.Size(), st.Blocks * 512}
}

// bytesTarget is a target whose memory at base is a byte slice: an ELF
// file mapped as is.
type bytesTarget struct {
	base uint64
	mem  []byte
}

func (b *bytesTarget) PID() int { return 0 }
func (b *bytesTarget) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < b.base || addr-b.base >= uint64(len(b.mem)) {
		return 0, errors.New("unmapped")
	}
	n := copy(p, b.mem[addr-b.base:])
	if n < len(p) {
		return n, errors.New("unmapped")
	}
	return n, nil
}
func (b *bytesTarget) Mappings() ([]target.Mapping, error) { return testMaps, nil }
func (b *bytesTarget) Threads() ([]int, error)             { return nil, nil }
func (b *bytesTarget) Registers(int) (target.Regs, error) {
	return target.Regs{}, target.ErrNoRegisters
}
func (b *bytesTarget) Open(string) (*os.File, error) { return nil, os.ErrNotExist }
func (b *bytesTarget) Pause() error                  { return nil }
func (b *bytesTarget) Resume() error                 { return nil }
func (b *bytesTarget) Close() error                  { return nil }

// FuzzImage feeds the ELF image loader arbitrary files: parsing, load bias,
// build ID, symbols, code, debug information and the check against memory
// must return errors, never panic.
func FuzzImage(f *testing.F) {
	f.Add(buildELF([]testSection{{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: note("GNU", ntGNUBuildID, []byte{1, 2, 3, 4}, 0xFFFFFFFD)}}))
	f.Add(buildELF([]testSection{
		{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: note("GNU", ntGNUBuildID, []byte{1, 2, 3, 4}, 4)},
		{name: ".symtab", typ: elf.SHT_SYMTAB, link: 3, entsize: 24, data: make([]byte, 48)},
		{name: ".strtab", typ: elf.SHT_STRTAB, data: []byte("\x00a\x00")},
	}))
	if b, err := os.ReadFile("/usr/bin/ruby3.1"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := newImage(bytes.NewReader(data), nil, testPath, testMaps)
		if err != nil {
			return
		}
		im.file = readerCloser{bytes.NewReader(data)}
		im.opener = func(string) (*os.File, error) { return nil, os.ErrNotExist }
		im.BuildID()
		im.HasSymbol("ruby_version")
		im.Symbol("ruby_version")
		im.SymbolAt(testMaps[0].Start + 0x100)
		im.FunctionAt(testMaps[0].Start + 0x100)
		im.Code(testMaps[0].Start+0x40, 16)
		im.DWARF()
		im.matchesMemory(&bytesTarget{base: testMaps[0].Start, mem: data})
	})
}

type readerCloser struct{ *bytes.Reader }

func (readerCloser) Close() error { return nil }

// TestMatchesMemory: a file whose headers or build ID differ from the image
// in memory (a library rewritten or replaced since it was mapped) is
// refused; the same bytes are accepted.
func TestMatchesMemory(t *testing.T) {
	raw := buildELF([]testSection{{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, data: note("GNU", ntGNUBuildID, []byte{1, 2, 3, 4}, 4)}})
	im, err := newImage(bytes.NewReader(raw), readerCloser{bytes.NewReader(raw)}, testPath, testMaps)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.matchesMemory(&bytesTarget{base: testMaps[0].Start, mem: raw}); err != nil {
		t.Fatalf("the very bytes mapped are refused: %v", err)
	}
	other := bytes.Clone(raw)
	other[bytes.Index(other, []byte{1, 2, 3, 4})] = 9
	if err := im.matchesMemory(&bytesTarget{base: testMaps[0].Start, mem: other}); err == nil || !strings.Contains(err.Error(), "build ID") {
		t.Errorf("another build ID in memory: %v", err)
	}
	other = bytes.Clone(raw)
	other[0x18] = 0x42 // e_entry
	if err := im.matchesMemory(&bytesTarget{base: testMaps[0].Start, mem: other}); err == nil {
		t.Error("other ELF headers in memory are accepted")
	}
	if err := im.matchesMemory(&bytesTarget{base: 0x1000, mem: raw}); err == nil {
		t.Error("an image whose memory cannot be read is accepted")
	}
}

// TestHugeDeclaredDebugInfo: debug sections declared larger than the budget
// are not read; nor are ones within it that the file does not hold (a
// sparse file reads as zeros for as long as it claims to be).
func TestHugeDeclaredDebugInfo(t *testing.T) {
	for _, c := range []struct {
		name string
		size uint64
		why  string
	}{
		{"over the budget", MaxDebugBytes + 1, "bytes declared (at most"},
		{"sparse", 512 << 20, "a sparse file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := buildELF([]testSection{{name: ".debug_info", typ: elf.SHT_PROGBITS, off: 48 << 10, size: c.size}})
			path, f := sparseFile(t, "sparse.debug", raw, 48<<10+int64(c.size))
			if st := statBlocks(t, path); st.disk > 1<<20 {
				t.Fatalf("setup: the file takes %d bytes on disk: not sparse", st.disk)
			}
			im, err := newImage(f, f, path, []target.Mapping{{Start: 0x7f0000000000, End: 0x7f0000010000, Perms: "r--p", Path: path}})
			if err != nil {
				t.Fatal(err)
			}
			if s := im.File.Section(".debug_info"); s == nil || s.Size != c.size {
				t.Fatalf("setup: the parser does not see a %d-byte .debug_info", c.size)
			}
			im.opener = func(string) (*os.File, error) { return nil, os.ErrNotExist }
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if d := im.DWARF(); d != nil {
				t.Error("the declared debug information was read")
			}
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("looking for debug information allocated %d MB", grew>>20)
			}
			if !strings.Contains(strings.Join(im.Skipped, " "), c.why) {
				t.Errorf("the skipped debug information is not reported as %q: %q", c.why, im.Skipped)
			}
		})
	}
}
