package rubyvm_test

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyexec"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// cBacktrace is the return addresses of the C-level backtrace in Ruby's
// crash report ([BUG]), innermost first.
var cBacktraceLine = regexp.MustCompile(`\[0x([0-9a-f]+)\]\s*$`)

func cBacktrace(output string) []uint64 {
	_, after, ok := strings.Cut(output, "-- C level backtrace information")
	if !ok {
		return nil
	}
	var out []uint64
	for _, line := range strings.Split(after, "\n")[1:] {
		m := cBacktraceLine.FindStringSubmatch(line)
		if m == nil {
			break
		}
		a, _ := strconv.ParseUint(m[1], 16, 64)
		out = append(out, a)
	}
	return out
}

// TestArm64CoreStacks lets testdata/core_crash.rb crash itself on Debian's
// arm64 Ruby under qemu-aarch64-static and reads the aarch64 core qemu
// writes, on this x86_64 machine: every thread's Ruby stack, name, TID and
// status must be what the program reported just before; the crashing
// thread's native stack, unwound with the arm64 CFI of its libraries
// through the SIGSEGV handler's signal frame, must hold the return
// addresses Ruby's own crash report printed (its C-level backtrace), in
// order, from the handler down to _start; and the heap census must read
// every page.
func TestArm64CoreStacks(t *testing.T) {
	rb := testruby.Arm64(t)
	var rep selfReport
	core, output := testruby.EmulatedCore(t, rb, "core_crash.rb", &rep, nil)
	// Without the sysroot the libraries the dynamic linker loaded, by
	// the arm64 system's paths, are not here: refused, naming --sysroot.
	if c, err := target.OpenCore(core, target.CoreOptions{}); err == nil || !strings.Contains(err.Error(), "--sysroot") {
		t.Errorf("the core opened without its sysroot: %v, want an error naming --sysroot", err)
		if c != nil {
			c.Close()
		}
	}
	c, vm := testvm.OpenArm64Core(t, rb.Sysroot, core)
	if sig, tid := c.Signal(); sig != int(syscall.SIGABRT) || tid != rep.PID {
		t.Errorf("core says signal %d in tid %d, want SIGABRT (Ruby's [BUG] handler aborts) in %d", sig, tid, rep.PID)
	}
	threads, err := vm.Threads()
	if err != nil {
		t.Fatal(err)
	}
	checkStacks(t, rb, &rep, vm, threads, false)

	captured, err := stacks.Capture(c, vm, stacks.Options{Native: true})
	if err != nil {
		t.Fatal(err)
	}
	want := cBacktrace(output)
	if len(want) < 10 {
		t.Fatalf("Ruby's crash report has %d C-level frames:\n%s", len(want), output)
	}
	// The first frames Ruby printed were those of its report's own
	// calls; from the signal handler's on, the core holds the same.
	want = want[2:]
	for _, th := range captured {
		if th.TID != rep.PID {
			if th.Ruby && th.NativeError != "" {
				t.Errorf("thread %d (%s): native stack: %s", th.TID, th.Name, th.NativeError)
			}
			continue
		}
		var pcs []uint64
		for _, f := range th.NativeFrames() {
			pcs = append(pcs, f.PC)
		}
		start := -1
		for i, pc := range pcs {
			if pc == want[0] {
				start = i
			}
		}
		if start < 0 || len(pcs)-start < len(want) {
			t.Fatalf("main thread's native pcs %x do not hold Ruby's C backtrace %x (from %d)", pcs, want, start)
		}
		for i, a := range want {
			if pcs[start+i] != a {
				t.Errorf("native frame %d: pc %#x, Ruby's backtrace says %#x", start+i, pcs[start+i], a)
			}
		}
		if th.NativeError != "" {
			t.Errorf("main thread's native stack ends early: %s", th.NativeError)
		}
		if f := th.NativeFrames()[start+1]; f.Signal == nil || f.Signal.Number != int(syscall.SIGSEGV) {
			t.Errorf("the frame under the handler's is no SIGSEGV signal frame: %+v", f)
		}
		t.Logf("main thread: %d native frames, the %d of Ruby's C backtrace among them", len(pcs), len(want))
	}

	census, err := vm.HeapCensus()
	if err != nil {
		t.Fatal(err)
	}
	if census.Objects < 1000 || census.SkippedPages > 0 {
		t.Errorf("census of the core: %d objects, %d pages skipped", census.Objects, census.SkippedPages)
	}
}

