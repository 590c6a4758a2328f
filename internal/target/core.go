package target

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/arch"
)

// Core is an ELF core file (written by the kernel or by gdb's gcore) read as
// a Target. Memory comes from the core's PT_LOAD segments; memory the core
// leaves out because it is a copy of a file (program text, read-only data)
// is read from that file, found through the NT_FILE note. Threads and their
// registers come from the NT_PRSTATUS notes.
type Core struct {
	path    string
	f       *os.File
	size    int64
	segs    []coreSegment // PT_LOAD segments, sorted by address
	notes   coreNotes
	maps    []Mapping
	opts    CoreOptions
	exePath string // the executable's path as the process saw it
	arch    *arch.Arch

	files   map[string]*os.File // mapped files opened for memory the core left out
	fileErr map[string]error

	truncated string
}

// CoreOptions says where to find the files a core's process had mapped.
type CoreOptions struct {
	// Sysroot, when set, is a directory holding the crashed machine's files
	// at the paths the process saw them (Sysroot/usr/lib/...).
	Sysroot string
	// Exe, when set, is the executable to use instead of the path the core
	// records.
	Exe string
	// CoreOnly reads nothing of this machine's files: every mapped file's
	// image comes from the core (what a core from another machine gets).
	CoreOnly bool
}

// CoreThread is one thread of a core: its NT_PRSTATUS note.
type CoreThread struct {
	TID    int
	Signal int // pr_cursig: the signal the thread was stopped or killed by
	Regs   Regs
}

// Regs are a thread's general registers, as its architecture's kernel
// records them (NT_PRSTATUS's pr_reg, ptrace's PTRACE_GETREGS), and its
// thread pointer.
type Regs struct {
	// Arch says what the values are; nil for no registers.
	Arch *arch.Arch
	// V are the registers in Arch.Regs' order.
	V []uint64
	// TP is the thread pointer (fs_base, tpidr_el0), 0 when unknown.
	TP uint64
}

// PC is the program counter.
func (r Regs) PC() uint64 { return r.at(r.Arch.PC) }

// SP is the stack pointer.
func (r Regs) SP() uint64 { return r.at(r.Arch.SP) }

// Names are the registers' names, in Values' order (the thread pointer
// last where pr_reg leaves it out).
func (r Regs) Names() []string {
	if r.Arch == nil {
		return nil
	}
	if r.Arch.TPIndex >= 0 {
		return r.Arch.Regs
	}
	return append(slices.Clip(r.Arch.Regs), r.Arch.ThreadPointer)
}

// Values returns the registers in Names' order.
func (r Regs) Values() []uint64 {
	if r.Arch == nil || r.Arch.TPIndex >= 0 {
		return r.V
	}
	return append(slices.Clip(r.V), r.TP)
}

func (r Regs) at(i int) uint64 {
	if r.Arch == nil || i >= len(r.V) {
		return 0
	}
	return r.V[i]
}

