package threads

import (
	"bufio"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestReadJoinsKernelAndRuby: every native thread of a Ruby program is a
// row; the program's named Ruby threads are joined to theirs (name, status,
// main), a thread that burns CPU shows it, and paused rows carry a stack
// and a largest native frame.
func TestReadJoinsKernelAndRuby(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", `
t1 = Thread.new { Thread.current.name = "spinner"; x = 0; loop { x += 1 } }
t2 = Thread.new { Thread.current.name = "sleeper"; sleep }
sleep 0.1 until t2.status == "sleep"
$stdout.puts :ready; $stdout.flush
sleep`)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	tg, vm := testvm.Attach(t, cmd.Process.Pid)
	rows, err := Read(context.Background(), tg, vm, time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Row{}
	for _, r := range rows {
		if r.Ruby != nil {
			byName[r.Ruby.Name] = r
			if r.Ruby.Main {
				byName["main"] = r
			}
		}
		if r.StackBytes == nil || r.LargestFrame == nil {
			t.Errorf("thread %d: stack %v, largest frame %v (paused: both known)", r.TID, r.StackBytes, r.LargestFrame)
		}
	}
	main, spin, sleeper := byName["main"], byName["spinner"], byName["sleeper"]
	if main.TID != cmd.Process.Pid || spin.Kind != "ruby" || sleeper.Ruby == nil || sleeper.Ruby.Status != "sleep" {
		t.Fatalf("rows %+v", rows)
	}
	// The spinner is measured over the interval by the kernel: some CPU,
	// whatever else the machine runs; the sleeper none to speak of.
	if spin.CPUPercent <= 0 || sleeper.CPUPercent > spin.CPUPercent {
		t.Errorf("CPU: spinner %.1f%%, sleeper %.1f%%", spin.CPUPercent, sleeper.CPUPercent)
	}
	if len(rows) < 3 {
		t.Errorf("%d rows", len(rows))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, tg, vm, time.Second, true); err == nil {
		t.Error("Read on an ended context did not say so")
	}
}
