package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

// largeFrame is the size from which the text output marks a native frame.
const largeFrame = 64 << 10

// printNativeStacks prints every thread's Ruby and native frames, as
// rbscope stack --native does.
func printNativeStacks(w io.Writer, threads []stacks.Thread) {
	for i, th := range threads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printThreadHeader(w, th)
		width := 0
		for _, f := range th.Frames {
			width = max(width, len(textsafe.Clean(f.Name())))
		}
		for _, f := range th.Frames {
			name := textsafe.Clean(f.Name())
			switch {
			case f.Kind == stacks.KindNative:
				n := f.Native
				where := filepath.Base(n.Object)
				if strings.HasPrefix(n.Object, "[") {
					where = "generated code, no CFI"
				}
				if n.Signal != nil {
					where += fmt.Sprintf(", signal %d at %#x", n.Signal.Number, n.Signal.Addr)
				}
				fmt.Fprintf(w, "  %-*s  [%s] %s", width, name, textsafe.Clean(where), frameBytes(n.Size))
				if n.File != "" {
					fmt.Fprintf(w, "  %s:%d", textsafe.Clean(n.File), n.Line)
				}
				if n.Size >= largeFrame {
					fmt.Fprint(w, "  <- LARGE FRAME")
				}
				fmt.Fprintln(w)
			case f.Kind == stacks.KindRuby:
				fmt.Fprintf(w, "  %-*s  %s:%d\n", width, name, textsafe.Clean(f.Path), f.Line)
			case f.Kind == stacks.KindCFunc:
				fmt.Fprintf(w, "  %-*s  <cfunc>\n", width, name)
			default:
				fmt.Fprintf(w, "  %-*s  <unreadable>\n", width, name)
			}
		}
		if th.Unaligned {
			fmt.Fprintf(w, "  (Ruby frames placed %s)\n", wire.UnalignedPlacement)
		}
		if th.Error != "" {
			fmt.Fprintf(w, "  (Ruby stack incomplete: %s)\n", textsafe.Clean(th.Error))
		}
		if th.NativeError != "" {
			fmt.Fprintf(w, "  (native stack ends: %s)\n", textsafe.Clean(th.NativeError))
		}
	}
	printDeadlocks(w, threads)
}

// frameBytes prints a frame size, exactly.
func frameBytes(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d B", n)
}
