// Package sampler takes stack samples of Ruby processes at a fixed rate and
// aggregates them into a Profile that the output formats write.
package sampler

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
)

// Frame kinds the sampler adds above Ruby's own (rubyvm.KindRuby/KindCFunc).
const (
	KindProcess = "process" // a root frame "pid NNN" with --subprocesses
	KindThread  = "thread"  // a root frame "thread NAME" with --threads
)

// Frame is one node of a sampled stack.
type Frame struct {
	Kind  string
	Label string
	Path  string
	Line  int
}

// Name is how the frame is shown in flame graphs and collapsed stacks:
// "label (path:line)" for Ruby code, "Owner#name (cfunc)" for C methods.
func (f Frame) Name(withLine bool) string {
	switch f.Kind {
	case rubyvm.KindRuby:
		if withLine && f.Line > 0 {
			return f.Label + " (" + f.Path + ":" + strconv.Itoa(f.Line) + ")"
		}
		return f.Label + " (" + f.Path + ")"
	case rubyvm.KindCFunc:
		return f.Label + " (cfunc)"
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
}

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
	// Unstopped counts the stacks that the default mode read without
	// stopping their thread, as it was off a CPU (Sampler.readConsistent).
	Unstopped int
	// Rate is the requested rate in Hz; Start and Duration bound the run.
	Rate     float64
	Start    time.Time
	Duration time.Duration

	frameIDs map[Frame]int
	stackIDs map[string]int
}

// NewProfile returns an empty profile for a recording at rate Hz.
func NewProfile(rate float64) *Profile {
	return &Profile{Rate: rate, Start: time.Now(), frameIDs: map[Frame]int{}, stackIDs: map[string]int{}}
}

// Add records one stack, given root first.
func (p *Profile) Add(frames []Frame, count int) {
	ids := make([]int, len(frames))
	var key strings.Builder
	for i, f := range frames {
		id, ok := p.frameIDs[f]
		if !ok {
			id = len(p.Frames)
			p.Frames = append(p.Frames, f)
			p.frameIDs[f] = id
		}
		ids[i] = id
		key.WriteString(strconv.Itoa(id))
		key.WriteByte(',')
	}
	k := key.String()
	if si, ok := p.stackIDs[k]; ok {
		p.Stacks[si].Count += count
	} else {
		p.stackIDs[k] = len(p.Stacks)
		p.Stacks = append(p.Stacks, Stack{Frames: ids, Count: count})
	}
	p.Samples += count
}

// FunctionStat is a function's self and total sample counts.
type FunctionStat struct {
	Frame       Frame
	Self, Total int
}

// Functions aggregates the profile by function (frames without lines),
// sorted by self count, then total. A function that recurses counts once
// per sample in its total.
func (p *Profile) Functions() []FunctionStat {
	stats := map[Frame]*FunctionStat{}
	for _, st := range p.Stacks {
		seen := map[Frame]bool{}
		for i, id := range st.Frames {
			f := p.Frames[id]
			if f.Kind == KindProcess || f.Kind == KindThread {
				continue
			}
			fn := f.Function()
			s, ok := stats[fn]
			if !ok {
				s = &FunctionStat{Frame: fn}
				stats[fn] = s
			}
			if !seen[fn] {
				s.Total += st.Count
				seen[fn] = true
			}
			if i == len(st.Frames)-1 {
				s.Self += st.Count
			}
		}
	}
	out := make([]FunctionStat, 0, len(stats))
	for _, s := range stats {
		out = append(out, *s)
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

// Merge adds the samples of q to p.
func (p *Profile) Merge(q *Profile) {
	for _, st := range q.Stacks {
		frames := make([]Frame, len(st.Frames))
		for i, id := range st.Frames {
			frames[i] = q.Frames[id]
		}
		p.Add(frames, st.Count)
	}
	p.Ticks += q.Ticks
	p.Errors += q.Errors
	p.Unstopped += q.Unstopped
	p.Duration += q.Duration
}
