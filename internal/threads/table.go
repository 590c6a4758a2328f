// Package threads is what `rbscope threads` knows of a Ruby process's
// threads: the table that joins the kernel's view of them (state, CPU,
// machine stack) with the Ruby threads they run and their largest native
// frames (Read), and their births and deaths as they happen (Follow, fed by
// Watch).
package threads

import (
	"context"
	"fmt"
	"time"

	"github.com/rbscope/rbscope/internal/libc"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
)

// Row is one native thread of the table.
type Row struct {
	TID        int
	Comm       string
	State      string
	CPUSeconds float64
	CPUPercent float64
	// StackBytes is the machine stack in use (from the stack pointer to
	// the top of its mapping); nil when it could not be read.
	StackBytes *uint64
	// LargestFrame is the thread's largest native frame (unwound with the
	// code's CFI while the process stood still), by its own bytes for a
	// Ruby thread (LargestFrame.Unusual); nil without a pause.
	LargestFrame *LargestFrame
	// Kind is KindRuby (runs a Ruby thread), KindRubyInternal (Ruby's own
	// timer thread) or KindNative (no Ruby thread).
	Kind string
	Ruby *RubyThread
}

// The kinds of row.
const (
	KindRuby         = "ruby"
	KindRubyInternal = "ruby-internal"
	KindNative       = "native"
)

// LargestFrame is a thread's largest native frame: its size and function.
type LargestFrame struct {
	Bytes    uint64
	Function string
	// VMStackBytes is the part of the frame that is the thread's own VM
	// stack (0: none): Ruby 3.0 and later allocate a thread's VM stack
	// (thread_vm_stack_size, 1 MiB by default) with alloca in the frame
	// that starts the thread (thread_start_func_2), so every thread but
	// the main one has a frame that large by design. A frame is found to
	// hold it by address: the VM stack lies inside the frame's bytes. A
	// Ruby thread's largest frame is the largest by its bytes less this
	// (Unusual), so that a large frame of the program's own shows beside
	// the one Ruby makes.
	VMStackBytes uint64
}

// Unusual is the frame's size less the VM stack it holds: what is large
// about it beyond what Ruby puts there on every thread.
func (lf LargestFrame) Unusual() uint64 { return lf.Bytes - lf.VMStackBytes }

// RubyThread is the Ruby thread a native thread runs.
type RubyThread struct {
	Name   string
	Status string
	Main   bool
	GVL    bool
	// Frame is its innermost Ruby frame (nil for an empty stack).
	Frame *stacks.Frame
}

// kernelStates names the kernel's thread states.
var kernelStates = map[byte]string{'R': "running", 'S': "sleeping", 'D': "disk-wait", 'T': "stopped", 't': "traced", 'Z': "zombie", 'X': "dead", 'I': "idle"}

