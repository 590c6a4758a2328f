package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/mixedstack"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/unwind"
)

// nativeDump is the JSON document `rbscope stack --native --json` prints:
// stackDump's, with every native thread and frames of both kinds.
type nativeDump struct {
	PID            int            `json:"pid"`
	RubyVersion    string         `json:"ruby_version"`
	Description    string         `json:"ruby_description"`
	Layout         string         `json:"layout"`
	LayoutAdjusted []string       `json:"layout_adjusted,omitempty"`
	Threads        []nativeThread `json:"threads"`
}

// nativeThread is one native thread: a Ruby thread's (Ruby set) or not.
type nativeThread struct {
	TID    int                `json:"tid"`
	Name   string             `json:"name"`
	Ruby   bool               `json:"ruby"`
	Main   bool               `json:"main"`
	Status string             `json:"status,omitempty"`
	GVL    bool               `json:"gvl"`
	Frames []mixedstack.Frame `json:"frames"`
	// LargestFrame is the size of the thread's largest native frame.
	LargestFrame uint64 `json:"largest_frame"`
	// RubyPlacement says when the Ruby frames could not all be put beside
	// the exec-loop frame running them ("after the native frames").
	RubyPlacement string `json:"ruby_placement,omitempty"`
	Error         string `json:"error,omitempty"`
	NativeError   string `json:"native_error,omitempty"`
}

// largeFrame is the size from which the text output marks a native frame.
const largeFrame = 64 << 10

// readNativeStacks reads every thread's Ruby and native stacks with the
// process stopped, and puts each thread's frames in one call order.
func readNativeStacks(pid int, lines bool) (*nativeDump, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	maps, err := t.Mappings()
	if err != nil {
		return nil, err
	}
	u := unwind.New(t, maps)
	defer u.Close()
	u.Preload() // the CFI is read before the process stops, not during
	var threads []rubyvm.Thread
	native := map[int][]unwind.Frame{}
	nativeErr := map[int]error{}
	var stopped []int
	err = t.WhilePaused(nil, func(s *target.Stopped) error {
		var err error
		if threads, err = vm.Threads(rubyvm.WithExecBoundaries()); err != nil {
			return err
		}
		forkedMainTID(pid, threads)
		for tid := range s.Threads {
			stopped = append(stopped, tid)
			regs, err := s.Regs(tid)
			if err != nil {
				nativeErr[tid] = err
				continue
			}
			native[tid], nativeErr[tid] = u.Unwind(unwind.FromTarget(regs))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	for _, fs := range native { // the process runs again
		u.Symbolize(fs)
		if lines {
			u.Lines(fs)
		}
	}
	d := &nativeDump{PID: pid, RubyVersion: vm.Version, Description: vm.Description, Layout: vm.Layout.Source, LayoutAdjusted: vm.Adjusted}
	names := map[int]string{}
	if tasks, err := t.Tasks(); err == nil {
		for _, k := range tasks {
			names[k.TID] = k.Comm
		}
	}
	d.Threads = mixThreads(threads, stopped, native, nativeErr, names)
	return d, nil
}

// mixThreads makes the threads of a --native document: each Ruby thread
// with its Ruby and native frames in one call order, then the native
// threads (tids) that run no Ruby, with their native frames.
func mixThreads(threads []rubyvm.Thread, tids []int, native map[int][]unwind.Frame, nativeErr map[int]error, names map[int]string) []nativeThread {
	var out []nativeThread
	seen := map[int]bool{}
	for _, th := range threads {
		nt := nativeThread{TID: th.TID, Name: th.Name, Ruby: true, Main: th.Main, Status: th.Status, GVL: th.GVL, Error: th.Error}
		fs, ok := native[th.TID]
		nerr, failed := nativeErr[th.TID]
		switch {
		case ok && th.TID > 0:
			m := mixedstack.Merge(th.Frames, fs)
			nt.Frames = m.Frames
			if !m.Aligned {
				nt.RubyPlacement = "after the native frames (the exec loop's frames were not found)"
			}
			nt.NativeError = errString(nerr)
		case failed && th.TID > 0: // stopped, but its registers could not be read
			nt.Frames = mixedstack.Merge(th.Frames, nil).Frames
			nt.NativeError = errString(nerr)
		default:
			nt.Frames = mixedstack.Merge(th.Frames, nil).Frames
			nt.NativeError = "not on a native thread now"
		}
		if th.TID > 0 && (ok || failed) {
			seen[th.TID] = true // not listed again as a native thread
		}
		out = append(out, withLargest(nt))
	}
	sort.Ints(tids)
	for _, tid := range tids {
		if !seen[tid] {
			out = append(out, withLargest(nativeThread{TID: tid, Name: names[tid], Frames: mixedstack.NativeFrames(native[tid]), NativeError: errString(nativeErr[tid])}))
		}
	}
	return out
}

func withLargest(nt nativeThread) nativeThread {
	for _, f := range nt.Frames {
		nt.LargestFrame = max(nt.LargestFrame, f.FrameSize)
	}
	return nt
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func printNativeStacks(w io.Writer, d *nativeDump) {
	for i, th := range d.Threads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printThreadHeader(w, th.Name, th.Main, th.Ruby, th.TID, th.Status, th.GVL)
		width := 0
		for _, f := range th.Frames {
			width = max(width, len(textsafe.Clean(f.Name())))
		}
		for _, f := range th.Frames {
			name := textsafe.Clean(f.Name())
			switch {
			case f.Kind == mixedstack.KindNative:
				where := filepath.Base(f.Object)
				if strings.HasPrefix(f.Object, "[") {
					where = "generated code, no CFI"
				}
				if f.Signal != nil {
					where += fmt.Sprintf(", signal %d at %#x", f.Signal.Number, f.Signal.Addr)
				}
				fmt.Fprintf(w, "  %-*s  [%s] %s", width, name, textsafe.Clean(where), frameBytes(f.FrameSize))
				if f.File != "" {
					fmt.Fprintf(w, "  %s:%d", textsafe.Clean(f.File), f.Line)
				}
				if f.FrameSize >= largeFrame {
					fmt.Fprint(w, "  <- LARGE FRAME")
				}
				fmt.Fprintln(w)
			case f.Kind == rubyvm.KindRuby:
				fmt.Fprintf(w, "  %-*s  %s:%d\n", width, name, textsafe.Clean(f.Path), f.Line)
			case f.Kind == rubyvm.KindCFunc:
				fmt.Fprintf(w, "  %-*s  <cfunc>\n", width, name)
			default:
				fmt.Fprintf(w, "  %-*s  <unreadable>\n", width, name)
			}
		}
		if th.RubyPlacement != "" {
			fmt.Fprintf(w, "  (Ruby frames placed %s)\n", th.RubyPlacement)
		}
		if th.Error != "" {
			fmt.Fprintf(w, "  (Ruby stack incomplete: %s)\n", textsafe.Clean(th.Error))
		}
		if th.NativeError != "" {
			fmt.Fprintf(w, "  (native stack ends: %s)\n", textsafe.Clean(th.NativeError))
		}
	}
}

// frameBytes prints a frame size, exactly.
func frameBytes(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d B", n)
}
