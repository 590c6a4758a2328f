package target

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBorrowHoldsOffOOM: while a thread of the target is borrowed,
// rbscope's own oom_score_adj is -1000 (the OOM killer must not end it
// in the middle of an injected call, which would crash the target), and
// it is put back afterwards. Where rbscope may not lower it (no
// CAP_SYS_RESOURCE) the test uses a plain file in its place.
func TestBorrowHoldsOffOOM(t *testing.T) {
	read := func() string {
		b, err := os.ReadFile(oomScoreAdjPath)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	orig := read()
	if err := os.WriteFile(oomScoreAdjPath, []byte("-1000"), 0); err != nil {
		t.Logf("cannot lower oom_score_adj here (%v): a plain file stands in", err)
		oomScoreAdjPath = t.TempDir() + "/oom_score_adj"
		defer func() { oomScoreAdjPath = "/proc/self/oom_score_adj" }()
		orig = "0"
	}
	if err := os.WriteFile(oomScoreAdjPath, []byte("17"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(oomScoreAdjPath, []byte(orig), 0)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(50 * time.Millisecond)
	pid := cmd.Process.Pid
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var during string
	err = l.WhilePaused([]int{pid}, func(s *Stopped) error {
		return s.borrow(pid, func(*unix.PtraceRegs) error { during = read(); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if during != "-1000" {
		t.Errorf("oom_score_adj while borrowing = %s, want -1000", during)
	}
	if after := read(); after != "17" {
		t.Errorf("oom_score_adj after borrowing = %s, want 17 back", after)
	}
}

// TestOOMHoldOverlapping: two borrows that overlap (two targets, one
// tracer thread each) keep oom_score_adj at -1000 until the last one ends;
// the first to end used to put the old value back under the second.
func TestOOMHoldOverlapping(t *testing.T) {
	path := t.TempDir() + "/oom_score_adj"
	saved := oomScoreAdjPath
	oomScoreAdjPath = path
	defer func() { oomScoreAdjPath = saved }()
	if err := os.WriteFile(path, []byte("17"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func() string { b, _ := os.ReadFile(path); return strings.TrimSpace(string(b)) }
	first := holdOffOOM()
	second := holdOffOOM()
	first()
	if got := read(); got != "-1000" {
		t.Errorf("after the first of two overlapping borrows ended: %s, want -1000", got)
	}
	second()
	if got := read(); got != "17" {
		t.Errorf("after both ended: %s, want 17", got)
	}
}