// Read measures every native thread of t's process over interval (its CPU
// use) and joins it with the Ruby thread it runs (vm). With pause it then
// stops the process once to read every thread's stack pointer and native
// stack (its largest frame). It returns ctx's error when ctx ends first.
func Read(ctx context.Context, t *target.Live, vm *rubyvm.VM, interval time.Duration, pause bool) ([]Row, error) {
	pid := t.PID()
	before, err := t.Tasks()
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return nil, ctx.Err() // interrupted while measuring CPU use
	}
	after, err := t.Tasks() // kernel states, before pausing changes them
	if err != nil {
		return nil, err
	}
	stackTasks := after
	captured, err := stacks.Capture(t, vm, stacks.Options{Native: pause, Nonblocking: !pause, WhileStill: func([]int) error {
		if k, err := t.Tasks(); err == nil {
			stackTasks = k // every thread is blocked now, so each shows its sp
		}
		return nil
	}})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	largest := map[int]*LargestFrame{}
	var vmStacks map[int][2]uint64    // by TID, read once when a Ruby thread has a native frame
	threadPointer := map[int]uint64{} // each thread's thread pointer, when paused
	byTID := map[int]stacks.Thread{}
	for _, th := range captured {
		if th.TID <= 0 {
			continue // an M:N thread on no native thread now
		}
		if th.Ruby {
			largest[th.TID] = largestOwn(vm, th, &vmStacks)
		} else if big, ok := th.Largest(); ok {
			largest[th.TID] = &LargestFrame{Bytes: big.Native.Size, Function: big.Name()}
		}
		if th.Regs != nil {
			threadPointer[th.TID] = th.Regs.TP
		}
		if th.Ruby {
			byTID[th.TID] = th
		}
	}
	maps, _ := t.Mappings()

	cpuBefore := map[int]time.Duration{}
	for _, tk := range before {
		cpuBefore[tk.TID] = tk.CPU
	}
	sp := map[int]uint64{}
	for _, tk := range stackTasks {
		sp[tk.TID] = tk.SP
	}
	mainComm := ""
	for _, tk := range before {
		if tk.TID == pid {
			mainComm = tk.Comm
		}
	}
	musl := libc.Name(maps) == libc.Musl
	rows := make([]Row, 0, len(after))
	for _, tk := range after {
		row := Row{TID: tk.TID, Comm: tk.Comm, State: kernelStates[tk.State], CPUSeconds: tk.CPU.Seconds(), Kind: KindNative, LargestFrame: largest[tk.TID]}
		if row.State == "" {
			row.State = string(tk.State)
		}
		if prev, ok := cpuBefore[tk.TID]; ok {
			row.CPUPercent = 100 * (tk.CPU - prev).Seconds() / interval.Seconds()
		}
		if s := sp[tk.TID]; s != 0 {
			if m, ok := target.FindMapping(maps, s); ok {
				top := m.End
				// musl maps a thread's stack without a gap above it, so
				// its mapping may run on into the next: its struct
				// pthread says where the stack ends.
				if musl {
					if st, ok := libc.MuslStackTop(t, threadPointer[tk.TID]); ok && st > s && st <= m.End {
						top = st
					}
				}
				used := top - s
				row.StackBytes = &used
			}
		}
		if th, ok := byTID[tk.TID]; ok {
			row.Kind = KindRuby
			rt := &RubyThread{Name: th.Name, Status: th.Status, Main: th.Main, GVL: th.GVL}
			for _, f := range th.Frames {
				if f.Kind != stacks.KindNative {
					rt.Frame = &f
					break
				}
			}
			row.Ruby = rt
		} else if vm.Layout.TimerThreadNamed == 1 && tk.TID != pid && tk.Comm == mainComm {
			// Ruby 3.2+ runs a timer thread that carries the process name.
			row.Kind = KindRubyInternal
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// largestOwn returns Ruby thread th's largest native frame by its own
// bytes, the VM stack a frame holds not counted (LargestFrame's
// VMStackBytes), the innermost of equals; nil when it has no native frame.
func largestOwn(vm *rubyvm.VM, th stacks.Thread, vmStacks *map[int][2]uint64) *LargestFrame {
	var big *LargestFrame
	for _, f := range th.Frames {
		if f.Kind != stacks.KindNative {
			continue
		}
		lf := &LargestFrame{Bytes: f.Native.Size, Function: f.Name(), VMStackBytes: vmStackIn(vm, th.TID, f.Native.CFA, f.Native.Size, vmStacks)}
		if big == nil || lf.Unusual() > big.Unusual() {
			big = lf
		}
	}
	return big
}

// vmStackIn returns the bytes of thread tid's VM stack that the native
// frame of canonical frame address cfa and size bytes holds: all of it
// when the VM stack lies within the frame's bytes [cfa-size, cfa), else 0. stacks caches every Ruby thread's VM stack by
// TID, read on first use (the VM stack of a live thread stays where it
// is; a thread running a Fiber runs on the Fiber's VM stack, which no
// frame of the thread's machine stack holds).
func vmStackIn(vm *rubyvm.VM, tid int, cfa, size uint64, stacks *map[int][2]uint64) uint64 {
	if *stacks == nil {
		*stacks = map[int][2]uint64{}
		ths, err := vm.ReadThreads(func(rubyvm.Thread) bool { return false })
		if err != nil {
			return 0
		}
		for _, th := range ths {
			if lo, hi, err := vm.VMStack(th.Addr); err == nil && th.TID > 0 {
				(*stacks)[th.TID] = [2]uint64{lo, hi}
			}
		}
	}
	b, ok := (*stacks)[tid]
	if !ok || size == 0 || cfa < size || b[0] < cfa-size || b[1] > cfa {
		return 0
	}
	return b[1] - b[0]
}
