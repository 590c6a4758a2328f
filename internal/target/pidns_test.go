package target

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestLocalTID starts Ruby with two threads as PID 1 of a PID namespace of
// its own: LocalTID turns each thread's ID inside the namespace (what
// Ruby keeps in memory) into the one rbscope's /proc lists, as the
// kernel's NSpid says, and an ID that names no thread of the process
// (one of another process's, too) into 0. For a process in rbscope's own
// namespace the IDs are one.
func TestLocalTID(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "a PID namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testruby.Missing(t, "unshare (util-linux) is not installed")
	}
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", rb.Bin, "-e", `Thread.new { sleep }; $stdout.puts "ready"; $stdout.flush; sleep`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	testruby.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 6)
		_, err := out.Read(b)
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("the namespaced Ruby did not start: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the namespaced Ruby did not start within 60s")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("unshare's children: %q", b)
	}
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tids, err := l.Threads()
	if err != nil {
		t.Fatal(err)
	}
	if len(tids) < 2 {
		t.Fatalf("threads %v, want two at least", tids)
	}
	for _, tid := range tids {
		ids, ok := nsPIDs(pid, tid)
		if !ok || len(ids) != 2 || ids[0] != tid {
			t.Fatalf("task %d: NSpid %v", tid, ids)
		}
		if got := l.LocalTID(ids[1]); got != tid {
			t.Errorf("LocalTID(%d) = %d, want %d", ids[1], got, tid)
		}
		if tid == pid && ids[1] != 1 {
			t.Errorf("the main thread is %d inside, want 1", ids[1])
		}
	}
	for _, stranger := range []int{99999, os.Getpid(), -1} {
		if got := l.LocalTID(stranger); got != 0 {
			t.Errorf("LocalTID(%d) = %d, want 0: no thread of the process has that ID inside", stranger, got)
		}
	}

	self, err := Attach(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if got := self.LocalTID(os.Getpid()); got != os.Getpid() {
		t.Errorf("in rbscope's own namespace LocalTID(%d) = %d", os.Getpid(), got)
	}
}
