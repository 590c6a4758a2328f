package threads

import (
	"bufio"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestFollowBirthAndDeath: Ruby threads the program starts and ends are
// reported born (with their name and the line that made them) and exited.
// The program makes one every 0.3 s, so some are born after Follow's first
// look however late it comes.
func TestFollowBirthAndDeath(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", `
$stdout.puts :ready; $stdout.flush
loop { Thread.new { Thread.current.name = "short-lived"; sleep 0.1 }.join; sleep 0.2 }`)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	l, vm := testvm.Attach(t, cmd.Process.Pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	native, _, _ := Watch(ctx, cmd.Process.Pid, false)
	events := make(chan Event, 64)
	go Follow(ctx, cmd.Process.Pid, stacks.NewReader(l, vm, stacks.ReaderOptions{}), native, func(ev Event) { events <- ev })
	var born, exited bool
	bornTID := 0
	for deadline := time.After(30 * time.Second); !(born && exited); {
		select {
		case ev := <-events:
			if ev.Name != "short-lived" {
				continue
			}
			switch {
			case ev.Event == "born" && !born:
				born, bornTID = true, ev.TID
				if ev.Creator == "" {
					t.Errorf("born without the line that made it: %+v", ev)
				}
			case ev.Event == "exited" && born && ev.TID == bornTID:
				exited = true
			}
		case <-deadline:
			t.Fatalf("born %v, exited %v within 30 s", born, exited)
		}
	}
}
