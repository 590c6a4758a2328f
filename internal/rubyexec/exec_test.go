package rubyexec_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/alloctrace"
	"github.com/rbscope/rbscope/internal/rubyexec"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
	"golang.org/x/sys/unix"
)

// start runs testdata/exec_target.rb in mode and opens its VM.
func start(t *testing.T, rb testruby.Ruby, mode string) (*testruby.Process, *target.Live, *rubyvm.VM) {
	t.Helper()
	p := testruby.Start(t, rb, "exec_target.rb", nil, mode)
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 30*time.Second)
	tg, vm := testvm.Attach(t, p.PID())
	return p, tg, vm
}

func run(t *testing.T, tg *target.Live, vm *rubyvm.VM, code string) *rubyexec.Result {
	t.Helper()
	res, err := rubyexec.Run(tg, vm, code, rubyexec.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", code, err)
	}
	return res
}

func progress(t *testing.T, tg *target.Live, vm *rubyvm.VM) int {
	t.Helper()
	res := run(t, tg, vm, "$progress")
	if res.Raised != nil {
		t.Fatalf("$progress raised %v", res.Raised)
	}
	n, err := strconv.Atoi(res.Value)
	if err != nil {
		t.Fatalf("$progress = %q", res.Value)
	}
	return n
}

// TestExec runs code in processes that sleep, block on IO, compute and run
// many threads, and checks the answers against what the programs know, and
// that they go on working (they check their own results and die on a wrong
// one) with their state visible to the next exec.
func TestExec(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		for _, mode := range []string{"sleep", "io", "cpu", "threads"} {
			t.Run(rb.Name+"/"+mode, func(t *testing.T) {
				p, tg, vm := start(t, rb, mode)
				if vm.Layout.JobsOnStaleEC == 1 {
					_, err := rubyexec.Run(tg, vm, "1", rubyexec.Options{Timeout: time.Second})
					if !errors.Is(err, rubyexec.ErrJobsUnsafe) {
						t.Fatalf("Ruby %s: got %v, want the refusal %v", vm.Version, err, rubyexec.ErrJobsUnsafe)
					}
					return
				}
				res := run(t, tg, vm, "require \"set\"; Mutex.new.synchronize { [$answer + 1, top_local, self.to_s, Thread.current.name] }")
				if want := `[43, "visible", "main", "rbscope-exec"]`; res.Value != want || res.Raised != nil {
					t.Fatalf("got %q (raised %v), want %s", res.Value, res.Raised, want)
				}
				// Locals of one exec do not leak into the next.
				run(t, tg, vm, "leak = 1")
				if res := run(t, tg, vm, "defined?(leak).inspect"); res.Value != `"nil"` {
					t.Errorf("a local of an earlier exec is visible: defined?(leak) = %s", res.Value)
				}
				// Exceptions come back, and do not reach the program.
				res = run(t, tg, vm, "def rbscope_boom; raise(ArgumentError, \"boom\\nline\"); end\nrbscope_boom")
				if res.Raised == nil || res.Raised.Class != "ArgumentError" || res.Raised.Message != "boom\nline" {
					t.Fatalf("raise: got %+v %+v", res, res.Raised)
				}
				if len(res.Raised.Backtrace) == 0 || !strings.HasPrefix(res.Raised.Backtrace[0], "(rbscope exec):1:in") {
					t.Errorf("backtrace %q does not start in the code", res.Raised.Backtrace)
				}
				res = run(t, tg, vm, "1 +* 2)")
				if res.Raised == nil || res.Raised.Class != "SyntaxError" || !strings.Contains(res.Raised.Message, "(rbscope exec):1") {
					t.Fatalf("syntax error: got %+v %+v", res, res.Raised)
				}
				before := progress(t, tg, vm)
				deadline := time.Now().Add(10 * time.Second)
				for progress(t, tg, vm) <= before+2 {
					if time.Now().After(deadline) {
						t.Fatalf("the program made no progress after the execs; output:\n%s", p.Output())
					}
					time.Sleep(100 * time.Millisecond)
				}
				if p.Cmd.ProcessState != nil || strings.Contains(p.Output(), "corrupted") || strings.Contains(p.Output(), "Error") {
					t.Fatalf("the program failed; output:\n%s", p.Output())
				}
			})
		}
	}
}

