// Package stacks captures the stacks of a process's threads from any
// target (a running process, paused for the read; a core; a snapshot) as
// one model: each thread's Ruby frames, its native frames, or both in one
// call order, with the size of the largest native frame. Every command that
// shows stacks (stack, core, threads, the crash handler, the sampler)
// captures them here; what they print is theirs.
package stacks

import (
	"fmt"
	"path"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/unwind"
)

// Kind is what a frame is.
type Kind string

// The kinds of frame. The first three are rubyvm's kinds of Ruby frame.
const (
	// KindRuby is a frame of Ruby code (an iseq).
	KindRuby Kind = Kind(rubyvm.KindRuby)
	// KindCFunc is a C method's frame, as Ruby's stack holds it.
	KindCFunc Kind = Kind(rubyvm.KindCFunc)
	// KindUnreadable is a Ruby frame whose contents could not be read.
	KindUnreadable Kind = Kind(rubyvm.KindUnreadable)
	// KindNative is a machine frame, unwound with the code's CFI.
	KindNative Kind = "native"
)

// Frame is one frame of a thread's stack: a Ruby frame (Kind KindRuby,
// KindCFunc or KindUnreadable, with Label, BaseLabel, Path and Line) or a
// native one (KindNative, with Native).
type Frame struct {
	Kind Kind
	// Label is how Ruby names the frame ("Foo#bar", "block in Foo#bar");
	// BaseLabel is the bare method name.
	Label     string
	BaseLabel string
	// Path and Line are the Ruby source line the frame runs.
	Path string
	Line int
	// Method is the define_method name of a Ruby frame running a
	// method's block (rubyvm.Frame.Method).
	Method string
	// Native is a native frame's: its pc, CFA, size, object, function and
	// source line.
	Native unwind.Frame
}

// Name is how a frame reads: a Ruby frame's label, a native frame's
// function (+offset) or object+offset.
func (f Frame) Name() string {
	if f.Kind != KindNative {
		return f.Label
	}
	return f.Native.Name()
}

// Object is a native frame's object file, by its base name ("" for a Ruby
// frame).
func (f Frame) Object() string {
	if f.Kind != KindNative {
		return ""
	}
	return path.Base(f.Native.Object)
}

// rubyFrame makes a Frame of a frame of Ruby's stack.
func rubyFrame(f rubyvm.Frame) Frame {
	return Frame{Kind: Kind(f.Kind), Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, Line: f.Line, Method: f.Method}
}

// RubyFrames makes Frames of a Ruby stack (nil for nil).
func RubyFrames(fs []rubyvm.Frame) []Frame {
	if fs == nil {
		return nil
	}
	out := make([]Frame, len(fs))
	for i, f := range fs {
		out[i] = rubyFrame(f)
	}
	return out
}

// NativeFrames makes Frames of native frames alone.
func NativeFrames(fs []unwind.Frame) []Frame {
	out := make([]Frame, len(fs))
	for i, f := range fs {
		out[i] = Frame{Kind: KindNative, Native: f}
	}
	return out
}

// String is a frame as a test failure or a log line shows it.
func (f Frame) String() string {
	switch f.Kind {
	case KindNative:
		return fmt.Sprintf("%s [%s]", f.Name(), f.Object())
	case KindRuby:
		return fmt.Sprintf("%s (%s:%d)", f.Label, f.Path, f.Line)
	}
	return fmt.Sprintf("%s <%s>", f.Label, f.Kind)
}
