package wire

import (
	"time"

	"github.com/rbscope/rbscope/internal/threads"
)

// ThreadTable is the document `rbscope threads --json` prints: every
// native thread of the process, with the Ruby thread it runs.
type ThreadTable struct {
	Threads []ThreadRow `json:"threads"`
}

// ThreadRow is one native thread.
type ThreadRow struct {
	TID        int     `json:"tid"`
	Comm       string  `json:"comm"`
	State      string  `json:"state"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"`
	// StackBytes is the machine stack in use; null when it could not be
	// read.
	StackBytes *uint64 `json:"stack_bytes"`
	// LargestFrame is the thread's largest native frame; null without a
	// pause.
	LargestFrame *LargestFrame `json:"largest_frame"`
	// Kind is "ruby", "ruby-internal" (Ruby's timer thread) or "native".
	Kind string         `json:"kind"`
	Ruby *ThreadRowRuby `json:"ruby,omitempty"`
}

// LargestFrame is a thread's largest native frame: its size and function.
type LargestFrame struct {
	Bytes    uint64 `json:"bytes"`
	Function string `json:"function"`
	// VMStackBytes is the part of it that is the thread's own VM stack
	// (threads.LargestFrame), 0 for none.
	VMStackBytes uint64 `json:"vm_stack_bytes"`
}

// ThreadRowRuby is the Ruby thread a native thread runs, and its
// innermost Ruby frame.
type ThreadRowRuby struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Main   bool   `json:"main"`
	GVL    bool   `json:"gvl"`
	Frame  *Frame `json:"frame,omitempty"`
}

// NewThreadTable maps the rows of the threads table.
func NewThreadTable(rows []threads.Row) *ThreadTable {
	out := &ThreadTable{Threads: make([]ThreadRow, len(rows))}
	for i, r := range rows {
		w := ThreadRow{TID: r.TID, Comm: r.Comm, State: r.State, CPUSeconds: r.CPUSeconds, CPUPercent: r.CPUPercent,
			StackBytes: r.StackBytes, Kind: r.Kind}
		if r.LargestFrame != nil {
			w.LargestFrame = &LargestFrame{Bytes: r.LargestFrame.Bytes, Function: r.LargestFrame.Function, VMStackBytes: r.LargestFrame.VMStackBytes}
		}
		if rt := r.Ruby; rt != nil {
			w.Ruby = &ThreadRowRuby{Name: rt.Name, Status: rt.Status, Main: rt.Main, GVL: rt.GVL}
			if f := rt.Frame; f != nil {
				w.Ruby.Frame = &Frame{Kind: string(f.Kind), Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, Line: f.Line}
			}
		}
		out.Threads[i] = w
	}
	return out
}

// ThreadEvent is one birth or death: one line of `rbscope threads
// --follow --json`.
type ThreadEvent struct {
	Time time.Time `json:"time"`
	// Event is "born", "exited", "native-born" or "native-exited".
	Event string `json:"event"`
	TID   int    `json:"tid"`
	Name  string `json:"name,omitempty"`
	// Creator is the outermost Ruby frame of a new thread: the block given
	// to Thread.new, at the line that created it.
	Creator  string  `json:"created_at,omitempty"`
	Lifetime float64 `json:"lifetime_seconds,omitempty"`
}

// NewThreadEvent maps a thread's birth or death.
func NewThreadEvent(ev threads.Event) ThreadEvent {
	return ThreadEvent{Time: ev.Time, Event: ev.Event, TID: ev.TID, Name: ev.Name, Creator: ev.Creator, Lifetime: ev.Lifetime}
}