// regsFrom decodes the registers a of pr_reg (or PTRACE_GETREGS) holds.
func regsFrom(a *arch.Arch, b []byte) Regs {
	r := Regs{Arch: a, V: make([]uint64, len(a.Regs))}
	for i := range r.V {
		r.V[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	if a.TPIndex >= 0 {
		r.TP = r.V[a.TPIndex]
	}
	return r
}

// ParseCoreThreads decodes the threads (TID, signal, registers) from the
// bytes of a core's PT_NOTE segments, for readers that see a core stream by
// rather than a file (the crash handler). It keeps what it could decode and
// returns the first problem.
func ParseCoreThreads(notes []byte, a *arch.Arch) ([]CoreThread, error) {
	cn, err := parseCoreNotes(notes, a)
	return cn.threads, err
}

// MissingFileError means a file the core's process had mapped, and that
// rbscope needs, cannot be found on this machine.
type MissingFileError struct {
	Path  string // the path the process saw
	Tried string // the path looked for here (under the sysroot, or --exe); "" under --core-only
	Err   error
}

func (e *MissingFileError) Error() string {
	if e.Tried == "" {
		return fmt.Sprintf("%s is not read from this machine (--core-only)", e.Path)
	}
	return fmt.Sprintf("%s is not on this machine (looked for %s)", e.Path, e.Tried)
}

func (e *MissingFileError) Unwrap() error { return e.Err }

// Errors of core files.
var (
	// ErrTruncated means a core file ends before the data its headers
	// describe.
	ErrTruncated = errors.New("core file is truncated")
	// ErrNotInCore means memory the process had mapped that the core does
	// not hold (and no file on this machine supplies).
	ErrNotInCore = errors.New("the core does not hold this memory")
	// ErrFileMismatch means a file on this machine differs from the one the
	// core's process had mapped.
	ErrFileMismatch = errors.New("not the file the process had mapped")
)

type coreSegment struct {
	vaddr, memsz, filesz, off uint64
	flags                     elf.ProgFlag
}

func (s coreSegment) end() uint64 { return s.vaddr + s.memsz }

// OpenCore opens an ELF core file.
func OpenCore(path string, opts CoreOptions) (*Core, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	c, err := newCore(path, f, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func newCore(path string, f *os.File, opts CoreOptions) (*Core, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, fmt.Errorf("%s is not a core file (not ELF: it does not start with \\x7fELF)", path)
	}
	ef, err := ReadELFHeaders(f)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%s: %w: %d bytes, its ELF headers are cut short", path, ErrTruncated, st.Size())
		}
		return nil, fmt.Errorf("%s: unreadable ELF file: %w", path, err)
	}
	if ef.Type != elf.ET_CORE {
		what := "an ELF file"
		switch ef.Type {
		case elf.ET_EXEC:
			what = "an executable"
		case elf.ET_DYN:
			what = "a shared library or position-independent executable"
		case elf.ET_REL:
			what = "an object file"
		}
		return nil, fmt.Errorf("%s is %s (%s), not a core file", path, what, ef.Type)
	}
	a, aerr := arch.ForMachine(ef.Machine)
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB || aerr != nil {
		return nil, fmt.Errorf("%s is a core of a %s %s %s process; rbscope reads 64-bit little-endian %s only", path, ef.Class, ef.Data, ef.Machine, arch.Names())
	}
	c := &Core{path: path, f: f, size: st.Size(), opts: opts, arch: a, files: map[string]*os.File{}, fileErr: map[string]error{}}
	var want uint64 // bytes the headers say the file holds
	var noteData []byte
	var noteErr error
	for _, p := range ef.Progs {
		want = max(want, p.Off+p.Filesz)
		switch p.Type {
		case elf.PT_LOAD:
			c.segs = append(c.segs, coreSegment{vaddr: p.Vaddr, memsz: max(p.Memsz, p.Filesz), filesz: p.Filesz, off: p.Off, flags: p.Flags})
		case elf.PT_NOTE:
			// Read what is there; a note cut off by the end of the file is
			// dropped by the parser.
			b := make([]byte, min(p.Filesz, 64<<20))
			n, err := f.ReadAt(b, int64(p.Off))
			if err != nil && n < len(b) {
				noteErr = fmt.Errorf("notes at file offset %#x (%d bytes) are past the end of the file", p.Off, p.Filesz)
			}
			noteData = append(noteData, b[:n]...)
		}
	}
	sort.Slice(c.segs, func(i, j int) bool { return c.segs[i].vaddr < c.segs[j].vaddr })
	if want > uint64(c.size) {
		c.truncated = fmt.Sprintf("%s is truncated: %d of the %d bytes its headers describe; memory in the missing part cannot be read", path, c.size, want)
	}
	c.notes, err = parseCoreNotes(noteData, a)
	if len(c.notes.threads) > 0 && len(c.notes.files) == 0 && err == nil {
		// No NT_FILE (qemu-user writes none): the dynamic linker's list of
		// loaded objects in the core's memory names them.
		c.notes.files, err = c.linkMapFiles()
	}
	if len(c.notes.threads) == 0 || len(c.notes.files) == 0 {
		why := "it has no NT_PRSTATUS (thread) or NT_FILE (mapped files) note"
		switch {
		case noteErr != nil:
			why = noteErr.Error()
		case err != nil:
			why = err.Error()
		}
		if c.truncated != "" {
			return nil, fmt.Errorf("%s: %w (%d of %d bytes): %s, so its threads and mapped files are unknown", path, ErrTruncated, c.size, want, why)
		}
		return nil, fmt.Errorf("%s: unusable core: %s", path, why)
	}
	c.maps = coreMappings(c.notes.files, c.segs)
	c.exePath = c.findExe()
	return c, nil
}

// ReadELFHeaders parses the ELF and program headers of a core as if it had
// no section headers: a core's sections (gdb writes some, at the end) are of
// no use, and a core cut short, or still streaming in, may not have them.
func ReadELFHeaders(r io.ReaderAt) (*elf.File, error) {
	var ident [elf.EI_NIDENT]byte
	if _, err := r.ReadAt(ident[:], 0); err == nil && ident[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
		r = noSections{r}
	}
	return elf.NewFile(r)
}

// noSections reads an ELF64 file as if its header declared no sections
// (e_shoff, e_shnum and e_shstrndx zero).
type noSections struct{ r io.ReaderAt }

func (n noSections) ReadAt(p []byte, off int64) (int, error) {
	k, err := n.r.ReadAt(p, off)
	for i := max(off, 0x28); i < min(off+int64(k), 0x40); i++ {
		if i < 0x30 || i >= 0x3c { // e_shoff; e_shnum, e_shstrndx
			p[i-off] = 0
		}
	}
	return k, err
}

// coreMappings lists the file mappings of NT_FILE (permissions from the
// PT_LOAD segment at the same address) and the anonymous PT_LOAD segments,
// sorted by address.
func coreMappings(files []Mapping, segs []coreSegment) []Mapping {
	var maps []Mapping
	for _, m := range files {
		m.Perms = "r--p" // gdb leaves out what it can read back from the file
		if s, ok := findSegment(segs, m.Start); ok {
			m.Perms = perms(s.flags)
		}
		maps = append(maps, m)
	}
	for _, s := range segs {
		covered := false
		for _, m := range files {
			if s.vaddr < m.End && m.Start < s.end() {
				covered = true
				break
			}
		}
		if !covered && s.memsz > 0 {
			maps = append(maps, Mapping{Start: s.vaddr, End: s.end(), Perms: perms(s.flags)})
		}
	}
	sort.SliceStable(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	return maps
}

func perms(f elf.ProgFlag) string {
	b := []byte("---p")
	if f&elf.PF_R != 0 {
		b[0] = 'r'
	}
	if f&elf.PF_W != 0 {
		b[1] = 'w'
	}
	if f&elf.PF_X != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// findSegment returns the PT_LOAD segment that contains addr.
func findSegment(segs []coreSegment, addr uint64) (coreSegment, bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].end() > addr })
	if i < len(segs) && segs[i].vaddr <= addr {
		return segs[i], true
	}
	return coreSegment{}, false
}

