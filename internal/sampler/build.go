package sampler

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampling"
	"github.com/rbscope/rbscope/internal/stacks"
)

// addSamples adds a sample of each of threads that wanted accepts to prof:
// its Ruby frames (beside its native ones when they were read), under a
// process and a thread root frame when asked for, with the GC's phase
// above the GVL holder's and, for a thread waiting for the GVL, that leaf
// (with Options.GVL, or for every thread: all); with all, a thread blocked
// on a Mutex, a Queue or a join gets that wait's leaf (sampling.WaitFrame).
// With native, a thread's native frames unwound at this tick (p.reader) go
// beside its Ruby frames.
func (s *Sampler) addSamples(prof *profile.Profile, p *proc, threads []rubyvm.Thread, gc rubyvm.GCPhase, now time.Time, wanted func(rubyvm.Thread) bool, tidOf func(rubyvm.Thread) int, all, native bool) {
	for _, th := range threads {
		if !wanted(th) {
			continue
		}
		if all && th.Status == "dead" {
			continue
		}
		if th.Error != "" {
			prof.Errors++
			continue
		}
		if len(th.Frames) == 0 {
			continue // a thread not yet running Ruby code
		}
		frames := s.frames[:0] // Add copies what it keeps
		if s.opts.Subprocesses {
			frames = append(frames, profile.Frame{Kind: profile.KindProcess, Label: "pid " + strconv.Itoa(p.pid)})
		}
		if s.opts.Threads {
			frames = append(frames, profile.Frame{Kind: profile.KindThread, Label: "thread " + sampling.ThreadName(th)})
		}
		if nf, _, _ := p.reader.Native(tidOf(th)); len(nf) > 0 && native {
			mixed := stacks.Merge(th.Frames, nf).Frames
			for i := len(mixed) - 1; i >= 0; i-- {
				frames = append(frames, profileFrame(mixed[i]))
			}
		} else {
			for i := len(th.Frames) - 1; i >= 0; i-- {
				frames = append(frames, sampling.ProfileFrame(th.Frames[i]))
			}
		}
		switch {
		case th.GVL && gc != rubyvm.GCIdle:
			frames = append(frames, sampling.GCFrames(gc)...)
		case (s.opts.GVL || all) && waitsForGVL(th):
			frames = append(frames, profile.Frame{Kind: profile.KindGVL, Label: profile.LabelGVLWait})
		case all:
			if f, ok := sampling.WaitFrame(th); ok {
				frames = append(frames, f)
			}
		}
		s.frames = frames
		// A thread sampled where it was sampled last (a hot loop) counts
		// one more of that stack, found without looking up its frames.
		tid := tidOf(th)
		var si int
		if last := p.lastStacks[tid]; last != nil && last.prof == prof && slices.Equal(last.frames, frames) {
			si = last.stack
			prof.AddStackSample(si, now, p.pid, tid, sampling.ThreadName(th))
		} else {
			si = prof.AddSample(frames, now, p.pid, tid, sampling.ThreadName(th))
			p.rememberStack(prof, tid, frames, si)
		}
		if prof == p.wall {
			p.wallAdded = append(p.wallAdded, addedSample{stack: si, tid: tid, thread: sampling.ThreadName(th)})
		}
	}
}

// lastStack is the stack of a thread's last sample: its frames as given to
// prof, and their index in prof's Stacks.
type lastStack struct {
	prof   *profile.Profile
	frames []profile.Frame
	stack  int
}

// maxLastStacks bounds the threads whose last stacks a process keeps.
const maxLastStacks = 256

// rememberStack keeps frames, the stack of thread tid's sample that prof
// has as its stack si, for the thread's next sample (addSamples).
func (p *proc) rememberStack(prof *profile.Profile, tid int, frames []profile.Frame, si int) {
	if p.lastStacks == nil || len(p.lastStacks) >= maxLastStacks {
		p.lastStacks = map[int]*lastStack{}
	}
	last := p.lastStacks[tid]
	if last == nil {
		last = &lastStack{}
		p.lastStacks[tid] = last
	}
	last.prof, last.frames, last.stack = prof, append(last.frames[:0], frames...), si
}

// profileFrame is a mixed frame as profiles keep it: a native frame by its
// function (so that its samples add up whatever the pc), or, unnamed, by
// the start of its function's CFI range; its object is the frame's path.
func profileFrame(f stacks.Frame) profile.Frame {
	if f.Kind != stacks.KindNative {
		return profile.Frame{Kind: profile.Kind(f.Kind), Label: f.Label, Path: f.Path, Line: f.Line, Method: f.Method}
	}
	n := f.Native
	label := n.Function
	if label == "" {
		label = fmt.Sprintf("%s+%#x", filepath.Base(n.Object), n.FuncStart)
		if strings.HasPrefix(n.Object, "[") {
			label = n.Object
		}
	}
	return profile.Frame{Kind: profile.KindNative, Label: label, Path: filepath.Base(n.Object)}
}

// newProfile returns the empty profile a recording with opts starts.
func newProfile(opts Options) *profile.Profile {
	p := profile.NewProfile(opts.Rate)
	if opts.Timeline {
		p.KeepTimeline()
	}
	return p
}
