package wire

import (
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Process is what every stack document says first: the process and the
// Ruby that runs it.
type Process struct {
	PID         int    `json:"pid"`
	RubyVersion string `json:"ruby_version"`
	Description string `json:"ruby_description"`
	Layout      string `json:"layout"`
	// LayoutRelease is the patch release whose built-in table was read
	// (the family's table with that release's moves), when a table was.
	LayoutRelease string `json:"layout_release,omitempty"`
}

// NewProcess describes process pid and its Ruby.
func NewProcess(pid int, vm *rubyvm.VM) Process {
	return Process{PID: pid, RubyVersion: vm.Version, Description: vm.Description, Layout: vm.Layout.Source, LayoutRelease: vm.Layout.Release}
}

// Stack is the document `rbscope stack --json` prints.
type Stack struct {
	Process
	Threads []Thread `json:"threads"`
	// Deadlocks are the cycles of the threads' waits.
	Deadlocks []Deadlock `json:"deadlocks,omitempty"`
}

// Thread is a Ruby thread and its Ruby frames.
type Thread struct {
	TID    int     `json:"tid"`
	Name   string  `json:"name"`
	Main   bool    `json:"main"`
	Status string  `json:"status"`
	GVL    bool    `json:"gvl"`
	Frames []Frame `json:"frames"`
	Error  string  `json:"error,omitempty"`
	// Wait is what the thread is blocked on; Holds the Mutexes it holds.
	Wait  *Wait      `json:"wait,omitempty"`
	Holds []HeldLock `json:"holds,omitempty"`
}

// Frame is a Ruby frame: kind "ruby", "cfunc" or "unknown".
type Frame struct {
	Kind      string `json:"kind"`
	Label     string `json:"label"`
	BaseLabel string `json:"base_label,omitempty"`
	Path      string `json:"path,omitempty"`
	Line      int    `json:"line,omitempty"`
}

// NewStack maps captured Ruby stacks to the stack document.
func NewStack(p Process, threads []stacks.Thread) *Stack {
	return &Stack{Process: p, Threads: Threads(threads), Deadlocks: Deadlocks(threads)}
}

// Threads maps captured Ruby threads (their Ruby frames) to documents.
func Threads(threads []stacks.Thread) []Thread {
	out := make([]Thread, 0, len(threads))
	for _, th := range threads {
		if !th.Ruby {
			continue
		}
		w := Thread{TID: th.TID, Name: th.Name, Main: th.Main, Status: th.Status, GVL: th.GVL, Error: th.Error,
			Wait: newWait(th.Wait), Holds: newHeld(th.Held)}
		if th.Frames != nil {
			w.Frames = make([]Frame, 0, len(th.Frames))
		}
		for _, f := range th.Frames {
			if f.Kind != stacks.KindNative {
				w.Frames = append(w.Frames, Frame{Kind: string(f.Kind), Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, Line: f.Line})
			}
		}
		out = append(out, w)
	}
	return out
}

// NativeStack is the document `rbscope stack --native --json` prints:
// every native thread, and each Ruby thread's Ruby and native frames in
// one call order.
type NativeStack struct {
	Process
	Threads []NativeThread `json:"threads"`
	// Deadlocks are the cycles of the Ruby threads' waits.
	Deadlocks []Deadlock `json:"deadlocks,omitempty"`
}

// NativeThread is a native thread: a Ruby thread's (Ruby set) or not.
type NativeThread struct {
	TID    int          `json:"tid"`
	Name   string       `json:"name"`
	Ruby   bool         `json:"ruby"`
	Main   bool         `json:"main"`
	Status string       `json:"status,omitempty"`
	GVL    bool         `json:"gvl"`
	Frames []MixedFrame `json:"frames"`
	// LargestFrame is the size of the thread's largest native frame.
	LargestFrame uint64 `json:"largest_frame"`
	// RubyPlacement says when the Ruby frames could not all be put beside
	// the exec-loop frame running them.
	RubyPlacement string `json:"ruby_placement,omitempty"`
	Error         string `json:"error,omitempty"`
	NativeError   string `json:"native_error,omitempty"`
	// Wait is what a Ruby thread is blocked on; Holds the Mutexes it
	// holds.
	Wait  *Wait      `json:"wait,omitempty"`
	Holds []HeldLock `json:"holds,omitempty"`
}

// MixedFrame is a Ruby frame (kind, label, base_label, path, line) or a
// native one (kind "native" and NativeFrame's keys). Line is a Ruby
// frame's line or a native frame's source line.
type MixedFrame struct {
	Kind      string `json:"kind"`
	Label     string `json:"label,omitempty"`
	BaseLabel string `json:"base_label,omitempty"`
	Path      string `json:"path,omitempty"`
	NativeFrame
}

// NativeFrame is a native frame as every document spells it: the native
// frames of stack --native and core --native (in MixedFrame) and of the
// crash report.
type NativeFrame struct {
	Line           int    `json:"line,omitempty"` // the source line in File
	Function       string `json:"function,omitempty"`
	FunctionOffset string `json:"function_offset,omitempty"`
	Object         string `json:"object,omitempty"`
	Offset         string `json:"offset,omitempty"`
	PC             string `json:"pc,omitempty"`
	// CFA is left out when unknown (no call frame information).
	CFA       string  `json:"cfa,omitempty"`
	FrameSize uint64  `json:"frame_size,omitempty"`
	File      string  `json:"file,omitempty"` // the source file (Line is its line)
	Signal    *Signal `json:"signal,omitempty"`
}

// Signal is the signal a signal frame delivered and its si_addr.
type Signal struct {
	Number int    `json:"number"`
	Addr   uint64 `json:"addr"`
}

// UnalignedPlacement is what RubyPlacement says of Ruby frames that
// follow the native frames.
const UnalignedPlacement = "after the native frames (the exec loop's frames were not found)"

// NewNativeStack maps captured stacks, native frames included, to the
// stack --native document.
func NewNativeStack(p Process, threads []stacks.Thread) *NativeStack {
	return &NativeStack{Process: p, Threads: NativeThreads(threads), Deadlocks: Deadlocks(threads)}
}

// NativeThreads maps captured threads with their native frames to
// documents.
func NativeThreads(threads []stacks.Thread) []NativeThread {
	out := make([]NativeThread, 0, len(threads))
	for _, th := range threads {
		w := NativeThread{TID: th.TID, Name: th.Name, Ruby: th.Ruby, Main: th.Main, Status: th.Status, GVL: th.GVL,
			Error: th.Error, NativeError: th.NativeError, Wait: newWait(th.Wait), Holds: newHeld(th.Held)}
		if th.Unaligned {
			w.RubyPlacement = UnalignedPlacement
		}
		if big, ok := th.Largest(); ok {
			w.LargestFrame = big.Native.Size
		}
		w.Frames = make([]MixedFrame, len(th.Frames))
		for i, f := range th.Frames {
			w.Frames[i] = NewMixedFrame(f)
		}
		out = append(out, w)
	}
	return out
}

// NewMixedFrame maps a frame of either kind.
func NewMixedFrame(f stacks.Frame) MixedFrame {
	if f.Kind != stacks.KindNative {
		return MixedFrame{Kind: string(f.Kind), Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, NativeFrame: NativeFrame{Line: f.Line}}
	}
	return MixedFrame{Kind: string(f.Kind), NativeFrame: NewNativeFrame(f.Native)}
}

// NewNativeFrame maps a native frame. An address that is 0 (unknown: the
// CFA without call frame information, the offset of code in no object) is
// left out, and so is the function's offset at its first byte.
func NewNativeFrame(n unwind.Frame) NativeFrame {
	m := NativeFrame{Function: n.Function, Object: n.Object, Offset: hexKnown(n.Offset), PC: hex(n.PC), CFA: hexKnown(n.CFA),
		FrameSize: n.Size, File: n.File, Line: n.Line}
	if n.Function != "" {
		m.FunctionOffset = hexKnown(n.FuncOffset)
	}
	if n.Signal != nil {
		m.Signal = &Signal{Number: n.Signal.Number, Addr: n.Signal.Addr}
	}
	return m
}

// frame maps a native frame document back to the model (a stored crash
// report read back).
func (m NativeFrame) frame() unwind.Frame {
	f := unwind.Frame{PC: unhex(m.PC), CFA: unhex(m.CFA), Size: m.FrameSize, Object: m.Object, Offset: unhex(m.Offset),
		Function: m.Function, FuncOffset: unhex(m.FunctionOffset), File: m.File, Line: m.Line}
	if m.Signal != nil {
		f.Signal = &unwind.Signal{Number: m.Signal.Number, Addr: m.Signal.Addr}
	}
	return f
}