// findExe returns the path of the executable: the file mapped at the
// program headers' address (AT_PHDR of NT_AUXV), else the first file mapped.
func (c *Core) findExe() string {
	if phdr, ok := c.notes.auxv[atPHDR]; ok {
		if m, ok := FindMapping(c.notes.files, phdr); ok {
			return m.Path
		}
	}
	for _, m := range c.notes.files {
		if strings.HasPrefix(m.Path, "/") {
			return m.Path
		}
	}
	return ""
}

// Arch is the architecture of the core's process.
func (c *Core) Arch() *arch.Arch { return c.arch }

// Path returns the core file's path.
func (c *Core) Path() string { return c.path }

// PID implements Target: the process ID the core records.
func (c *Core) PID() int { return c.notes.pid }

// Exe returns the executable's path as the process saw it.
func (c *Core) Exe() string { return c.exePath }

// Command returns the process's command name and its arguments (as ps
// shows them, cut to 80 bytes), from NT_PRPSINFO.
func (c *Core) Command() (comm, args string) { return c.notes.comm, c.notes.args }

// Signal returns the signal the first thread recorded (for a core the
// kernel wrote, the one that killed the process; 0 when none) and that
// thread's ID.
func (c *Core) Signal() (sig, tid int) {
	return c.notes.threads[0].Signal, c.notes.threads[0].TID
}

// Truncated describes how the core file is cut short, or returns "".
func (c *Core) Truncated() string { return c.truncated }

// Registers implements Target: the general registers the core's note
// holds for thread tid.
func (c *Core) Registers(tid int) (Regs, error) {
	for _, t := range c.notes.threads {
		if t.TID == tid {
			return t.Regs, nil
		}
	}
	return Regs{}, fmt.Errorf("tid %d: the core has no note of it: %w", tid, ErrNoRegisters)
}

// Mappings implements Target.
func (c *Core) Mappings() ([]Mapping, error) {
	return append([]Mapping(nil), c.maps...), nil
}

