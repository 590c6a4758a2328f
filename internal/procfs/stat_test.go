package procfs

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statLine is a stat line as the kernel writes it, with comm as the name
// and the fields rbscope reads set apart: state S, ppid 4321, utime 250,
// stime 50, starttime 777 and processor 3.
func statLine(comm string) string {
	return "1234 (" + comm + ") S 4321 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 777 10000 200 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n"
}

// TestParseStatTrickyNames: a command name is anything its process says
// (up to 15 bytes): parentheses, ") " followed by what looks like fields,
// newlines and nothing at all. The fields are read after the last ')'.
func TestParseStatTrickyNames(t *testing.T) {
	for _, comm := range []string{
		"ruby",
		"",
		"a b",
		") R 1 2 3 (",
		"x) Z 9 (y",
		"))))",
		"((((",
		"line\nbreak",
		"\n) R 7\n",
		"puma: cluster w",
		"\x1b]0;t\x07",
	} {
		s, err := ParseStat([]byte(statLine(comm)))
		if err != nil {
			t.Errorf("ParseStat(name %q): %v", comm, err)
			continue
		}
		want := Stat{Comm: comm, State: 'S', PPID: 4321, UTime: 250, STime: 50, StartTime: 777, Processor: 3, NumThreads: 1}
		if s != want {
			t.Errorf("ParseStat(name %q) = %+v, want %+v", comm, s, want)
		}
	}
}

// TestParseStatBadLines: a line cut short, without a name, or with a
// number that is not one is refused with ErrBadStat, never a panic; an
// old kernel's line that stops before the processor field is read with
// Processor -1.
func TestParseStatBadLines(t *testing.T) {
	full := statLine("ruby")
	cut := full[:strings.Index(full, " 777")] // before starttime
	for _, line := range []string{
		"",
		"1234",
		"1234 (ruby",
		"1234 ruby) S 1",
		"1234 (ruby)",
		"1234 (ruby) ",
		cut,
		strings.Replace(full, " 4321 ", " 43x1 ", 1),
		strings.Replace(full, " 250 ", " 99999999999999999999999 ", 1),
		strings.Replace(full, " 777 ", " -777 ", 1),
	} {
		if s, err := ParseStat([]byte(line)); !errors.Is(err, ErrBadStat) {
			t.Errorf("ParseStat(%q) = %+v, %v; want ErrBadStat", line, s, err)
		}
	}
	old := full[:strings.Index(full, " 17 3 ")] // stops before exit_signal
	s, err := ParseStat([]byte(old))
	if err != nil || s.StartTime != 777 || s.Processor != -1 {
		t.Errorf("ParseStat(old kernel's line) = %+v, %v; want start time 777, processor -1", s, err)
	}
}

// TestReadStatOfARenamedThread: a thread of this test named like a forged
// stat line reads back with that name (as /proc/.../comm says it) and the
// kernel's own fields: running, its parent this process's parent.
func TestReadStatOfARenamedThread(t *testing.T) {
	const name = ") R 1 2 (\nx" // 12 bytes: within the kernel's 15
	type result struct {
		stat Stat
		comm string
		err  error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine, renamed
		tid := unix.Gettid()
		p, _ := unix.BytePtrFromString(name)
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0); err != nil {
			done <- result{err: err}
			return
		}
		st, err := ReadStat(os.Getpid(), tid)
		comm, _ := os.ReadFile(taskDir(os.Getpid(), tid) + "/comm")
		done <- result{st, strings.TrimSuffix(string(comm), "\n"), err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.comm != name {
		t.Fatalf("setup: the kernel names the thread %q, not %q", r.comm, name)
	}
	if r.stat.Comm != name || r.stat.State != 'R' || r.stat.PPID != os.Getppid() || r.stat.StartTime == 0 {
		t.Errorf("ReadStat of the renamed thread = %+v; want name %q, state R, ppid %d", r.stat, name, os.Getppid())
	}
	if Exited(os.Getpid()) {
		t.Error("Exited says this running process exited")
	}
	if !Exited(1 << 30) {
		t.Error("Exited says a PID above pid_max runs")
	}
}
