// Package profile is rbscope's model of a recording: the frames, the
// distinct stacks with their sample counts and, when kept, every sample's
// time and thread. The sampler fills it and the output formats read it; it
// knows neither (as pprof keeps its model apart from its encoders).
package profile

import (
	"encoding/binary"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Kind is what a frame of a profile is.
type Kind string

// Frame kinds. KindRuby, KindCFunc and KindNative are the strings of a
// captured stack's frames (stacks.Kind); the sampler adds the others above
// Ruby's own frames.
const (
	KindRuby    Kind = "ruby"    // a frame running Ruby code
	KindCFunc   Kind = "cfunc"   // a method implemented in C
	KindProcess Kind = "process" // a root frame "pid NNN (TITLE)" with --subprocesses
	KindThread  Kind = "thread"  // a root frame "thread NAME" with --threads
	KindGC      Kind = "gc"      // LabelGC and its phase, above the Ruby frames that set the GC off
	KindGVL     Kind = "gvl"     // LabelGVLWait, the leaf of a thread waiting for the GVL
	KindWait    Kind = "wait"    // the leaf of a thread blocked on a Mutex, a Queue, a join: "(waiting for Thread::Mutex)"
	KindNative  Kind = "native"  // a native function (record --native); Path is its object
)

// The labels of the frames the sampler adds for time that is not in Ruby
// code, as stackprof names them (which vernier and OpenTelemetry's
// profiler follow): a sample taken while the GC runs ends in
// LabelGC, LabelMarking or LabelGC, LabelSweeping (or LabelGC alone for
// another phase); one of a thread waiting for the GVL ends in
// LabelGVLWait.
const (
	LabelGC       = "(garbage collection)"
	LabelMarking  = "(marking)"
	LabelSweeping = "(sweeping)"
	LabelGVLWait  = "(waiting for GVL)"
)

// Frame is one node of a sampled stack.
type Frame struct {
	Kind  Kind
	Label string
	Path  string
	Line  int
	// Method is, for a Ruby frame running the block of a method defined
	// with define_method, the method's name (rubyvm.Frame.Method): what
	// a Sinatra route's frame says of its route. Profiles show the
	// label; context labels (package ctxlabels) read this.
	Method string
}

// Name is how the frame is shown in flame graphs and collapsed stacks:
// "label (path:line)" for Ruby code, "Owner#name (cfunc)" for C methods.
func (f Frame) Name(withLine bool) string {
	switch f.Kind {
	case KindRuby:
		if withLine && f.Line > 0 {
			return f.Label + " (" + f.Path + ":" + strconv.Itoa(f.Line) + ")"
		}
		return f.Label + " (" + f.Path + ")"
	case KindCFunc:
		return f.Label + " (cfunc)"
	case KindNative:
		return f.Label + " [" + f.Path + "]"
	default:
		return f.Label
	}
}

// Function is the frame without its line: the unit of the summary and top.
func (f Frame) Function() Frame { f.Line = 0; return f }

// Stack is a distinct sampled stack, root first, with its sample count.
type Stack struct {
	Frames []int // indexes into Profile.Frames, root first
	Count  int
	// Labels are the labels of every sample of the stack (the agent's
	// endpoint and job, derived from the frames by package ctxlabels),
	// nil for none. They are a function of the frames: two samples of a
	// stack never differ in them.
	Labels []Label
}

// Label is a key and value of a stack's samples (pprof's sample labels,
// OpenTelemetry's sample attributes).
type Label struct{ Key, Value string }

// Profile is the aggregate of a recording.
type Profile struct {
	Frames []Frame
	Stacks []Stack
	// Samples is the number of stacks recorded (a sample of a process with
	// two active threads records two); Ticks the number of sampling ticks.
	Samples int
	Ticks   int
	// Errors counts samples that could not be read (torn reads, threads
	// that died mid-read); they are skipped, never fatal.
	Errors int
	// Waiting counts the runnable threads left out of a tick because
	// they were waiting for a CPU, not on one (the default mode samples
	// CPU time; see sampler's onCPUNow).
	Waiting int
	// Wall says the samples are of every thread whatever it was doing
	// (wall-clock time), not of the threads on a CPU (CPU time).
	Wall bool
	// Rate is the requested rate in Hz; Start and Duration bound the run.
	Rate     float64
	Start    time.Time
	Duration time.Duration
	// Timeline holds every sample in the order taken, when the recording
	// keeps it (KeepTimeline; the raw and firefox formats need it). Nil
	// otherwise: the aggregate above is then all there is.
	Timeline []Sample

	frameIDs map[Frame]int
	stackIDs map[string]int
	// ids and key are Add's scratch: a stack already seen costs no
	// allocation.
	ids []int
	key []byte
}

// NewProfile returns an empty profile for a recording at rate Hz.
func NewProfile(rate float64) *Profile {
	return &Profile{Rate: rate, Start: time.Now(), frameIDs: map[Frame]int{}, stackIDs: map[string]int{}}
}

// Sample is one sample of the timeline: when it was taken, in which
// process and thread, and its stack.
type Sample struct {
	// Time is the time since Profile.Start.
	Time time.Duration
	PID  int
	TID  int
	// Thread is the thread's name as profiles show it (sampling.ThreadName).
	Thread string
	// Stack indexes Profile.Stacks.
	Stack int
}

// KeepTimeline makes AddSample keep every sample in Timeline.
func (p *Profile) KeepTimeline() {
	if p.Timeline == nil {
		p.Timeline = []Sample{}
	}
}

// AddSample records one sample of one thread taken at t: its stack, root
// first, counts once, and the sample joins the timeline when kept. It
// returns the stack's index in Stacks.
func (p *Profile) AddSample(frames []Frame, t time.Time, pid, tid int, thread string) (stack int) {
	si := p.Add(frames, 1)
	if p.Timeline != nil {
		p.Timeline = append(p.Timeline, Sample{Time: t.Sub(p.Start), PID: pid, TID: tid, Thread: thread, Stack: si})
	}
	return si
}

// AddStackSample is AddSample of a stack already in Stacks, by its index
// (what AddSample returned for it): one sample more of it.
func (p *Profile) AddStackSample(stack int, t time.Time, pid, tid int, thread string) {
	p.Stacks[stack].Count++
	p.Samples++
	if p.Timeline != nil {
		p.Timeline = append(p.Timeline, Sample{Time: t.Sub(p.Start), PID: pid, TID: tid, Thread: thread, Stack: stack})
	}
}

// Add records count samples of one stack, given root first, and returns
// the stack's index in Stacks.
func (p *Profile) Add(frames []Frame, count int) int {
	if p.frameIDs == nil {
		p.frameIDs, p.stackIDs = map[Frame]int{}, map[string]int{}
		for i, f := range p.Frames {
			p.frameIDs[f] = i
		}
		for i, st := range p.Stacks {
			p.stackIDs[string(appendStackKey(nil, st.Frames))] = i
		}
	}
	ids := p.ids[:0]
	for _, f := range frames {
		id, ok := p.frameIDs[f]
		if !ok {
			id = len(p.Frames)
			p.Frames = append(p.Frames, f)
			p.frameIDs[f] = id
		}
		ids = append(ids, id)
	}
	p.ids = ids
	p.key = appendStackKey(p.key[:0], ids)
	si, ok := p.stackIDs[string(p.key)] // no allocation to look up
	if ok {
		p.Stacks[si].Count += count
	} else {
		si = len(p.Stacks)
		p.stackIDs[string(p.key)] = si
		p.Stacks = append(p.Stacks, Stack{Frames: slices.Clone(ids), Count: count})
	}
	p.Samples += count
	return si
}

// Relabel gives every frame of kind its label's new name, as rename
// returns it (the stacks keep their frames); frames that end up alike
// stay apart in Stacks but are found as one by later samples.
func (p *Profile) Relabel(kind Kind, rename func(label string) string) {
	for i, f := range p.Frames {
		if f.Kind != kind {
			continue
		}
		if p.frameIDs != nil {
			delete(p.frameIDs, f)
		}
		f.Label = rename(f.Label)
		p.Frames[i] = f
		if p.frameIDs != nil {
			if _, ok := p.frameIDs[f]; !ok {
				p.frameIDs[f] = i
			}
		}
	}
}

// appendStackKey appends the map key of a stack of frame indexes to key:
// each index as a varint.
func appendStackKey(key []byte, ids []int) []byte {
	for _, id := range ids {
		key = binary.AppendUvarint(key, uint64(id))
	}
	return key
}

// FunctionStat is a function's self and total sample counts.
type FunctionStat struct {
	Frame       Frame
	Self, Total int
}

// Tally is a key's self and total sample counts (Aggregate).
type Tally struct{ Self, Total int }

// Aggregate tallies p's stacks by key(frame): self counts the samples
// whose innermost frame has the key, total those with the key anywhere on
// the stack, once per sample however deep it recurses. Synthetic frames
// are left out.
func Aggregate[K comparable](p *Profile, key func(Frame) K) map[K]*Tally {
	tallies := map[K]*Tally{}
	for _, st := range p.Stacks {
		seen := map[K]bool{}
		for i, id := range st.Frames {
			f := p.Frames[id]
			if f.Synthetic() {
				continue
			}
			k := key(f)
			t, ok := tallies[k]
			if !ok {
				t = &Tally{}
				tallies[k] = t
			}
			if !seen[k] {
				t.Total += st.Count
				seen[k] = true
			}
			if i == len(st.Frames)-1 {
				t.Self += st.Count
			}
		}
	}
	return tallies
}

// Functions aggregates the profile by function (frames without lines),
// sorted by self count, then total. A function that recurses counts once
// per sample in its total.
func (p *Profile) Functions() []FunctionStat {
	tallies := Aggregate(p, Frame.Function)
	out := make([]FunctionStat, 0, len(tallies))
	for fn, t := range tallies {
		out = append(out, FunctionStat{Frame: fn, Self: t.Self, Total: t.Total})
	}
	sortStats(out)
	return out
}

func sortStats(s []FunctionStat) {
	sort.Slice(s, func(i, j int) bool {
		a, b := s[i], s[j]
		if a.Self != b.Self {
			return a.Self > b.Self
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Frame.Name(false) < b.Frame.Name(false)
	})
}

// Merge adds the samples of q to p; q's timeline joins p's when p keeps
// one.
func (p *Profile) Merge(q *Profile) {
	moved := make([]int, len(q.Stacks))
	for si, st := range q.Stacks {
		moved[si] = p.Add(q.StackFrames(si), st.Count)
		if p.Stacks[moved[si]].Labels == nil {
			p.Stacks[moved[si]].Labels = st.Labels
		}
	}
	if p.Timeline != nil {
		shift := q.Start.Sub(p.Start)
		for _, s := range q.Timeline {
			s.Time += shift
			s.Stack = moved[s.Stack]
			p.Timeline = append(p.Timeline, s)
		}
	}
	p.Ticks += q.Ticks
	p.Errors += q.Errors
	p.Waiting += q.Waiting
	p.Duration += q.Duration
}

// StackFrames returns the frames of stack si, root first.
func (p *Profile) StackFrames(si int) []Frame {
	ids := p.Stacks[si].Frames
	frames := make([]Frame, len(ids))
	for i, id := range ids {
		frames[i] = p.Frames[id]
	}
	return frames
}

// Breakdown counts the samples taken while the GC ran (a KindGC frame)
// and those of threads waiting for the GVL (a KindGVL frame).
func (p *Profile) Breakdown() (gc, gvl int) {
	for _, st := range p.Stacks {
		inGC, inGVL := false, false
		for _, id := range st.Frames {
			switch p.Frames[id].Kind {
			case KindGC:
				inGC = true
			case KindGVL:
				inGVL = true
			}
		}
		if inGC {
			gc += st.Count
		}
		if inGVL {
			gvl += st.Count
		}
	}
	return gc, gvl
}

// Synthetic tells whether a frame is one the sampler added (a process or
// thread root) rather than one of Ruby's.
func (f Frame) Synthetic() bool { return f.Kind == KindProcess || f.Kind == KindThread }

// PrefixShares returns, for each stack prefix of p (PrefixKey of its
// frames' names, root first), its share of p's samples in percent: what
// a differential view compares a node of another recording's tree with.
func (p *Profile) PrefixShares(lines bool) map[string]float64 {
	counts := map[string]int{}
	for _, st := range p.Stacks {
		key := ""
		for _, id := range st.Frames {
			key = PrefixKey(key, p.Frames[id].Name(lines))
			counts[key] += st.Count
		}
	}
	out := make(map[string]float64, len(counts))
	for key, n := range counts {
		out[key] = 100 * float64(n) / float64(p.Samples) // as output.Pct
	}
	return out
}

// PrefixKey is the key of the stack prefix prefix (a PrefixKey itself,
// "" for the root) followed by the frame named name.
func PrefixKey(prefix, name string) string { return prefix + name + "\x00" }