// Threads implements Target: the TIDs of the NT_PRSTATUS notes.
func (c *Core) Threads() ([]int, error) {
	tids := make([]int, 0, len(c.notes.threads))
	for _, t := range c.notes.threads {
		tids = append(tids, t.TID)
	}
	sort.Ints(tids)
	return tids, nil
}

// Close implements Target.
func (c *Core) Close() error {
	for _, f := range c.files {
		f.Close()
	}
	c.files = map[string]*os.File{}
	return c.f.Close()
}

// hostPath is where a path of the crashed process is on this machine.
func (c *Core) hostPath(path string) string {
	path = strings.TrimSuffix(path, " (deleted)")
	switch {
	case c.opts.Exe != "" && path == strings.TrimSuffix(c.exePath, " (deleted)"):
		return c.opts.Exe
	case c.opts.Sysroot != "":
		return filepath.Join(c.opts.Sysroot, c.inSysroot(path))
	}
	return path
}

// inSysroot is path relative to the sysroot: a path already inside it is
// taken as is (an emulator such as qemu-user records the executable it
// was given by its path on the machine that ran it, and the libraries by
// the paths inside the sysroot that the process saw).
func (c *Core) inSysroot(path string) string {
	root := filepath.Clean(c.opts.Sysroot)
	if rel, ok := strings.CutPrefix(path, root+"/"); ok && root != "/" {
		return "/" + rel
	}
	return path
}

// Open implements Target: a file as the crashed process saw it, under the
// sysroot when one is set. A file the process had mapped is checked against
// the core's copy of its first page (its ELF headers), so that a different
// build of it is refused rather than misread.
//
// The paths come from the core, which may be hostile: the file is opened
// without following a symbolic link at its last component and without
// blocking, and must be a regular file (a FIFO or device is refused, never
// waited on).
func (c *Core) Open(path string) (*os.File, error) {
	host := c.hostPath(path)
	if c.opts.CoreOnly {
		return nil, &MissingFileError{Path: path, Err: os.ErrNotExist}
	}
	// Under --sysroot the core's path resolves inside it (no "..", no
	// absolute symlink leaves it); --exe is the user's own path.
	root, rel := "/", host
	if c.opts.Sysroot != "" && host != c.opts.Exe {
		root, rel = c.opts.Sysroot, c.inSysroot(strings.TrimSuffix(path, " (deleted)"))
	}
	var f *os.File
	var err error
	if c.opts.Exe != "" && host == c.opts.Exe {
		// The user's own --exe: relative to the working directory, and a
		// symbolic link to the interpreter is fine (it is no FIFO still).
		if abs, aerr := filepath.Abs(host); aerr == nil {
			f, err = OpenRegular(abs)
		} else {
			err = aerr
		}
	} else {
		f, err = OpenInRoot(root, rel, false) // no symlink followed at the end, no FIFO opened
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &MissingFileError{Path: path, Tried: host, Err: err}
		}
		return nil, err
	}
	if err := c.checkFile(path, host, f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// UseOwnImage reports whether the ELF image of path should be read from
// the core's own memory after Open(path) failed with err: the file is not
// on this machine, is not a regular file, or is not the one the process
// had mapped, and neither --sysroot nor --exe says where it is (they win
// when given).
func (c *Core) UseOwnImage(path string, err error) bool {
	if c.opts.Sysroot != "" || c.opts.Exe != "" && strings.TrimSuffix(path, " (deleted)") == strings.TrimSuffix(c.exePath, " (deleted)") {
		return false
	}
	var missing *MissingFileError
	return errors.As(err, &missing) || errors.Is(err, ErrFileMismatch) || errors.Is(err, ErrNotRegular)
}

// checkFile compares the start of f with the core's copy of the mapping of
// path at file offset 0, when the core holds one.
func (c *Core) checkFile(path, host string, f *os.File) error {
	path = strings.TrimSuffix(path, " (deleted)")
	for _, m := range c.notes.files {
		if strings.TrimSuffix(m.Path, " (deleted)") != path || m.Offset != 0 {
			continue
		}
		s, ok := findSegment(c.segs, m.Start)
		if !ok || m.Start-s.vaddr >= s.filesz {
			return nil
		}
		n := min(4096, s.filesz-(m.Start-s.vaddr), m.End-m.Start)
		want := make([]byte, n)
		if k, _ := c.f.ReadAt(want, int64(s.off+m.Start-s.vaddr)); uint64(k) < n {
			return nil // that part of the core is missing: nothing to compare
		}
		got := make([]byte, n)
		k, _ := f.ReadAt(got, 0)
		if !bytes.Equal(got[:k], want) {
			return fmt.Errorf("%s: %w (its first %d bytes differ from the core's copy)", host, ErrFileMismatch, n)
		}
		return nil
	}
	return nil
}

// ReadAt implements Target. It reads across adjacent segments; a read that
// reaches memory the core does not hold returns the bytes before it and an
// error saying why.
func (c *Core) ReadAt(p []byte, addr uint64) (int, error) {
	n := 0
	for n < len(p) {
		a := addr + uint64(n)
		k, err := c.readSome(p[n:], a)
		n += k
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, fmt.Errorf("read at %#x: address not in the core", a)
		}
	}
	return n, nil
}

