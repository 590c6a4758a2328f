// Package mixedstack puts a thread's Ruby frames and its native frames in
// one call order: the Ruby frames one call of the VM's exec loop runs go
// beside that call's native frame, the way the machine stack holds them.
package mixedstack

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/unwind"
)

// KindNative is the kind of a native frame.
const KindNative = "native"

// Frame is a Ruby frame (Kind, Label, BaseLabel, Path, Line, as
// rubyvm.Frame has them) or a native one (Kind "native" and the rest).
type Frame struct {
	Kind      string `json:"kind"`
	Label     string `json:"label,omitempty"`
	BaseLabel string `json:"base_label,omitempty"`
	Path      string `json:"path,omitempty"`
	Line      int    `json:"line,omitempty"`

	Function  string         `json:"function,omitempty"`
	Object    string         `json:"object,omitempty"`
	Offset    string         `json:"offset,omitempty"`
	PC        string         `json:"pc,omitempty"`
	CFA       string         `json:"cfa,omitempty"`
	FrameSize uint64         `json:"frame_size,omitempty"`
	File      string         `json:"file,omitempty"` // a native frame's source file (Line is its line)
	Signal    *unwind.Signal `json:"signal,omitempty"`
	// Native keeps the native frame this one was made from.
	Native *unwind.Frame `json:"-"`
}

// Merged is a thread's frames in call order, innermost first, and whether
// every group of Ruby frames found its exec-loop frame (when not, the
// groups left over follow the native frames).
type Merged struct {
	Frames  []Frame
	Aligned bool
}

// Merge interleaves a thread's Ruby frames (read
// with rubyvm.WithExecBoundaries) and its native frames. Each group of
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
		out.Frames = append(out.Frames, rubyFrames(before[i])...)
		out.Frames = append(out.Frames, nativeFrame(nf))
	}
	for ; g < len(groups); g++ {
		out.Frames = append(out.Frames, rubyFrames(groups[g])...)
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

func rubyFrames(fs []rubyvm.Frame) []Frame {
	out := make([]Frame, len(fs))
	for i, f := range fs {
		out[i] = Frame{Kind: f.Kind, Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, Line: f.Line}
	}
	return out
}

// Name is how a frame reads: a Ruby frame's label, a native frame's
// function (+offset) or object+offset.
func (f Frame) Name() string {
	switch {
	case f.Kind != KindNative:
		return f.Label
	case f.Native != nil:
		return f.Native.Name()
	case f.Function != "":
		return f.Function
	}
	return path.Base(f.Object) + "+" + f.Offset
}

// NativeFrames converts native frames alone (a thread that runs no Ruby).
func NativeFrames(fs []unwind.Frame) []Frame {
	out := make([]Frame, len(fs))
	for i, f := range fs {
		out[i] = nativeFrame(f)
	}
	return out
}

func nativeFrame(f unwind.Frame) Frame {
	n := f
	return Frame{Kind: KindNative, Function: f.Function, Object: f.Object, Offset: fmt.Sprintf("%#x", f.Offset),
		PC: fmt.Sprintf("%#x", f.PC), CFA: fmt.Sprintf("%#x", f.CFA), FrameSize: f.Size, File: f.File, Line: f.Line, Signal: f.Signal, Native: &n}
}