// TestExecNoSafePoint: a thread holds the GVL in C for 4 s, so the code
// cannot start; exec gives up at its timeout, the program runs on, and the
// emptied request does nothing when it finally runs.
func TestExecNoSafePoint(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			if testruby.Older(rb, 3, 0) {
				t.Skip("Fiddle before Ruby 3.0 always releases the GVL (no need_gvl:): no C call here can hold it")
			}
			p, tg, vm := start(t, rb, "gvl")
			time.Sleep(300 * time.Millisecond) // the thread is in usleep now
			begun := time.Now()
			_, err := rubyexec.Run(tg, vm, "$progress = -1000", rubyexec.Options{Timeout: time.Second})
			if !errors.Is(err, rubyexec.ErrNoSafePoint) {
				t.Fatalf("got %v, want %v", err, rubyexec.ErrNoSafePoint)
			}
			if d := time.Since(begun); d > 3*time.Second {
				t.Errorf("gave up after %v, want about 1s", d)
			}
			if n := progress(t, tg, vm); n < 0 {
				t.Fatalf("the request that timed out ran later: $progress = %d", n)
			}
			if p.Cmd.ProcessState != nil {
				t.Fatalf("the program died; output:\n%s", p.Output())
			}
		})
	}
}

// TestExecStillRunning: code that outlives the timeout is reported as
// running, not as unreached.
func TestExecStillRunning(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	_, tg, vm := start(t, rb, "sleep")
	_, err := rubyexec.Run(tg, vm, "sleep 2; :done", rubyexec.Options{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, rubyexec.ErrStillRunning) {
		t.Fatalf("got %v, want %v", err, rubyexec.ErrStillRunning)
	}
	time.Sleep(2 * time.Second)
	if res := run(t, tg, vm, ":again"); res.Value != ":again" {
		t.Fatalf("after a timed-out run: %q", res.Value)
	}
}

// TestDiscardKeepsReusedNumber: when the program has closed the answer
// pipe's write end and its number now names another file, Discard leaves
// that file open; it closes the number only while it is the pipe.
func TestDiscardKeepsReusedNumber(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, tg, vm := start(t, rb, "sleep")
	// Discard closes from outside; CloseProgram is the Ruby that alloc's
	// watchdog and fork hook run inside (and that guards every answer).
	// Each closer fails the subtest it runs in (t), not this one.
	closers := map[string]func(*testing.T, *rubyexec.Exchange){
		"Discard": func(_ *testing.T, ex *rubyexec.Exchange) { ex.Discard() },
		"CloseProgram": func(t *testing.T, ex *rubyexec.Exchange) {
			defer ex.Close()
			if _, err := rubyexec.Run(tg, vm, ex.CloseProgram()+"; nil", rubyexec.Options{Timeout: 20 * time.Second}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, closeIt := range closers {
		for _, reuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reused=%v", name, reuse), func(t *testing.T) { closeOnlyPipe(t, tg, p.PID(), reuse, closeIt) })
		}
	}
}

// closeOnlyPipe makes an exchange in pid, has the program put another file
// under its write end's number when reuse is set, and checks that closeIt
// closes the number only while it is the pipe.
func closeOnlyPipe(t *testing.T, tg *target.Live, pid int, reuse bool, closeIt func(*testing.T, *rubyexec.Exchange)) {
	linkOf := func(fd int) string {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		return l
	}
	ex, err := rubyexec.NewExchange(tg)
	if err != nil {
		t.Fatal(err)
	}
	w := ex.FD()
	if !strings.HasPrefix(linkOf(w), "pipe:") {
		t.Fatalf("setup: fd %d of the program is %q, not the pipe", w, linkOf(w))
	}
	if reuse {
		// The program's own doing, as rbscope sees it: its stdin
		// duplicated onto the number (dup3 closes the pipe first).
		err := tg.WhilePaused([]int{pid}, func(s *target.Stopped) error {
			_, err := s.Syscall(pid, unix.SYS_DUP3, 0, uint64(w), 0) // dup2 is dup3 without flags
			return err
		})
		if err != nil || strings.HasPrefix(linkOf(w), "pipe:") {
			t.Fatalf("setup: dup2 onto fd %d: %v, it is %q", w, err, linkOf(w))
		}
	}
	before := linkOf(w)
	closeIt(t, ex)
	switch after := linkOf(w); {
	case reuse && after != before:
		t.Errorf("fd %d (%q), which the program had reused, was closed", w, before)
	case !reuse && after != "":
		t.Errorf("the pipe's write end was left open as fd %d (%q)", w, after)
	}
}

// TestExecLeavesCHLDTrap: a program that traps SIGCHLD itself is never
// sent one. Busy, it runs the code at its next safe point; asleep, exec
// gives up at its timeout saying why. Its trap never runs.
func TestExecLeavesCHLDTrap(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		if testruby.Older(rb, 3, 0) {
			continue // exec is refused on 2.7
		}
		t.Run(rb.Name, func(t *testing.T) {
			for _, mode := range []string{"cpu", "sleep"} {
				p := testruby.Start(t, rb, "exec_chld.rb", nil, mode)
				var rep struct{ PID int }
				p.WaitReport(t, &rep, 30*time.Second)
				tg, vm := testvm.Attach(t, p.PID())
				trapped, ok := vm.TrapsSignal(int(unix.SIGCHLD))
				if !ok {
					// A release newer than those rbscope has the facts
					// of, read with the newest's layout: not trusted for
					// this (TrapsSignal).
					t.Skipf("%s: the trap list is not known exactly on Ruby %s (layout %s, checked on %s)", mode, vm.Version, vm.Layout.Source, vm.Layout.Checked)
				}
				if !trapped {
					t.Fatalf("%s: rbscope does not see the program's CHLD trap", mode)
				}
				res, err := rubyexec.Run(tg, vm, "6 * 7", rubyexec.Options{Timeout: 2 * time.Second})
				switch mode {
				case "cpu":
					if err != nil || res.Value != "42" {
						t.Errorf("busy: %v, %+v; want 42", err, res)
					}
				case "sleep":
					if !errors.Is(err, rubyexec.ErrNoSafePoint) || !strings.Contains(err.Error(), "traps SIGCHLD") {
						t.Errorf("asleep: %v; want no safe point, saying the program traps SIGCHLD", err)
					}
				}
				if b, err := os.ReadFile(p.Report + ".chld"); err == nil {
					t.Errorf("%s: the program's CHLD trap ran: %s", mode, b)
				}
			}
		})
	}
}

// TestExecInShadowingScope runs code, and an allocation window, while the
// main thread waits inside a module whose constants shadow every core
// constant rbscope's own code names (Thread, IO, Encoding, Exception,
// TOPLEVEL_BINDING...): Ruby resolves a postponed job's constants in the
// interrupted frame's lexical scope, as a Rails app's ActiveSupport::JSON
// has an Encoding of its own.
func TestExecInShadowingScope(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p, tg, vm := start(t, rb, "shadow")
			if vm.Layout.JobsOnStaleEC == 1 {
				return // 2.7: exec is refused (TestExec checks the refusal)
			}
			res := run(t, tg, vm, "[Encoding::UTF_8.to_s, Thread.current.name, IO.name]")
			if want := `["UTF-8", "rbscope-exec", "IO"]`; res.Value != want || res.Raised != nil {
				t.Fatalf("got %q (raised %v), want %s", res.Value, res.Raised, want)
			}
			res = run(t, tg, vm, "raise IOError, 'boom'")
			if res.Raised == nil || res.Raised.Class != "IOError" {
				t.Fatalf("raise: got %+v %+v", res, res.Raised)
			}
			s, err := alloctrace.Start(tg, vm, 200*time.Millisecond, 20*time.Second, true)
			if err != nil {
				t.Fatalf("alloc start: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			if _, err := s.Stop(); err != nil {
				t.Fatalf("alloc stop: %v", err)
			}
			before := progress(t, tg, vm)
			for deadline := time.Now().Add(10 * time.Second); progress(t, tg, vm) <= before; {
				if time.Now().After(deadline) {
					t.Fatalf("the program made no progress after the execs; output:\n%s", p.Output())
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
