package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestTopPlain reads the plain (non-terminal) top output, on every Ruby: the workload's
// hot method must lead the table, and SIGINT ends top leaving the target
// running.
func TestTopPlain(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) { topPlain(t, rb) })
	}
}

// topPlain runs top on the split workload of rb until a screen of enough
// samples to show the split (on a busy machine the first seconds may hold
// few: the workload waits for a CPU).
func topPlain(t *testing.T, rb testruby.Ruby) {
	p, _ := startSplit(t, rb, nil, "60")
	cmd := exec.Command(rbscopeBin, "top", "-p", fmt.Sprint(p.PID()), "--rate", "200")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var screen []string
	deadline := time.After(60 * time.Second)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	samples := regexp.MustCompile(`: (\d+) samples,`)
collect:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break collect
			}
			if !strings.HasPrefix(l, "----") {
				screen = append(screen, l)
				continue
			}
			if m := samples.FindStringSubmatch(strings.Join(screen, "\n")); m != nil {
				if n, _ := strconv.Atoi(m[1]); n >= 30 {
					break collect
				}
			}
			screen = nil // too few samples yet: the next screen
		case <-deadline:
			t.Fatalf("no screen of 30 samples from top within 60s; the last:\n%s", strings.Join(screen, "\n"))
		}
	}
	text := strings.Join(screen, "\n")
	if len(screen) < 4 || !strings.Contains(screen[3], "burn (") || !strings.Contains(text, "chain_a (") {
		t.Errorf("top's first screen does not lead with burn:\n%s", text)
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for range lines {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Errorf("top after SIGINT: %v", err)
	}
	checkNotStopped(t, p.PID())
}

// TestTopTerminal drives top in a real terminal (tmux): it draws on the
// alternate screen, q quits, and the shell's screen comes back.
func TestTopTerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		testruby.Missing(t, "tmux not installed (make deps installs it)")
	}
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "60")
	session := fmt.Sprintf("rbscope-top-%d", p.PID())
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "30", "sh", "-c", fmt.Sprintf("echo BEFORE-TOP; %s top -p %d; echo TOP-EXIT=$?; sleep 30", rbscopeBin, p.PID()))
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	// waitScreen returns the pane once it shows want, or after 5 s.
	waitScreen := func(want string) string {
		var screen string
		for i := 0; i < 50 && !strings.Contains(screen, want); i++ {
			time.Sleep(100 * time.Millisecond)
			screen = tmux("capture-pane", "-p", "-t", session)
		}
		return screen
	}
	screen := waitScreen("burn (")
	if !strings.Contains(screen, "burn (") || !strings.Contains(screen, "q to quit") || strings.Contains(screen, "BEFORE-TOP") {
		t.Fatalf("top screen:\n%s", screen)
	}
	tmux("send-keys", "-t", session, "q")
	screen = waitScreen("TOP-EXIT=")
	if !strings.Contains(screen, "TOP-EXIT=0") || !strings.Contains(screen, "BEFORE-TOP") || strings.Contains(screen, "burn (") {
		t.Errorf("after q the shell screen should be back with top's exit 0:\n%s", screen)
	}
	// --duration ends top by itself, and its last table stays on the
	// shell's screen, line under line (the terminal out of raw mode).
	exec.Command("tmux", "kill-session", "-t", session).Run()
	tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "30", "sh", "-c", fmt.Sprintf("echo BEFORE-TOP; %s top -p %d --duration 3; echo TOP-EXIT=$?; sleep 30", rbscopeBin, p.PID()))
	screen = ""
	for i := 0; i < 10 && !strings.Contains(screen, "TOP-EXIT="); i++ {
		screen = waitScreen("TOP-EXIT=")
	}
	if !strings.Contains(screen, "TOP-EXIT=0") || !strings.Contains(screen, "BEFORE-TOP") || !regexpLine(screen, `^rbscope top: pid \d+`) || !regexpLine(screen, `^ *[\d.]+% .*burn \(`) {
		t.Errorf("after --duration the shell screen should be back with top's last table and exit 0:\n%s", screen)
	}
}