// TestArm64Live reads Debian's arm64 Ruby running under
// qemu-aarch64-static, as it reads any process: the process is the
// emulator, whose memory holds the guest's at the guest's addresses and
// whose /proc maps list the guest's files. Every thread's stack, name,
// TID and status must equal what testdata/stack_threads.rb reported, and
// a census of testdata/heap_census.rb's heap what it counted. (The
// threads' registers are the emulator's own, of x86_64 code: native
// stacks are not read here.)
func TestArm64Live(t *testing.T) {
	rb := testruby.Arm64(t)
	t.Run("stacks", func(t *testing.T) {
		p := testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
		var rep selfReport
		p.WaitReport(t, &rep, 2*time.Minute)
		vm, threads := testvm.AttachAsleep(t, p.PID(), true)
		for i := 0; i < 20 && !runningAgree(&rep, threads); i++ {
			vm, threads = testvm.AttachAsleep(t, p.PID(), true)
		}
		if vm.Layout.Source != "table" {
			t.Errorf("layout from %s, want the built-in aarch64 table", vm.Layout.Source)
		}
		checkStacks(t, rb, &rep, vm, threads, false)
		// Running code in it is refused before anything is done: the
		// threads rbscope would borrow are the emulator's.
		if _, err := rubyexec.Run(vm.T.(*target.Live), vm, "1 + 1", rubyexec.Options{}); !errors.Is(err, rubyexec.ErrEmulated) {
			t.Errorf("exec in the emulated process: %v, want ErrEmulated", err)
		}
		// Native stacks are refused, thread by thread, not read from
		// the emulator's registers.
		captured, err := stacks.Capture(vm.T, vm, stacks.Options{Native: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range captured {
			if len(th.NativeFrames()) > 0 || !strings.Contains(th.NativeError, "emulator") {
				t.Errorf("thread %d: %d native frames, error %q; want none, said to be the emulator's", th.TID, len(th.NativeFrames()), th.NativeError)
			}
		}
	})
	t.Run("census", func(t *testing.T) {
		p := testruby.Start(t, rb, "heap_census.rb", nil)
		var rep heapReport
		p.WaitReport(t, &rep, 2*time.Minute)
		vm, _ := testvm.AttachAsleep(t, p.PID(), true)
		var c *rubyvm.Census
		if err := testvm.Paused(t, vm, func() (err error) { c, err = vm.HeapCensus(); return err }); err != nil {
			t.Fatal(err)
		}
		checkCensus(t, vm, c, &rep)
	})
}

// TestArm64CoreCensus lets testdata/heap_census.rb build its heap on
// Debian's arm64 Ruby under qemu-aarch64-static, waits until it sleeps
// with the heap as it counted it, and kills it with SIGABRT, for which
// qemu writes the guest's aarch64 core: the census of the core must equal
// what the program counted.
func TestArm64CoreCensus(t *testing.T) {
	rb := testruby.Arm64(t)
	var rep heapReport
	core, _ := testruby.EmulatedCore(t, rb, "heap_census.rb", &rep, func(pid int, _ string) {
		testvm.AttachAsleep(t, pid, true) // until the main thread sleeps: the heap is as counted
		if err := syscall.Kill(pid, syscall.SIGABRT); err != nil {
			t.Fatal(err)
		}
	})
	_, vm := testvm.OpenArm64Core(t, rb.Sysroot, core)
	c, err := vm.HeapCensus()
	if err != nil {
		t.Fatal(err)
	}
	checkCensus(t, vm, c, &rep)
}
