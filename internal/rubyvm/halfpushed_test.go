package rubyvm_test

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestStackAtEveryInstruction runs testdata/push_steps.rb one instruction
// at a time (ptrace's single step) and reads its stack after each: a
// sampler may catch a thread at any instruction, in the middle of pushing
// a control frame too. Every read must be the program's own stack
// (callee's caller_locations) cut at some depth: the loop's block, or one
// of the two calls it makes, innermost, each under its own label. No frame
// may be unreadable: on a Ruby that makes a new frame current before it
// fills it in (Layout.CFPPublishedFirst, 2.7), a frame caught half pushed
// that does not decode is left out. It steps until it has seen each call
// begin 5 times.
func TestStackAtEveryInstruction(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "push_steps.rb", nil)
			var rep struct {
				PID   int        `json:"pid"`
				Stack [][]string `json:"stack"`
			}
			p.WaitReport(t, &rep, 30*time.Second)
			version := testruby.Version(rb)
			// What rbscope prints (Ruby 3.4's labels on every version),
			// checked against what the program printed for itself.
			want := []string{"Object#callee", "block in Object#stepper", "Kernel#loop", "Object#stepper", "<main>"}
			if len(rep.Stack) != len(want) {
				t.Fatalf("the program's stack %v, not %d frames", rep.Stack, len(want))
			}
			for i, w := range want {
				if !testruby.LabelMatches(version, w, rep.Stack[i][0]) {
					t.Fatalf("the program's frame %d is %q, not %q", i, rep.Stack[i][0], w)
				}
			}
			tg, vm := testvm.Attach(t, p.PID())
			calls := []string{"Object#callee", "Kernel#itself"}
			begun := map[string]int{}
			var last string
			halfPushed := 0
			steps := stepThread(t, p.PID(), func() bool {
				ths, err := vm.Threads()
				if err != nil {
					t.Fatalf("reading the stack: %v", err)
				}
				var main *rubyvm.Thread
				for i := range ths {
					if ths[i].Main {
						main = &ths[i]
					}
				}
				if main == nil || main.Error != "" {
					t.Fatalf("no readable main thread: %+v", ths)
				}
				got := main.Frames
				depth := len(got)
				if depth < 3 || depth > len(want) {
					t.Fatalf("a stack of %d frames: %s", depth, labels(got))
				}
				if checkRawInnermost(t, tg, vm, main, got) {
					halfPushed++
				}
				for i, f := range got {
					w := want[len(want)-depth+i]
					if i == 0 && depth == len(want) && f.Label == calls[1] {
						w = f.Label
					}
					if f.Label != w {
						t.Fatalf("frame %d of %s is not %s (the program's stack: %v)", i, labels(got), w, rep.Stack)
					}
					if f.Kind == rubyvm.KindRuby && f.Path != rep.Stack[len(want)-depth+i][1] {
						t.Fatalf("frame %d of %s at %s, not %s", i, labels(got), f.Path, rep.Stack[len(want)-depth+i][1])
					}
				}
				top := ""
				if depth == len(want) {
					top = got[0].Label
				}
				if top != last && top != "" {
					begun[top]++
				}
				last = top
				return begun[calls[0]] >= 5 && begun[calls[1]] >= 5
			})
			t.Logf("%d instructions; calls begun: %v; caught with an innermost frame that does not decode: %d", steps, begun, halfPushed)
		})
	}
}

// checkRawInnermost decodes main's innermost control frame as the BPF
// sampler does (DecodeControlFrame: the frame's iseq, pc and ep, and a
// copy of the value stack) and checks that it agrees with frames, the
// stack read at the same instruction: the same frame, or, for a frame
// the read left out, one that does not decode and MayBeHalfPushed. It
// reports whether the frame did not decode.
func checkRawInnermost(t *testing.T, tg *target.Live, vm *rubyvm.VM, main *rubyvm.Thread, frames []rubyvm.Frame) bool {
	t.Helper()
	L := vm.Layout
	word := func(addr uint64) uint64 {
		var b [8]byte
		if _, err := tg.ReadAt(b[:], addr); err != nil {
			t.Fatalf("reading %#x: %v", addr, err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	ec := word(main.Addr + uint64(L.ThreadEC))
	cfp := word(ec + uint64(L.ECCFP))
	base := word(ec + uint64(L.ECVMStack))
	stack := make([]byte, 16<<10) // push_steps.rb's stack is shallow
	if _, err := tg.ReadAt(stack, base); err != nil {
		t.Fatalf("reading the value stack: %v", err)
	}
	f, ok, err := vm.DecodeControlFrame(word(cfp+uint64(L.CFPIseq)), word(cfp+uint64(L.CFPPC)), word(cfp+uint64(L.CFPEP)), base, stack)
	switch {
	case err != nil && !vm.MayBeHalfPushed(0):
		t.Fatalf("the innermost frame does not decode: %v (the stack read: %s)", err, labels(frames))
	case err == nil && ok && f.Label != frames[0].Label:
		t.Fatalf("the innermost frame decodes as %s, the stack read as %s", f.Label, labels(frames))
	}
	return err != nil
}

// labels joins the labels of frames, innermost first.
func labels(frames []rubyvm.Frame) string {
	var b strings.Builder
	for i, f := range frames {
		if i > 0 {
			b.WriteString(" < ")
		}
		b.WriteString(f.Label)
	}
	return b.String()
}

// maxSteps bounds stepThread: push_steps.rb's round is a few thousand
// instructions.
const maxSteps = 500000

// stepThread stops thread tid (ptrace), then runs it one instruction at a
// time, calling done after each instruction while the thread is stopped,
// until done returns true; it then lets the thread go and returns the
// instructions run. It fails the test after maxSteps.
func stepThread(t *testing.T, tid int, done func() bool) int {
	t.Helper()
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		t.Fatalf("ptrace seize %d: %v", tid, err)
	}
	defer func() {
		if err := unix.PtraceDetach(tid); err != nil {
			t.Errorf("ptrace detach %d: %v", tid, err)
		}
	}()
	if err := unix.PtraceInterrupt(tid); err != nil {
		t.Fatalf("ptrace interrupt %d: %v", tid, err)
	}
	wait := func() unix.Signal {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				t.Fatalf("waiting for %d: %v", tid, err)
			}
			break
		}
		if !ws.Stopped() {
			t.Fatalf("thread %d did not stop: %v", tid, ws)
		}
		// A trap (the step, or the interrupt's event stop) carries no
		// signal to pass on; any other signal is the program's.
		if sig := ws.StopSignal(); sig != unix.SIGTRAP {
			return sig
		}
		return 0
	}
	sig := wait()
	for steps := 1; steps <= maxSteps; steps++ {
		if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SINGLESTEP, uintptr(tid), 0, uintptr(sig), 0, 0); errno != 0 {
			t.Fatalf("ptrace single step %d: %v", tid, errno)
		}
		sig = wait()
		if done() {
			return steps
		}
	}
	t.Fatalf("not done after %d instructions", maxSteps)
	return 0
}
