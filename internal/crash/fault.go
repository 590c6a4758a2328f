package crash

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/unwind"
)

// Fault names the fault a crashing thread's stack shows beneath a signal
// handler: the signal a signal frame delivered, its address, and the
// function it interrupted. A Ruby process that segfaults runs Ruby's own
// SIGSEGV handler, which prints its [BUG] report and aborts: the kernel
// then reports SIGABRT (final), not the fault. It returns "" when the
// stack holds no signal frame.
func Fault(frames []unwind.Frame, final int) string {
	for i, f := range frames {
		if f.Signal == nil {
			continue
		}
		in := "an unknown function"
		if i+1 < len(frames) {
			in = frames[i+1].Name()
			if frames[i+1].Function != "" {
				in += " (" + filepath.Base(frames[i+1].Object) + ")"
			}
		}
		s := fmt.Sprintf("%s at %#x in %s", SignalName(f.Signal.Number), f.Signal.Addr, in)
		if final > 0 && final != f.Signal.Number {
			s += fmt.Sprintf("; its handler then ended the process with %s", SignalName(final))
			if final == int(unix.SIGABRT) {
				s += " (Ruby's [BUG] handler aborts)"
			}
		}
		return s
	}
	return ""
}
