package target_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/target"
)

// TestInjectKeepsBlockedRead borrows a thread blocked in read(2): system
// calls run on it return what the kernel says, memory written through the
// mapping it made reads back, and afterwards the interrupted read is
// restarted and gets the next line as if nothing had happened.
func TestInjectKeepsBlockedRead(t *testing.T) {
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewReader(stdout)
	io.WriteString(stdin, "one\n")
	if l, _ := lines.ReadString('\n'); l != "one\n" {
		t.Fatalf("cat echoed %q", l)
	}
	time.Sleep(50 * time.Millisecond) // cat is in read(2) again
	pid := cmd.Process.Pid
	tg, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	var session *target.Stopped
	err = tg.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		session = s
		got, err := s.Syscall(pid, unix.SYS_GETPID)
		if err != nil || got != int64(pid) {
			return fmt.Errorf("getpid on the borrowed thread = %d, %v; want %d", got, err, pid)
		}
		addr, err := s.Syscall(pid, unix.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
		if err != nil || addr <= 0 {
			return fmt.Errorf("mmap = %#x, %v", addr, err)
		}
		if _, err := s.WriteAt([]byte("written"), uint64(addr)); err != nil {
			return err
		}
		buf := make([]byte, 7)
		if _, err := s.ReadAt(buf, uint64(addr)); err != nil || string(buf) != "written" {
			return fmt.Errorf("read back %q, %v", buf, err)
		}
		if r, err := s.Syscall(pid, unix.SYS_MUNMAP, uint64(addr), 4096); err != nil || r != 0 {
			return fmt.Errorf("munmap = %d, %v", r, err)
		}
		if r, _ := s.Syscall(pid, unix.SYS_CLOSE, 1<<20); r != -int64(unix.EBADF) {
			t.Errorf("close(bad fd) = %d, want -EBADF", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Syscall(pid, unix.SYS_GETPID); err == nil || !strings.Contains(err.Error(), "session has ended") {
		t.Errorf("a system call once the threads run again: %v, want a refusal", err)
	}
	if _, err := session.WriteAt([]byte("x"), 0x1000); err == nil || !strings.Contains(err.Error(), "session has ended") {
		t.Errorf("a write once the threads run again: %v, want a refusal", err)
	}
	io.WriteString(stdin, "two\n")
	done := make(chan string, 1)
	go func() { l, _ := lines.ReadString('\n'); done <- l }()
	select {
	case l := <-done:
		if l != "two\n" {
			t.Fatalf("after the injection cat echoed %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cat no longer reads its input after the injection")
	}
}

// TestCallRefusedWhenSegvIgnored: the injected call ends in a fault, which
// the kernel would turn into a reset of an ignored SIGSEGV's disposition.
func TestCallRefusedWhenSegvIgnored(t *testing.T) {
	cmd := exec.Command("bash", "-c", `trap "" SEGV; exec sleep 60`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tg, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	err = tg.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		_, err := s.Call(pid, 0x1000)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "ignores SIGSEGV") {
		t.Errorf("call in a process ignoring SIGSEGV: %v, want a refusal", err)
	}
}

// TestGoneAfterExit: Gone is false while the process lives and true once
// it has exited, as a zombie not yet reaped too.
func TestGoneAfterExit(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read x")
	stdin := startWithStdin(t, cmd)
	tg, err := target.Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if tg.Gone() {
		t.Fatal("Gone while the process runs")
	}
	io.WriteString(stdin, "go\n")
	for deadline := time.Now().Add(30 * time.Second); !tg.Gone(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not Gone 30 s after the process was told to exit (state %q)", procState(cmd.Process.Pid))
		}
	}
	// Not reaped yet: Gone said so of a zombie, not of a PID now free.
	if st := procState(cmd.Process.Pid); st != "Z" {
		t.Errorf("Gone, but the process is %q, not a zombie", st)
	}
}

// startWithStdin starts cmd with a pipe to its standard input, which it
// returns; cmd is killed and reaped when the test ends.
func startWithStdin(t *testing.T, cmd *exec.Cmd) io.Writer {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return stdin
}

// procState is the state letter of pid's stat line ("" when it cannot be
// read).
func procState(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return ""
}

// TestWriteRefusedAfterExec: a process (running as nobody when the test
// runs as root) that re-executes its own executable after rbscope attached
// is another program at the same PID. Writes used to land in the new
// program (process_vm_writev by PID); now nothing is written, and no
// thread of it is borrowed.
func TestWriteRefusedAfterExec(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", `read x; exec /bin/sh -c "read y"`)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	stdin := startWithStdin(t, cmd)
	pid := cmd.Process.Pid
	time.Sleep(100 * time.Millisecond)
	tg, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	stack := func() uint64 {
		maps, err := tg.Mappings()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Path == "[stack]" {
				return m.Start
			}
		}
		t.Fatal("setup: no stack mapping")
		return 0
	}
	// Setup: before the exec, the write goes through.
	var b [8]byte
	before := stack()
	if _, err := tg.ReadAt(b[:], before); err != nil {
		t.Fatal(err)
	}
	err = tg.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		_, err := s.WriteAt(b[:], before)
		return err
	})
	if err != nil {
		t.Fatalf("setup: a write before the exec: %v", err)
	}
	if tg.Gone() {
		t.Error("Gone before the exec")
	}
	io.WriteString(stdin, "go\n")
	deadline := time.Now().Add(5 * time.Second)
	for {
		// After the exec the command line is sh's own: ["/bin/sh", "-c", "read y"].
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasSuffix(string(c), "-c\x00read y\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("setup: the process did not exec")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	after := stack()
	if err := tg.CheckSame(); !errors.Is(err, target.ErrReplaced) {
		t.Errorf("CheckSame after the exec: %v, want %v", err, target.ErrReplaced)
	}
	if !tg.Gone() {
		t.Error("not Gone after the exec")
	}
	// The session may or may not start (the exec'd program is another
	// one); if it does, neither a write nor a borrowed call may happen.
	err = tg.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		if _, err := s.WriteAt([]byte("REPLACED"), after); !errors.Is(err, target.ErrReplaced) {
			t.Errorf("write into the exec'd program: %v, want %v", err, target.ErrReplaced)
		}
		if _, err := s.Syscall(pid, unix.SYS_GETPID); !errors.Is(err, target.ErrReplaced) {
			t.Errorf("a system call borrowed from the exec'd program: %v, want %v", err, target.ErrReplaced)
		}
		return nil
	})
	if err != nil && !errors.Is(err, target.ErrReplaced) {
		t.Errorf("stopping the exec'd program: %v", err)
	}
	// Read back through a fresh view of the new program's memory.
	fresh, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	var got [8]byte
	if _, err := fresh.ReadAt(got[:], after); err == nil && string(got[:]) == "REPLACED" {
		t.Errorf("the exec'd program was written to")
	}
}
