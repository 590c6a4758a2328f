package stacks

import (
	"slices"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Merged is a thread's frames in call order, innermost first, and whether
// every group of Ruby frames found its exec-loop frame (when not, the
// groups left over follow the native frames).
type Merged struct {
	Frames  []Frame
	Aligned bool
}

// Merge interleaves a thread's Ruby frames (read with exec boundaries
// marked, rubyvm.Frame.ExecEnds) and its native frames. Each group of
// Ruby frames that one call of the exec loop runs (ending at a frame
// marked ExecEnds) goes just inside the native frame of that call, where a
// debugger would show the interpreter running them; a C method's frame at
// the group's start goes beside its C function instead, just inside the
// VM's call of it (rubyvm.CFuncCallPrefixes), where the native frames name
// that call.
func Merge(ruby []rubyvm.Frame, native []unwind.Frame) Merged {
	var groups [][]rubyvm.Frame
	start := 0
	for i, f := range ruby {
		if f.ExecEnds {
			groups = append(groups, ruby[start:i+1])
			start = i + 1
		}
	}
	if start < len(ruby) {
		groups = append(groups, ruby[start:])
	}
	before := map[int][]rubyvm.Frame{} // native index -> Ruby frames just inside it
	g, segment := 0, 0
	for i, nf := range native {
		if !execLoop(nf) {
			continue
		}
		if i > 0 && execLoop(native[i-1]) {
			segment = i + 1
			continue // one call that shows as two frames
		}
		if g < len(groups) {
			group := groups[g]
			var calls []int // the VM's calls of C functions in this segment, innermost first
			for k := segment; k < i; k++ {
				if cfuncCall(native[k]) {
					calls = append(calls, k)
				}
			}
			n := 0
			for n < len(group) && n < len(calls) && group[n].Kind == rubyvm.KindCFunc {
				before[calls[n]] = append(before[calls[n]], group[n])
				n++
			}
			before[i] = append(before[i], group[n:]...)
			g++
		}
		segment = i + 1
	}
	out := Merged{Frames: make([]Frame, 0, len(ruby)+len(native)), Aligned: g == len(groups)}
	for i, nf := range native {
		out.Frames = append(out.Frames, RubyFrames(before[i])...)
		out.Frames = append(out.Frames, Frame{Kind: KindNative, Native: nf})
	}
	for ; g < len(groups); g++ {
		out.Frames = append(out.Frames, RubyFrames(groups[g])...)
	}
	return out
}

// cfuncCall tells whether a native frame is the VM calling a C method.
func cfuncCall(f unwind.Frame) bool {
	for _, p := range rubyvm.CFuncCallPrefixes {
		if strings.HasPrefix(f.Function, p) {
			return true
		}
	}
	return false
}

// execLoop tells whether a native frame is a call of the VM's exec loop.
func execLoop(f unwind.Frame) bool { return slices.Contains(rubyvm.ExecLoopFunctions, f.Function) }
