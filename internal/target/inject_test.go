package target_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/target"
)

// attachPaused attaches to pid and pauses its main thread, to be borrowed.
// The caller closes the target (which resumes it) before killing pid.
func attachPaused(t *testing.T, pid int) *target.Live {
	t.Helper()
	tg, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.PauseThreads([]int{pid}); err != nil {
		tg.Close()
		t.Fatal(err)
	}
	return tg
}

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
	tg := attachPaused(t, pid)
	defer tg.Close()
	got, err := tg.Syscall(pid, unix.SYS_GETPID)
	if err != nil || got != int64(pid) {
		t.Fatalf("getpid on the borrowed thread = %d, %v; want %d", got, err, pid)
	}
	addr, err := tg.Syscall(pid, unix.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
	if err != nil || addr <= 0 {
		t.Fatalf("mmap = %#x, %v", addr, err)
	}
	if _, err := tg.WriteAt([]byte("written"), uint64(addr)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := tg.ReadAt(buf, uint64(addr)); err != nil || string(buf) != "written" {
		t.Fatalf("read back %q, %v", buf, err)
	}
	if r, err := tg.Syscall(pid, unix.SYS_MUNMAP, uint64(addr), 4096); err != nil || r != 0 {
		t.Fatalf("munmap = %d, %v", r, err)
	}
	if r, _ := tg.Syscall(pid, unix.SYS_CLOSE, 1<<20); r != -int64(unix.EBADF) {
		t.Errorf("close(bad fd) = %d, want -EBADF", r)
	}
	if err := tg.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Syscall(pid, unix.SYS_GETPID); err == nil || !strings.Contains(err.Error(), "not paused") {
		t.Errorf("a system call on a running thread: %v, want a refusal", err)
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
	tg := attachPaused(t, pid)
	defer tg.Close()
	if _, err := tg.Call(pid, 0x1000); err == nil || !strings.Contains(err.Error(), "ignores SIGSEGV") {
		t.Errorf("call in a process ignoring SIGSEGV: %v, want a refusal", err)
	}
}
