package target

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/testruby"
)

// bigString starts a Ruby process holding a 48 MB String of 'A's and
// returns it once it says so.
func bigString(t *testing.T) *exec.Cmd {
	t.Helper()
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", `$big = "A" * (48 << 20); puts "ready"; $stdout.flush; sleep`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the program said %q, %v", line, err)
	}
	return cmd
}

// procStatus returns a field of /proc/PID/status ("" when it cannot be
// read: it may run on the tracer thread, where a test must not fail).
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestSnapshotCopiesWritableMemory: the copy holds the program's String,
// reads of untouched memory give the zeros the process reads, read-only
// mappings are read through, and the process runs again.
func TestSnapshotCopiesWritableMemory(t *testing.T) {
	cmd := bigString(t)
	l, err := Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The process is stopped (SIGSTOP) around the snapshot so that its
	// memory cannot change before it is compared with the copy.
	if err := unix.Kill(cmd.Process.Pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("paused %v in %d stops (longest %v) to copy %d MB in %d ranges, %s (fallback: %q)", s.Paused, s.Stops, s.Longest, s.Bytes>>20, len(s.runs), s.Method, s.Fallback)
	if s.Bytes < 48<<20 || s.Paused <= 0 {
		t.Errorf("copied %d bytes, paused %v", s.Bytes, s.Paused)
	}
	if tr := procStatus(t, cmd.Process.Pid, "TracerPid"); tr != "0" {
		t.Errorf("process still traced by %s", tr)
	}
	// Every mapping reads the same through the snapshot as from the
	// process: writable ones from the copy or as zeros, read-only ones
	// through.
	maps, _ := s.Mappings()
	var sawString, sawReadOnly bool
	for _, m := range maps {
		if !strings.Contains(m.Perms, "r") || m.Path == "[vvar]" || m.Path == "[vsyscall]" || m.End-m.Start > 256<<20 {
			continue
		}
		want := make([]byte, m.End-m.Start)
		got := make([]byte, m.End-m.Start)
		if _, err := l.ReadAt(want, m.Start); err != nil {
			continue // a guard page or the like
		}
		if _, err := s.ReadAt(got, m.Start); err != nil {
			t.Errorf("%x-%x %s %s: %v", m.Start, m.End, m.Perms, m.Path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%x-%x %s %s reads otherwise through the snapshot", m.Start, m.End, m.Perms, m.Path)
		}
		sawString = sawString || bytes.Contains(got, bytes.Repeat([]byte("A"), 1<<20))
		sawReadOnly = sawReadOnly || (!strings.Contains(m.Perms, "w") && bytes.Equal(got, want))
	}
	if !sawString || !sawReadOnly {
		t.Errorf("the String in the copy: %v; a read-only mapping read through: %v", sawString, sawReadOnly)
	}
	if err := unix.Kill(cmd.Process.Pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.HasPrefix(procStatus(t, cmd.Process.Pid, "State"), "T") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := procStatus(t, cmd.Process.Pid, "State"); strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
		t.Errorf("process left stopped after SIGCONT: %s", st)
	}
}

// TestSnapshotTooBig: a copy that would not fit is refused before the
// process stops.
func TestSnapshotTooBig(t *testing.T) {
	cmd := bigString(t)
	l, err := Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	availableMemory = func() (int64, bool) { return 16 << 20, true }
	defer func() { availableMemory = memAvailable }()
	stops := 0
	beforeCopyBatch = func() { stops++ }
	defer func() { beforeCopyBatch = nil }()
	_, err = l.Snapshot()
	if !errors.Is(err, ErrSnapshotTooBig) {
		t.Fatalf("err = %v, want ErrSnapshotTooBig", err)
	}
	t.Log(err)
	if stops != 0 {
		t.Errorf("%d copies began", stops)
	}
	if tr := procStatus(t, cmd.Process.Pid, "TracerPid"); tr != "0" {
		t.Errorf("process traced by %s", tr)
	}
}

// TestSnapshotTargetDies: a process that ends during the copy leaves no
// snapshot and an error that says so.
func TestSnapshotTargetDies(t *testing.T) {
	cmd := bigString(t)
	pid := cmd.Process.Pid
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	beforeCopyBatch = func() {
		unix.Kill(pid, unix.SIGKILL)
		// Wait until its memory is gone (a zombie).
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && !strings.HasPrefix(procStatus(t, pid, "State"), "Z") {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { beforeCopyBatch = nil }()
	s, err := l.Snapshot()
	if s != nil || !errors.Is(err, ErrExited) {
		t.Fatalf("snapshot %v, err %v; want none and ErrExited", s != nil, err)
	}
	t.Log(err)
}

// TestSnapshotIsThePausedCopy: memory the process changes after the
// warm-up copy (and before the pause) reads as changed, and memory it
// never touched is never read: the process's own resident memory does not
// grow by it, and it reads as zeros.
func TestSnapshotIsThePausedCopy(t *testing.T) {
	prog := `#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
	char *p = mmap(0, 256 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (long i = 0; i < (256 << 20); i += 16 * 4096) memset(p + i, 'A', 4096);
	printf("%p\n", (void *)p);
	fflush(stdout);
	pause();
	return 0;
}
`
	cmd, base := startAddressProgram(t, buildC(t, t.TempDir(), "sparse", prog))
	pid := cmd.Process.Pid
	rssKB := func() int {
		f := strings.Fields(procStatus(t, pid, "RssAnon"))
		if len(f) == 0 {
			t.Fatal("setup: no RssAnon")
		}
		n, _ := strconv.Atoi(f[0])
		return n
	}
	before := rssKB()
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	afterWarmup = func() {
		// Write a new marker after the warm-up, as a running process would.
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
		if err == nil {
			f.WriteAt([]byte("changed"), int64(base))
			f.Close()
		}
	}
	defer func() { afterWarmup = nil }()
	s, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after := rssKB()
	t.Logf("RssAnon %d kB before, %d kB after; copied %d MB in %d runs", before, after, s.Bytes>>20, len(s.runs))
	if after-before > 16<<10 {
		t.Errorf("the process's resident memory grew by %d kB: untouched pages were read", after-before)
	}
	got := make([]byte, 7)
	if _, err := s.ReadAt(got, base); err != nil || string(got) != "changed" {
		t.Errorf("the marker reads %q, %v: not the paused copy", got, err)
	}
	if _, err := s.ReadAt(got, base+4096); err != nil || string(got) != "\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("an untouched page reads %q, %v; want zeros", got, err)
	}
	if _, err := s.ReadAt(got, base+16*4096); err != nil || string(got) != "AAAAAAA" {
		t.Errorf("a touched page reads %q, %v", got, err)
	}
}

// writerProg is a C program that maps 64 MB and sweeps it without end,
// writing its sweep's number at the head of each page in turn, and says
// where the memory is once it has swept it once. At any instant the pages
// hold one sweep's number up to where the writer is and the sweep before
// from there on: a copy of one instant does too.
const writerProg = `#include <stdio.h>
#include <stdint.h>
#include <sys/mman.h>
#define PAGES (64 << 20) / 4096
int main(void) {
	volatile uint64_t *p = mmap(0, (size_t)PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (uint64_t g = 1;; g++) {
		for (long i = 0; i < PAGES; i++) p[i * 512] = g;
		if (g == 1) { printf("%p\n", (void *)p); fflush(stdout); }
	}
}
`

// WriterEnv names a prebuilt writerProg, for a machine without gcc: the virtual machine of TestPrecopyOnSoftDirtyKernel.
const WriterEnv = "RBSCOPE_TEST_WRITER"

// startWriter builds (or takes from WriterEnv) and starts writerProg,
// returning its memory's address and size.
func startWriter(t *testing.T) (*exec.Cmd, uint64, int) {
	t.Helper()
	bin := os.Getenv(WriterEnv)
	if bin == "" {
		bin = buildC(t, t.TempDir(), "writer", writerProg)
	}
	cmd, base := startAddressProgram(t, bin)
	return cmd, base, (64 << 20) / page
}

// startAddressProgram starts a program that prints an address on its
// first line of output, and returns it with the address.
func startAddressProgram(t *testing.T, bin string) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := testruby.DieWithTest(exec.Command(bin))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var base uint64
	if _, err := fmt.Fscanf(bufio.NewReader(out), "%v\n", &base); err != nil {
		t.Fatalf("setup: the program's address: %v", err)
	}
	return cmd, base
}

// TestSnapshotOfAWriter: a process writing all the time is copied as it
// was at one instant, whichever way the copy is made (pre-copied where
// the kernel keeps soft-dirty bits, else while paused; kept in a spool
// file; and while paused when asked): its pages hold one sweep's number
// up to one page and the sweep before after it, never a page of an older
// sweep among newer ones.
func TestSnapshotOfAWriter(t *testing.T) {
	for _, method := range []string{"default", "spooled", CopiedPaused} {
		t.Run(method, func(t *testing.T) {
			cmd, base, pages := startWriter(t)
			if method == CopiedPaused {
				saved := softDirtyMissing
				softDirtyMissing = func() string { return "asked" }
				defer func() { softDirtyMissing = saved }()
			}
			l, err := Attach(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var opts SnapshotOptions
			if method == "spooled" {
				opts.SpoolDir = t.TempDir()
			}
			s, err := l.SnapshotWith(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			t.Logf("%s: paused %v in %d stops (longest %v) to copy %d MB (fallback: %q)", s.Method, s.Paused, s.Stops, s.Longest, s.Bytes>>20, s.Fallback)
			if method == CopiedPaused && s.Method != CopiedPaused {
				t.Errorf("method %q, want %q", s.Method, CopiedPaused)
			}
			if want := softDirtyMissing() == ""; method != CopiedPaused && (s.Method == PreCopied) != want {
				t.Errorf("method %q where the kernel's soft-dirty bits are usable: %v", s.Method, want)
			}
			buf := make([]byte, pages*page)
			if _, err := s.ReadAt(buf, base); err != nil {
				t.Fatal(err)
			}
			gen := func(i int) uint64 { return binary.LittleEndian.Uint64(buf[i*page:]) }
			first, cut := gen(0), -1
			for i := 1; i < pages; i++ {
				g := gen(i)
				switch {
				case g == first:
				case g == first-1 && cut < 0:
					cut = i
				case g == first-1 && cut >= 0:
				default:
					t.Fatalf("page %d holds sweep %d, page 0 sweep %d (the cut at %d): not one instant", i, g, first, cut)
				}
				if cut >= 0 && g == first {
					t.Fatalf("page %d holds sweep %d after the cut at page %d: not one instant", i, g, cut)
				}
			}
			t.Logf("sweep %d up to page %d of %d", first, cut, pages)
			if first < 2 {
				t.Errorf("the writer was copied in its first sweep (%d): nothing was written meanwhile", first)
			}
		})
	}
}

// buildC compiles the C program src as dir/name.
func buildC(t *testing.T, dir, name, src string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testruby.Missing(t, "gcc is not installed")
	}
	file, bin := filepath.Join(dir, name+".c"), filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, file).CombinedOutput(); err != nil {
		t.Fatalf("setup: gcc: %v\n%s", err, out)
	}
	return bin
}
