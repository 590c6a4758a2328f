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
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Row is one native thread, as `rbscope threads --json` prints it.
type Row struct {
	TID        int     `json:"tid"`
	Comm       string  `json:"comm"`
	State      string  `json:"state"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"`
	// StackBytes is the machine stack in use (from the stack pointer to
	// the top of its mapping); null when it could not be read.
	StackBytes *uint64 `json:"stack_bytes"`
	// LargestFrame is the thread's largest native frame (unwound with the
	// code's CFI while the process stood still); null without a pause.
	LargestFrame *LargestFrame `json:"largest_frame"`
	// Kind is "ruby" (runs a Ruby thread), "ruby-internal" (Ruby's own
	// timer thread) or "native" (no Ruby thread).
	Kind string      `json:"kind"`
	Ruby *RubyThread `json:"ruby,omitempty"`
}

// LargestFrame is a thread's largest native frame: its size and function.
type LargestFrame struct {
	Bytes    uint64 `json:"bytes"`
	Function string `json:"function"`
}

// RubyThread is the Ruby thread a native thread runs.
type RubyThread struct {
	Name   string        `json:"name"`
	Status string        `json:"status"`
	Main   bool          `json:"main"`
	GVL    bool          `json:"gvl"`
	Frame  *rubyvm.Frame `json:"frame,omitempty"`
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
	stacks := after
	var threads []rubyvm.Thread
	maps, _ := t.Mappings()
	native := map[int][]unwind.Frame{}
	fsBase := map[int]uint64{} // each thread's thread pointer, when paused
	var u *unwind.Unwinder
	if pause {
		u = unwind.New(t, maps)
		defer u.Close()
		u.Preload() // the CFI is read before the process stops
	}
	read := func(s *target.Stopped) (err error) {
		if s != nil {
			if k, err := t.Tasks(); err == nil {
				stacks = k // every thread is blocked now, so each shows its sp
			}
			for tid := range s.Threads {
				if regs, err := s.Registers(tid); err == nil {
					native[tid], _ = u.Unwind(unwind.FromTarget(regs))
					fsBase[tid] = regs.FSBase
				}
			}
		}
		threads, err = vm.Threads()
		return err
	}
	if pause {
		err = t.WhilePaused(nil, read)
	} else {
		err = read(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	largest := map[int]*LargestFrame{}
	for tid, frames := range native { // named once the process runs again
		u.Symbolize(frames)
		for _, f := range frames {
			if lf := largest[tid]; lf == nil || f.Size > lf.Bytes {
				largest[tid] = &LargestFrame{Bytes: f.Size, Function: f.Name()}
			}
		}
	}

	cpuBefore := map[int]time.Duration{}
	for _, tk := range before {
		cpuBefore[tk.TID] = tk.CPU
	}
	sp := map[int]uint64{}
	for _, tk := range stacks {
		sp[tk.TID] = tk.SP
	}
	byTID := map[int]rubyvm.Thread{}
	for _, th := range threads {
		tid := th.TID
		if th.Main && !hasTask(after, tid) {
			tid = pid // a forked child's main thread keeps its parent's TID in Ruby's books
		}
		byTID[tid] = th
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
		row := Row{TID: tk.TID, Comm: tk.Comm, State: kernelStates[tk.State], CPUSeconds: tk.CPU.Seconds(), Kind: "native", LargestFrame: largest[tk.TID]}
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
					if st, ok := libc.MuslStackTop(t, fsBase[tk.TID]); ok && st > s && st <= m.End {
						top = st
					}
				}
				used := top - s
				row.StackBytes = &used
			}
		}
		if th, ok := byTID[tk.TID]; ok {
			row.Kind = "ruby"
			rt := &RubyThread{Name: th.Name, Status: th.Status, Main: th.Main, GVL: th.GVL}
			if len(th.Frames) > 0 {
				f := th.Frames[0]
				rt.Frame = &f
			}
			row.Ruby = rt
		} else if vm.Layout.TimerThreadNamed == 1 && tk.TID != pid && tk.Comm == mainComm {
			// Ruby 3.2+ runs a timer thread that carries the process name.
			row.Kind = "ruby-internal"
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func hasTask(tasks []procfs.Task, tid int) bool {
	for _, t := range tasks {
		if t.TID == tid {
			return true
		}
	}
	return false
}
