// Package crashreport is the model of one crash's report: what the crash
// handler gathered of a process that dumped core (the process, the
// signal, its Ruby and native stacks as the stacks and unwind packages
// model them, /proc as it was, what became of the core, who was told).
// internal/crash gathers, trims, stores and prints it; internal/wire maps
// it to and from the report.json document.
package crashreport

import (
	"fmt"
	"time"

	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Report is everything the crash handler kept of one crash.
type Report struct {
	// ID names the crash's directory in the store: the UTC time stamp
	// and the pid ("20261123T120000Z-4242").
	ID string
	// Time is when the process crashed (the kernel's %t).
	Time time.Time
	// PID and TID are the process (in the initial PID namespace) and
	// the thread that crashed.
	PID, TID int
	// UID is the crashed process's real uid (-1: unknown).
	UID int64
	// Signal ended the process; SignalName names it ("SIGSEGV").
	Signal     int
	SignalName string
	// Exe and Cmdline are the crashed program and its arguments
	// (redacted).
	Exe     string
	Cmdline []string
	// Fault names the fault beneath a signal handler on the crashing
	// thread's stack (crash.Fault).
	Fault string
	// Registers are the crashing thread's; nil when unknown.
	Registers *target.Regs
	// Native is every thread's native stack, by TID.
	Native []NativeThread
	// Ruby is the Ruby side, when the process ran Ruby.
	Ruby *Ruby
	// Proc is /proc/PID as it was during the crash.
	Proc Proc
	// Core says what became of the core.
	Core Core
	// Notified records each attempt to tell someone of the crash.
	Notified []Notification
	// Problems says what could not be gathered, one line each.
	Problems []string
	// HandledIn is how long the handler took.
	HandledIn time.Duration
}

// Ruby is the Ruby side of a crashed process: its version and its Ruby
// threads (their Ruby frames).
type Ruby struct {
	Version string
	Threads []stacks.Thread
}

// NativeThread is one thread's program counter and stack pointer and its
// native frames, unwound with the code's call frame information.
type NativeThread struct {
	TID    int
	PC, SP uint64
	// Frames are its native frames, innermost first.
	Frames []unwind.Frame
	// Error says why the unwind stopped before the outermost frame.
	Error string
}

// Proc is /proc/PID as it was during the crash.
type Proc struct {
	Maps, Status, Limits string
	// FDs maps each open descriptor's number to what it links to.
	FDs    map[string]string
	Cgroup string
	Cwd    string
	// Environ is the environment, secrets redacted.
	Environ map[string]string
}

// Core says what became of the core.
type Core struct {
	// File is the stored core in the crash directory ("core.zst"), ""
	// when none was stored.
	File string
	// Bytes were read from the kernel; Stored is the compressed bytes
	// kept; Truncated says the core was cut at the size cap.
	Bytes     int64
	Stored    int64
	Truncated bool
	// NotStored says why the core is missing or cut short.
	NotStored string
	// ChainedTo is the handler installed before rbscope, which got the
	// core too, and ChainError what went wrong passing it on.
	ChainedTo  string
	ChainError string
}

// Notification records one attempt to tell someone of the crash.
type Notification struct {
	Kind  string // webhook, email
	To    string
	OK    bool
	Error string // why not
}

// TopRubyFrame is the innermost frame of the crashing (else the main)
// Ruby thread: "label (path:line)", or a C method's label; "" when there
// is none.
func (r *Report) TopRubyFrame() string {
	if r.Ruby == nil {
		return ""
	}
	var pick *stacks.Thread
	for i := range r.Ruby.Threads {
		th := &r.Ruby.Threads[i]
		if th.TID == r.TID || (pick == nil && th.Main) {
			pick = th
		}
	}
	if pick == nil || len(pick.Frames) == 0 {
		return ""
	}
	f := pick.Frames[0]
	if f.Kind == stacks.KindRuby {
		return fmt.Sprintf("%s (%s:%d)", f.Label, f.Path, f.Line)
	}
	return f.Label
}

// Entry is one crash of a store: its ID and its report, or why the report
// could not be read (Err, with Report nil).
type Entry struct {
	ID     string
	Report *Report
	Err    error
}
