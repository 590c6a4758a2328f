package ebpfsample

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestSetKeepsProcessesApart: a Set samples two processes, each burning
// CPU in a method named after it, each with a program of its own. Each
// one's profiles hold its own method and never the other's; when one is
// killed, its last profile comes as done and the other goes on being
// sampled; at the end, the other's comes as done too, and Add takes no
// more.
func TestSetKeepsProcessesApart(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	pids, cmds := map[string]int{}, map[string]*exec.Cmd{}
	for _, name := range []string{"alpha", "beta"} {
		cmd := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("agent_work.rb"), name))
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			t.Fatalf("setup: %s did not start: %v", name, err)
		}
		pids[name], cmds[name] = cmd.Process.Pid, cmd
	}
	var mu sync.Mutex
	own := map[int]int{}     // samples holding the process's own method
	foreign := map[int]int{} // samples holding the other's
	done := map[int]bool{}
	set, err := NewSet(SetOptions{Rate: 200, FlushEvery: 300 * time.Millisecond,
		FlushProcess: func(pid int, cpu, _ *profile.Profile, last bool) {
			mu.Lock()
			defer mu.Unlock()
			if done[pid] {
				t.Errorf("pid %d flushed after its last profile", pid)
			}
			done[pid] = last
			for _, st := range cpu.Stacks {
				for _, id := range st.Frames {
					switch cpu.Frames[id].Label {
					case "Object#work_alpha":
						if pid == pids["alpha"] {
							own[pid] += st.Count
						} else {
							foreign[pid] += st.Count
						}
					case "Object#work_beta":
						if pid == pids["beta"] {
							own[pid] += st.Count
						} else {
							foreign[pid] += st.Count
						}
					}
				}
			}
		},
		Failed: func(pid int, err error) { t.Errorf("pid %d failed: %v", pid, err) },
	})
	if errors.Is(err, ErrNotAllowed) || errors.Is(err, ErrUnsupported) {
		t.Skipf("the BPF sampler cannot run here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if _, err := set.Add(pid); err != nil {
			t.Fatalf("adding %s: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); set.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not within 60 s (own samples %v, foreign %v, done %v)", what, own, foreign, done)
			}
		}
	}
	alpha, beta := pids["alpha"], pids["beta"]
	waitFor("50 samples of each process's own method", func() bool { return own[alpha] >= 50 && own[beta] >= 50 })

	cmds["beta"].Process.Kill()
	cmds["beta"].Wait()
	waitFor("beta's last profile", func() bool { return done[beta] })
	mu.Lock()
	alphaThen := own[alpha]
	mu.Unlock()
	waitFor("alpha sampled after beta's end", func() bool { return own[alpha] >= alphaThen+20 })
	cancel()
	<-ran
	if _, err := set.Add(alpha); !errors.Is(err, ErrEnded) {
		t.Errorf("Add after Run ended: %v, want ErrEnded", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !done[alpha] {
		t.Error("alpha's last profile did not come as done when Run ended")
	}
	for pid, n := range foreign {
		if n > 0 {
			t.Errorf("pid %d's profiles hold %d samples of the other process's method", pid, n)
		}
	}
	t.Logf("own samples: alpha %d, beta %d", own[alpha], own[beta])
}
