package target

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/testruby"
)

// startSleep starts sleep(1) with core dumps allowed and returns it with its
// /proc/PID/maps as they were.
func startSleep(t *testing.T) (*exec.Cmd, []Mapping) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited && exec sleep 60")
	testruby.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Once sleep sleeps, the loader is done with its mappings (RELRO
		// made read-only, ld.so.cache unmapped): /proc/PID/syscall names
		// the system call it is blocked in (nanosleep, clock_nanosleep).
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if nr, _, _ := strings.Cut(string(sc), " "); strings.HasSuffix(exe, "/sleep") && (nr == "35" || nr == "230") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep did not start (exe %q)", exe)
		}
		time.Sleep(10 * time.Millisecond)
	}
	maps, err := procfs.ReadMapsFile(fmt.Sprintf("/proc/%d/maps", pid), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, maps
}

// checkSleepCore checks a core of sleep against its maps and its files.
func checkSleepCore(t *testing.T, path string, pid int, live []Mapping) {
	t.Helper()
	c, err := OpenCore(path, CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PID() != pid {
		t.Errorf("pid %d, want %d", c.PID(), pid)
	}
	if tids, _ := c.Threads(); len(tids) != 1 || tids[0] != pid {
		t.Errorf("threads %v, want [%d]", tids, pid)
	}
	if comm, _ := c.Command(); comm != "sleep" {
		t.Errorf("command %q, want sleep", comm)
	}
	maps, _ := c.Mappings()
	for _, lm := range live {
		if !strings.HasPrefix(lm.Path, "/") {
			continue
		}
		m, ok := FindMapping(maps, lm.Start)
		// gdb leaves out mappings it can read back from their files:
		// their permissions are unknown.
		_, dumped := findSegment(c.segs, lm.Start)
		if !ok || m.Start != lm.Start || m.End != lm.End || m.Offset != lm.Offset || m.Path != lm.Path || (dumped && m.Perms[:3] != lm.Perms[:3]) {
			t.Errorf("mapping %+v in the core, /proc/PID/maps had %+v", m, lm)
		}
	}
	if want, err := filepath.EvalSymlinks(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && c.Exe() != want {
		t.Logf("exe %q, /proc/PID/exe was %q", c.Exe(), want)
	}
	// The stack pointer lies in the stack; the executable's text reads as
	// the file holds it (from the core for gcore, from the file for the
	// kernel, which leaves text out).
	regs, err := c.Registers(pid)
	stack, sok := FindMapping(live, regs.SP())
	if err != nil || !sok || stack.Path != "[stack]" {
		t.Errorf("rsp %#x is not in [stack] (registers: %v)", regs.SP(), err)
	}
	var sp [8]byte
	if err := ReadFull(c, sp[:], regs.SP()); err != nil {
		t.Errorf("reading the stack: %v", err)
	}
	for _, lm := range live {
		if !strings.HasSuffix(lm.Path, "/sleep") || lm.Perms[2] != 'x' {
			continue
		}
		got := make([]byte, lm.End-lm.Start)
		if err := ReadFull(c, got, lm.Start); err != nil {
			t.Fatalf("reading the text of sleep: %v", err)
		}
		f, _ := os.Open(lm.Path)
		want := make([]byte, len(got))
		n, _ := f.ReadAt(want, int64(lm.Offset))
		f.Close()
		if !bytes.Equal(got[:n], want[:n]) {
			t.Errorf("text of sleep at %#x differs from the file", lm.Start)
		}
	}
	if _, err := c.ReadAt(make([]byte, 8), 0x10); err == nil {
		t.Error("read at 0x10 succeeded")
	}
}

// TestGcoreOfSleep reads a core gdb wrote.
func TestGcoreOfSleep(t *testing.T) {
	cmd, live := startSleep(t)
	core := testruby.Gcore(t, cmd.Process.Pid)
	checkSleepCore(t, core, cmd.Process.Pid, live)
}

// TestKernelCoreOfSleep reads a core the kernel wrote, in which the text of
// programs is left out and read from their files.
func TestKernelCoreOfSleep(t *testing.T) {
	dir := t.TempDir()
	testruby.SetCorePattern(t, filepath.Join(dir, "core.%p"))
	cmd, live := startSleep(t)
	cmd.Process.Signal(syscall.SIGABRT)
	cmd.Wait()
	core := filepath.Join(dir, fmt.Sprintf("core.%d", cmd.Process.Pid))
	if _, err := os.Stat(core); err != nil {
		t.Fatalf("no core from the kernel (%v): %v", cmd.ProcessState, err)
	}
	checkSleepCore(t, core, cmd.Process.Pid, live)
	c, err := OpenCore(core, CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if sig, _ := c.Signal(); sig != int(syscall.SIGABRT) {
		t.Errorf("signal %d, want SIGABRT", sig)
	}
}

// TestCoreErrors: what is not a core, a cut core and files missing or
// different on this machine give errors that say so.
func TestCoreErrors(t *testing.T) {
	cmd, _ := startSleep(t)
	core := testruby.Gcore(t, cmd.Process.Pid)
	dir := t.TempDir()

	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("not a core\n"), 0o644)
	if _, err := OpenCore(text, CoreOptions{}); err == nil || !strings.Contains(err.Error(), "not a core file (not ELF") {
		t.Errorf("text file: %v", err)
	}
	if _, err := OpenCore("/bin/true", CoreOptions{}); err == nil || !strings.Contains(err.Error(), "not a core file") || !strings.Contains(err.Error(), "ET_") {
		t.Errorf("/bin/true: %v", err)
	}
	if _, err := OpenCore(filepath.Join(dir, "none"), CoreOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing core: %v", err)
	}
	for _, size := range []int64{40, 64, 200} {
		cut := testruby.CopyPrefix(t, core, filepath.Join(dir, fmt.Sprint("cut", size)), func(int64) int64 { return size })
		if _, err := OpenCore(cut, CoreOptions{}); err == nil {
			t.Errorf("core cut to %d bytes opened", size)
		} else {
			t.Logf("cut to %d bytes: %v", size, err)
		}
	}
	// gdb writes the notes last: half a gcore core has no threads.
	half := testruby.CopyPrefix(t, core, filepath.Join(dir, "half"), func(n int64) int64 { return n / 2 })
	if _, err := OpenCore(half, CoreOptions{}); !errors.Is(err, ErrTruncated) {
		t.Errorf("half a core: %v, want %v", err, ErrTruncated)
	} else {
		t.Logf("half a core: %v", err)
	}

	c, err := OpenCore(core, CoreOptions{Sysroot: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var missing *MissingFileError
	if _, err := c.Open(c.Exe()); !errors.As(err, &missing) || missing.Path != c.Exe() || missing.Tried != filepath.Join(dir, c.Exe()) {
		t.Errorf("open %s under an empty sysroot: %v", c.Exe(), err)
	}
	wrong := filepath.Join(dir, c.Exe())
	os.MkdirAll(filepath.Dir(wrong), 0o755)
	copyFile(t, "/bin/true", wrong)
	if _, err := c.Open(c.Exe()); !errors.Is(err, ErrFileMismatch) {
		t.Errorf("open %s as /bin/true: %v, want %v", c.Exe(), err, ErrFileMismatch)
	}
	c2, err := OpenCore(core, CoreOptions{Sysroot: dir, Exe: "/usr/bin/sleep"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if f, err := c2.Open(c2.Exe()); err != nil {
		t.Errorf("--exe /usr/bin/sleep: %v", err)
	} else {
		f.Close()
	}
}

// copyFile copies a file as an executable, making its directory.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// note encodes one ELF note.
func note(name string, typ uint32, desc []byte) []byte {
	le := binary.LittleEndian
	var b []byte
	b = le.AppendUint32(b, uint32(len(name)+1))
	b = le.AppendUint32(b, uint32(len(desc)))
	b = le.AppendUint32(b, typ)
	b = append(b, name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// sampleNotes is a small set of notes as the kernel writes them.
func sampleNotes() []byte {
	le := binary.LittleEndian
	a := arch.AMD64
	prstatus := make([]byte, a.PrstatusRegs+8*len(a.Regs)+8)
	le.PutUint16(prstatus[12:], 11)
	le.PutUint32(prstatus[32:], 4242)
	le.PutUint64(prstatus[a.PrstatusRegs+8*a.PC:], 0x401000)  // rip
	le.PutUint64(prstatus[a.PrstatusRegs+8*a.SP:], 0x7ffd000) // rsp
	psinfo := make([]byte, prpsinfoSize)
	le.PutUint32(psinfo[24:], 4242)
	copy(psinfo[40:], "ruby")
	copy(psinfo[56:], "ruby app.rb")
	var file []byte
	file = le.AppendUint64(file, 2)
	file = le.AppendUint64(file, 4096)
	for _, e := range [][3]uint64{{0x400000, 0x401000, 0}, {0x401000, 0x402000, 1}} {
		file = le.AppendUint64(le.AppendUint64(le.AppendUint64(file, e[0]), e[1]), e[2])
	}
	file = append(file, "/usr/bin/ruby\x00/usr/bin/ruby\x00"...)
	var auxv []byte
	auxv = le.AppendUint64(le.AppendUint64(auxv, atPHDR), 0x400040)
	var out []byte
	out = append(out, note("CORE", ntPrstatus, prstatus)...)
	out = append(out, note("CORE", ntPrpsinfo, psinfo)...)
	out = append(out, note("LINUX", 0x202, []byte{1, 2, 3})...)
	out = append(out, note("CORE", ntAuxv, auxv)...)
	out = append(out, note("CORE", ntFile, file)...)
	return out
}

func TestParseCoreNotes(t *testing.T) {
	cn, err := parseCoreNotes(sampleNotes(), arch.AMD64)
	if err != nil {
		t.Fatal(err)
	}
	if cn.pid != 4242 || cn.comm != "ruby" || cn.args != "ruby app.rb" || len(cn.threads) != 1 || cn.auxv[atPHDR] != 0x400040 {
		t.Errorf("notes: %+v", cn)
	}
	if th := cn.threads[0]; th.TID != 4242 || th.Signal != 11 || th.Regs.PC() != 0x401000 || th.Regs.SP() != 0x7ffd000 {
		t.Errorf("thread: %+v", th)
	}
	want := []Mapping{{Start: 0x400000, End: 0x401000, Path: "/usr/bin/ruby"}, {Start: 0x401000, End: 0x402000, Offset: 4096, Path: "/usr/bin/ruby"}}
	if fmt.Sprint(cn.files) != fmt.Sprint(want) {
		t.Errorf("files %+v, want %+v", cn.files, want)
	}
	// Cut anywhere, the notes decode without a panic and what is cut is
	// reported.
	data := sampleNotes()
	for n := 0; n < len(data); n++ {
		parseCoreNotes(data[:n], arch.AMD64)
	}
	if cn, err := parseCoreNotes(data[:len(data)-1], arch.AMD64); err == nil || len(cn.threads) != 1 {
		t.Errorf("notes cut inside NT_FILE: error %v, %d threads kept", err, len(cn.threads))
	}
}

// TestParseCoreNotesAArch64 decodes the notes an arm64 kernel writes for
// two threads: each NT_PRSTATUS (392 bytes: pr_reg is user_pt_regs, 34
// words) followed by the thread's NT_ARM_TLS ("LINUX", tpidr_el0), which
// gives that thread its thread pointer. (The qemu-made cores the arm64
// tests read have no NT_ARM_TLS; no kernel-written arm64 core was at hand.)
func TestParseCoreNotesAArch64(t *testing.T) {
	le := binary.LittleEndian
	a := arch.ARM64
	var data []byte
	for i, tid := range []uint32{100, 101} {
		prstatus := make([]byte, 392)
		le.PutUint16(prstatus[12:], 11)
		le.PutUint32(prstatus[32:], tid)
		for r := range a.Regs {
			le.PutUint64(prstatus[a.PrstatusRegs+8*r:], uint64(1000*(i+1)+r))
		}
		tls := le.AppendUint64(nil, 0x7f00_0000_0000+uint64(i))
		data = append(data, note("CORE", ntPrstatus, prstatus)...)
		data = append(data, note("LINUX", uint32(a.TPNote), tls)...)
	}
	cn, err := parseCoreNotes(data, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.threads) != 2 {
		t.Fatalf("%d threads, want 2", len(cn.threads))
	}
	for i, th := range cn.threads {
		r := th.Regs
		base := uint64(1000 * (i + 1))
		if th.TID != 100+i || r.Arch != a || r.PC() != base+32 || r.SP() != base+31 || r.V[30] != base+30 || r.TP != 0x7f00_0000_0000+uint64(i) {
			t.Errorf("thread %d: tid %d, pc %d, sp %d, x30 %d, tp %#x", i, th.TID, r.PC(), r.SP(), r.V[30], r.TP)
		}
		if names := r.Names(); len(names) != len(r.Values()) || names[len(names)-1] != "tpidr_el0" {
			t.Errorf("thread %d: names %v for %d values", i, names, len(r.Values()))
		}
	}
	// An x86_64 NT_PRSTATUS is too short for arm64's registers: refused,
	// never read as them.
	if _, err := parseCoreNotes(sampleNotes(), a); err == nil {
		t.Error("x86_64 notes decoded as arm64's")
	}
}

// FuzzCoreNotes feeds corrupt notes to the parser and to what is built from
// its result: nothing may panic.
func FuzzCoreNotes(f *testing.F) {
	f.Add(sampleNotes())
	f.Add(note("CORE", ntFile, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 16}))
	f.Add(note("CORE", ntPrstatus, make([]byte, 12)))
	f.Add([]byte{5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 'C', 'O', 'R', 'E', 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		cn, _ := parseCoreNotes(data, arch.AMD64)
		segs := []coreSegment{{vaddr: 0x400000, memsz: 0x2000, filesz: 0x1000}}
		maps := coreMappings(cn.files, segs)
		for _, m := range maps {
			FindMapping(maps, m.Start)
			findSegment(segs, m.End-1)
		}
	})
}

// TestCoreOpenHostile: the paths a core names are opened without following
// a symbolic link and without blocking, and only regular files are kept: a
// FIFO must not hang rbscope, and it leads to the core's own image.
func TestCoreOpenHostile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	os.WriteFile(regular, []byte("hello"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(regular, link)

	c := &Core{opts: CoreOptions{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, link, dir} {
			f, err := c.Open(p)
			if err == nil {
				f.Close()
				t.Errorf("%s: opened", p)
				continue
			}
			if !errors.Is(err, ErrNotRegular) || !c.UseOwnImage(p, err) {
				t.Errorf("%s: %v (not ErrNotRegular, or not a reason to use the core's image)", p, err)
			}
		}
		f, err := c.Open(regular)
		if err != nil {
			t.Errorf("regular file: %v", err)
			return
		}
		f.Close()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO a core names blocked")
	}
	withSysroot := &Core{opts: CoreOptions{Sysroot: dir}}
	if withSysroot.UseOwnImage("/x", &MissingFileError{Path: "/x"}) {
		t.Error("--sysroot given, yet a missing file falls back to the core's image")
	}
}
