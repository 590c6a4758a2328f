package rubyvm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// openCore reads a core file's Ruby threads.
func openCore(t *testing.T, path string) (*target.Core, *rubyvm.VM, []rubyvm.Thread) {
	t.Helper()
	c, err := target.OpenCore(path, target.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	vm, err := rubyvm.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	threads, err := vm.Threads()
	if err != nil {
		t.Fatal(err)
	}
	return c, vm, threads
}

// TestCoreStacksMatchCallerLocations takes a core of a running program with
// gdb's gcore, kills the program and compares every thread's stack read
// from the core with the caller_locations the thread took, for every Ruby
// installed.
func TestCoreStacksMatchCallerLocations(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
			var rep selfReport
			p.WaitReport(t, &rep, 30*time.Second)
			testvm.AttachAsleep(t, p.PID(), true) // until the main thread sleeps
			var c *target.Core
			var vm *rubyvm.VM
			var threads []rubyvm.Thread
			for try := 1; ; try++ {
				core := testruby.Gcore(t, p.PID())
				c, vm, threads = openCore(t, core)
				if runningAgree(&rep, threads) || try == 5 {
					break
				}
				t.Logf("core %d caught a running thread between two lines: taking another", try)
				os.Remove(core)
			}
			_ = p.Cmd.Process.Kill()
			_ = p.Cmd.Wait()

			if c.PID() != rep.PID {
				t.Errorf("core pid %d, the program's %d", c.PID(), rep.PID)
			}
			checkStacks(t, rb, &rep, vm, threads, false)
			census, err := vm.HeapCensus()
			if err != nil {
				t.Fatalf("heap census of the core: %v", err)
			}
			if census.Objects < 1000 || census.SkippedPages > 0 {
				t.Errorf("census of the core: %d objects, %d pages skipped", census.Objects, census.SkippedPages)
			}
		})
	}
}

// runningAgree reports whether the running threads (the cruncher, caught
// at any point of its loop) show the stack their report predicts, as
// checkStacks judges it; a core where they do not is taken again. Threads are matched by name, not TID: under M:N threads a
// Ruby thread's TID is that of whichever native thread it last ran on.
func runningAgree(rep *selfReport, threads []rubyvm.Thread) bool {
	for _, want := range rep.Threads {
		for _, got := range threads {
			if got.Status != "run" || got.Main != want.Main || (want.Name != nil && got.Name != *want.Name) {
				continue
			}
			if compareFrames(rep.Version, got.Frames, append(want.Top, want.Frames...)) == "" {
				continue
			}
			if compareBetween(rep.Version, got.Frames, want) == "" {
				continue
			}
			return false
		}
	}
	return true
}

// TestKernelCoreStacks lets a Ruby program crash itself (SIGSEGV, after
// which Ruby's crash report aborts) so that the kernel writes its core, and
// compares the stacks read from the core with the caller_locations the
// program took on the crashing line, for every Ruby installed. Half of the
// core must read without a panic, reported as truncated.
func TestKernelCoreStacks(t *testing.T) {
	dir := t.TempDir()
	pattern := filepath.Join(dir, "core.%p")
	testruby.SetCorePattern(t, pattern)
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "core_crash.rb", nil)
			done := make(chan error, 1)
			go func() { done <- p.Cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the program did not crash within 2 minutes:\n%s", p.Output())
			}
			if now, _ := os.ReadFile(testruby.CorePatternPath); strings.TrimSpace(string(now)) != pattern {
				t.Skipf("another process changed core_pattern meanwhile (to %q)", now)
			}
			ws, _ := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.CoreDump() {
				t.Fatalf("the program ended (%v) without a core dump:\n%s", p.Cmd.ProcessState, p.Output())
			}
			var rep selfReport
			p.WaitReport(t, &rep, time.Second)
			core := filepath.Join(dir, fmt.Sprintf("core.%d", p.PID()))
			t.Cleanup(func() { os.Remove(core) })

			c, vm, threads := openCore(t, core)
			if sig, tid := c.Signal(); (sig != int(syscall.SIGABRT) && sig != int(syscall.SIGSEGV)) || tid != rep.PID {
				t.Errorf("core says signal %d in tid %d, want SIGABRT or SIGSEGV in %d", sig, tid, rep.PID)
			}
			if regs, err := c.Registers(rep.PID); err != nil || regs.SP() == 0 || regs.PC() == 0 {
				t.Errorf("main thread's registers: %+v (%v)", regs, err)
			}
			checkStacks(t, rb, &rep, vm, threads, false)
			t.Run("core-only", func(t *testing.T) {
				// A kernel core holds only the first page of each
				// file: no dynamic symbols, so the VM is found by
				// scanning the image's data.
				rep := rep
				checkCoreOnly(t, core, &rep)
			})

			half := filepath.Join(t.TempDir(), "half")
			testruby.CopyPrefix(t, core, half, testruby.Half)
			readTruncated(t, half)
		})
	}
}

// readTruncated reads a cut core as far as it goes: every failure must name
// the truncation, and nothing may panic.
func readTruncated(t *testing.T, path string) {
	t.Helper()
	c, err := target.OpenCore(path, target.CoreOptions{})
	if err != nil {
		if !errors.Is(err, target.ErrTruncated) {
			t.Errorf("opening a cut core: %v, want an error naming the truncation", err)
		}
		t.Logf("cut core: %v", err)
		return
	}
	defer c.Close()
	if c.Truncated() == "" {
		t.Error("a cut core is not reported truncated")
	}
	vm, err := rubyvm.Open(c)
	if err != nil {
		// A failed read names the truncation, but a search that tries
		// candidates (the VM pointer of a stripped Ruby) says only that
		// none fit: Truncated, checked above, is what a caller shows then.
		t.Logf("cut core: %v", err)
		return
	}
	defer vm.Close()
	threads, err := vm.Threads()
	t.Logf("cut core: %d threads, error %v", len(threads), err)
	for _, th := range threads {
		if th.Error != "" {
			t.Logf("cut core: thread %q: %s", th.Name, th.Error)
		}
	}
}
