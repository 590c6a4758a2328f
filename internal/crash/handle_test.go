package crash

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestHandleReadDeadline: a read of the dying process that never returns
// (a process can make its memory block a reader) must not hold the handler
// past its timeout: the report is written, saying what was not read.
func TestHandleReadDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	readRubyState = func(int) (*crashreport.Ruby, []string) { <-block; return nil, nil }
	defer func() { readRubyState = readRuby }()
	store := filepath.Join(t.TempDir(), "s")
	cfg := &Config{Dir: store, Timeout: 2 * time.Second}
	cfg.Defaults()
	cfg.KeepFreeBytes = 1
	pid := testruby.NoSuchPID()
	start := time.Now()
	done := make(chan *crashreport.Report, 1)
	go func() {
		r, err := Handle(cfg, Args{PID: pid, TID: pid, Signal: 11, Time: time.Now()}, strings.NewReader("not a core"))
		if err != nil {
			t.Errorf("Handle: %v", err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		// Not blocked for ever: a busy second core may slow the rest.
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("the handler took %v with a timeout of 2s", took)
		}
		if r == nil {
			t.Fatal("Handle returned no report and no error")
		}
		if !strings.Contains(strings.Join(r.Problems, "\n"), "ruby: the handler's time ran out") {
			t.Errorf("the report does not say the Ruby read was cut short: %q", r.Problems)
		}
		if _, err := os.Stat(filepath.Join(store, r.ID, "report.json")); err != nil {
			t.Errorf("no report written: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler blocked on a read past its timeout")
	}
}

// TestWithinSurvivesPanic: a part of the report that panics costs only
// that part: within reports it unread and says why, and the handler goes on.
func TestWithinSurvivesPanic(t *testing.T) {
	var problems []string
	var got int
	if within(context.Background(), "ruby", &problems, func() { got = 1; panic("a bug") }) {
		t.Error("within reported a part that panicked as read")
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "ruby: not read") || !strings.Contains(problems[0], "a bug") {
		t.Errorf("problems = %q", problems)
	}
	if !within(context.Background(), "exe", &problems, func() { got = 2 }) || got != 2 {
		t.Error("within after a panic did not run the next part")
	}
}

// TestUIDIsTheRealOne: without the kernel's %u, the report's uid is the
// process's real uid (what %u gives), not the owner of /proc/PID, which is
// its effective uid.
func TestUIDIsTheRealOne(t *testing.T) {
	p := exec.Command("perl", "-e", `$< = 65534; $| = 1; print "ready\n"; sleep 30`)
	out, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Skipf("no perl to make a process whose real and effective uids differ: %v", err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("setup: %v", err)
	}
	st, err := os.Stat(fmt.Sprintf("/proc/%d", p.Process.Pid))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("setup: /proc/%d should be owned by the effective uid 0: %v", p.Process.Pid, err)
	}
	if got := (Args{PID: p.Process.Pid}).uid(); got != 65534 {
		t.Errorf("uid %d, want the real uid 65534", got)
	}
}

// TestKeepFrameBytes: a report's Ruby frames are cut at its byte budget,
// spent on the crashing thread first, and the cut is counted.
func TestKeepFrameBytes(t *testing.T) {
	frames := func(n int) []stacks.Frame {
		fs := make([]stacks.Frame, n)
		for i := range fs {
			fs[i] = stacks.Frame{Label: "m", Path: strings.Repeat("p", 1000)}
		}
		return fs
	}
	threads := []stacks.Thread{{TID: 1, Frames: frames(10)}, {TID: 2, Frames: frames(10)}}
	per := frameCost(threads[0].Frames[0])
	cut := keepFrameBytes(threads, 2, 15*per)
	if len(threads[1].Frames) != 10 || len(threads[0].Frames) != 5 || cut != 5 {
		t.Errorf("kept %d frames of the first thread and %d of the crashing one, cut %d; want 5, 10, 5", len(threads[0].Frames), len(threads[1].Frames), cut)
	}
	if cut := keepFrameBytes(threads, 2, 1<<30); cut != 0 {
		t.Errorf("cut %d frames within the budget", cut)
	}
}