// readSome reads from the one segment or mapped file that holds addr.
func (c *Core) readSome(p []byte, addr uint64) (int, error) {
	s, ok := findSegment(c.segs, addr)
	if ok {
		p = p[:min(uint64(len(p)), s.end()-addr)]
		if rel := addr - s.vaddr; rel < s.filesz {
			p = p[:min(uint64(len(p)), s.filesz-rel)]
			off := s.off + rel
			n, err := c.f.ReadAt(p, int64(off))
			if n < len(p) {
				if err == nil || err == io.EOF {
					return n, fmt.Errorf("read at %#x: %w: the core's copy of it at file offset %#x is past the end of the file (%d bytes)",
						addr+uint64(n), ErrTruncated, off+uint64(n), c.size)
				}
				return n, fmt.Errorf("read at %#x: %w", addr+uint64(n), err)
			}
			return n, nil
		}
	}
	// Not in the core's data: a file mapping's contents come from the file.
	m, mok := FindMapping(c.notes.files, addr)
	if !mok {
		if ok {
			return 0, fmt.Errorf("read at %#x: %w (left out of the dump)", addr, ErrNotInCore)
		}
		return 0, fmt.Errorf("read at %#x: address not in the core", addr)
	}
	p = p[:min(uint64(len(p)), m.End-addr)]
	f, err := c.mappedFile(m.Path)
	if err != nil {
		return 0, fmt.Errorf("read at %#x: %w and the file mapped there cannot be read: %w", addr, ErrNotInCore, err)
	}
	n, err := f.ReadAt(p, int64(m.Offset+addr-m.Start))
	if n < len(p) {
		return n, fmt.Errorf("read at %#x: %s mapped there ends before it (%v)", addr+uint64(n), m.Path, err)
	}
	return n, nil
}

func (c *Core) mappedFile(path string) (*os.File, error) {
	if f, ok := c.files[path]; ok {
		return f, nil
	}
	if err, ok := c.fileErr[path]; ok {
		return nil, err
	}
	f, err := c.Open(path)
	if err != nil {
		c.fileErr[path] = err
		return nil, err
	}
	c.files[path] = f
	return f, nil
}

// Notes.
//
// A PT_NOTE segment is a sequence of notes, each a header of three 32-bit
// words (name size, descriptor size, type), the name (padded to 4 bytes)
// and the descriptor (padded to 4 bytes). Linux names its process notes
// "CORE"; the descriptors rbscope reads are:
//
//	NT_PRSTATUS  struct elf_prstatus, one per thread: pr_cursig (int16) at
//	             12, pr_pid (the TID) at 32, pr_reg (the architecture's
//	             registers, arch.Arch.Regs) at 112.
//	NT_ARM_TLS   ("LINUX") arm64's tpidr_el0, after its thread's
//	             NT_PRSTATUS.
//	NT_PRPSINFO  struct elf_prpsinfo: pr_pid at 24, pr_fname[16] at 40,
//	             pr_psargs[80] at 56.
//	NT_AUXV      the auxiliary vector, (type, value) word pairs.
//	NT_FILE      count and page size (words), count (start, end, page
//	             offset) word triples, then count NUL-terminated paths.

const (
	ntPrstatus = 1
	ntPrpsinfo = 3
	ntAuxv     = 6
	ntFile     = 0x46494c45 // "FILE"

	atPHDR = 3 // auxv: address of the executable's program headers

	prpsinfoSize = 136
)

