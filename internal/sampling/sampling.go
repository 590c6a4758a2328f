// Package sampling holds the terms the two samplers share, the sampler
// that reads stacks from user space (internal/sampler) and the one that
// copies them in the kernel (internal/ebpfsample): the rate's bound, a
// recording's progress, the frames of the GC's phases and how a thread is
// named in profiles.
package sampling

import (
	"strconv"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

// MaxRate is the highest sampling rate accepted, in Hz.
const MaxRate = 1000

// Progress is the state of a recording for a status line.
type Progress struct {
	Elapsed   time.Duration
	Ticks     int
	Samples   int
	Errors    int
	Processes int
}

// ProfileFrame is a Ruby stack's frame as profiles keep it.
func ProfileFrame(f rubyvm.Frame) profile.Frame {
	return profile.Frame{Kind: profile.Kind(f.Kind), Label: f.Label, Path: f.Path, Line: f.Line, Method: f.Method}
}

// gcFrames are the frames a sample gets above the Ruby stack of the thread
// holding the GVL while the GC runs, by phase.
var gcFrames = map[rubyvm.GCPhase][]profile.Frame{
	rubyvm.GCMarking:  {{Kind: profile.KindGC, Label: profile.LabelGC}, {Kind: profile.KindGC, Label: profile.LabelMarking}},
	rubyvm.GCSweeping: {{Kind: profile.KindGC, Label: profile.LabelGC}, {Kind: profile.KindGC, Label: profile.LabelSweeping}},
	rubyvm.GCOther:    {{Kind: profile.KindGC, Label: profile.LabelGC}},
}

// GCFrames are the frames a sample gets above the Ruby stack of the thread
// holding the GVL while the GC is in phase (none when it is idle), as the
// sampler adds them: for other samplers' profiles (record --ebpf). The
// slice is shared: append it, never change it.
func GCFrames(phase rubyvm.GCPhase) []profile.Frame { return gcFrames[phase] }

// WaitFrame is the leaf a sample of a sleeping thread gets when its
// innermost frames block on a synchronisation object
// (rubyvm.FrameWaitOf), by the object's class, so that the waits on every
// Mutex add up under one frame: "(waiting for Thread::Mutex)", "(waiting
// for Monitor)", "(waiting on Thread::ConditionVariable)", "(waiting on
// Thread::Queue)", "(waiting on Thread::SizedQueue)", "(waiting for a
// Thread to end)". false when the frames name no wait.
func WaitFrame(th rubyvm.Thread) (profile.Frame, bool) {
	w, ok := rubyvm.FrameWaitOf(th)
	if !ok {
		return profile.Frame{}, false
	}
	label := "(waiting on " + w.Class + ")"
	switch w.Kind {
	case rubyvm.WaitMutex, rubyvm.WaitMonitor:
		label = "(waiting for " + w.Class + ")"
	case rubyvm.WaitJoin:
		label = "(waiting for a Thread to end)"
	}
	return profile.Frame{Kind: profile.KindWait, Label: label}, true
}

// ThreadName is how a thread is named in profiles: Thread#name, "main"
// for the unnamed main thread, else "tid N".
func ThreadName(th rubyvm.Thread) string {
	switch {
	case th.Name != "":
		return th.Name
	case th.Main:
		return "main"
	default:
		return "tid " + strconv.Itoa(th.TID)
	}
}
