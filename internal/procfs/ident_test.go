package procfs

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestIdent reads a child's name, executable, arguments and threads as the
// kernel gives them, and what is left once it is reaped.
func TestIdent(t *testing.T) {
	bin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) here")
	}
	cmd := exec.Command(bin, "30", "1s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Start returns once the child is forked; the exec may come after,
	// and the kernel switches the exe link before it lays out the new
	// arguments.
	for deadline := time.Now().Add(10 * time.Second); (Exe(pid) != bin || Args(Root, pid) == nil) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := Comm(pid, 0); got != "sleep" {
		t.Errorf("Comm = %q, want sleep", got)
	}
	if got := Comm(pid, pid); got != "sleep" {
		t.Errorf("Comm of the main thread = %q, want sleep", got)
	}
	if got := Exe(pid); got != bin {
		t.Errorf("Exe = %q, want %q", got, bin)
	}
	if got, want := Args(Root, pid), []string{bin, "30", "1s"}; !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
	if got, want := Cmdline(Root, pid), bin+" 30 1s"; got != want {
		t.Errorf("Cmdline = %q, want %q", got, want)
	}
	if !HasTask(pid, pid) || HasTask(pid, 0) {
		t.Errorf("HasTask(%d, %d) = %v, HasTask(%d, 0) = %v", pid, pid, HasTask(pid, pid), pid, HasTask(pid, 0))
	}
	cmd.Process.Kill()
	cmd.Wait()
	if Comm(pid, 0) != "" || Exe(pid) != "" || Args(Root, pid) != nil || HasTask(pid, pid) {
		t.Errorf("a reaped process still reads: %q %q %q %v", Comm(pid, 0), Exe(pid), Args(Root, pid), HasTask(pid, pid))
	}
}