// coreNotes is what rbscope takes from a core's notes.
type coreNotes struct {
	threads []CoreThread
	pid     int
	comm    string
	args    string
	files   []Mapping // from NT_FILE: Start, End, Offset, Path
	auxv    map[uint64]uint64
}

// parseCoreNotes decodes the notes of a core. It never panics on corrupt
// input: it keeps what it could decode and returns the first problem.
func parseCoreNotes(data []byte, a *arch.Arch) (coreNotes, error) {
	prstatusSize := a.PrstatusRegs + 8*len(a.Regs)
	le := binary.LittleEndian
	var cn coreNotes
	var firstErr error
	fail := func(format string, args ...any) {
		if firstErr == nil {
			firstErr = fmt.Errorf(format, args...)
		}
	}
	for len(data) > 0 {
		if len(data) < 12 {
			fail("note header cut short (%d bytes)", len(data))
			break
		}
		namesz, descsz, typ := uint64(le.Uint32(data)), uint64(le.Uint32(data[4:])), le.Uint32(data[8:])
		nameEnd := 12 + align4u(namesz)
		descEnd := nameEnd + descsz
		if descEnd > uint64(len(data)) {
			fail("note of type %#x cut short: needs %d bytes, %d left", typ, descEnd, len(data))
			break
		}
		name := string(bytes.TrimRight(data[12:12+namesz], "\x00"))
		desc := data[nameEnd:descEnd]
		data = data[min(nameEnd+align4u(descsz), uint64(len(data))):]
		if name == "LINUX" && a.TPNote != 0 && elf.NType(typ) == a.TPNote && len(desc) >= 8 {
			if n := len(cn.threads); n > 0 {
				cn.threads[n-1].Regs.TP = le.Uint64(desc)
			}
			continue
		}
		if name != "CORE" {
			continue
		}
		switch typ {
		case ntPrstatus:
			if len(desc) < prstatusSize {
				fail("NT_PRSTATUS of %d bytes, want %d", len(desc), prstatusSize)
				continue
			}
			th := CoreThread{TID: int(int32(le.Uint32(desc[32:]))), Signal: int(int16(le.Uint16(desc[12:])))}
			th.Regs = regsFrom(a, desc[a.PrstatusRegs:prstatusSize])
			cn.threads = append(cn.threads, th)
		case ntPrpsinfo:
			if len(desc) < prpsinfoSize {
				fail("NT_PRPSINFO of %d bytes, want %d", len(desc), prpsinfoSize)
				continue
			}
			cn.pid = int(int32(le.Uint32(desc[24:])))
			cn.comm = cString(desc[40:56])
			cn.args = strings.TrimSpace(cString(desc[56:136]))
		case ntAuxv:
			cn.auxv = map[uint64]uint64{}
			for b := desc; len(b) >= 16; b = b[16:] {
				cn.auxv[le.Uint64(b)] = le.Uint64(b[8:])
			}
		case ntFile:
			files, err := parseFileNote(desc)
			if err != nil {
				fail("NT_FILE: %v", err)
			}
			cn.files = append(cn.files, files...)
		}
	}
	if cn.pid == 0 && len(cn.threads) > 0 {
		cn.pid = cn.threads[0].TID
	}
	return cn, firstErr
}

// parseFileNote decodes NT_FILE into mappings (no permissions).
func parseFileNote(desc []byte) ([]Mapping, error) {
	le := binary.LittleEndian
	if len(desc) < 16 {
		return nil, fmt.Errorf("%d bytes", len(desc))
	}
	count, pageSize := le.Uint64(desc), le.Uint64(desc[8:])
	if count > uint64(len(desc)-16)/24 {
		return nil, fmt.Errorf("%d entries do not fit in %d bytes", count, len(desc))
	}
	names := desc[16+24*count:]
	var out []Mapping
	for i := uint64(0); i < count; i++ {
		e := desc[16+24*i:]
		end := bytes.IndexByte(names, 0)
		if end < 0 {
			return out, fmt.Errorf("%d paths for %d entries", i, count)
		}
		m := Mapping{Start: le.Uint64(e), End: le.Uint64(e[8:]), Offset: le.Uint64(e[16:]) * pageSize, Path: string(names[:end])}
		names = names[end+1:]
		if m.End > m.Start {
			out = append(out, m)
		}
	}
	return out, nil
}

func align4u(n uint64) uint64 { return (n + 3) &^ 3 }

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
