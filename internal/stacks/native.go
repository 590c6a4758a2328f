package stacks

import (
	"errors"

	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// nativeUnwinder unwinds the native stacks of a target's threads from
// their registers: a Reader's, the one user of the unwinder. It is made
// while the target runs (reading the code's CFI then, not during a
// pause), unwinds while the threads stand still, and names the frames
// after they run again. It serves every read of its Reader; it notices
// code mapped since it was made, and Refresh makes it anew then.
type nativeUnwinder struct {
	t     target.Target
	u     *unwind.Unwinder
	stale bool
}

// newNativeUnwinder reads t's mappings and prepares to unwind its
// threads. It reads the CFI of every mapped object now (preload): call it
// before a live target stops.
func newNativeUnwinder(t target.Target) (*nativeUnwinder, error) {
	w := &nativeUnwinder{t: t}
	if err := w.make(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *nativeUnwinder) make() error {
	maps, err := w.t.Mappings()
	if err != nil {
		return err
	}
	if w.u != nil {
		w.u.Close()
	}
	w.u = unwind.New(w.t, maps)
	w.u.Preload()
	w.stale = false
	return nil
}

// Refresh makes the unwinder anew when an unwind since the last one met
// code outside every mapping it knew (code mapped since). It runs while
// the target runs.
func (w *nativeUnwinder) Refresh() error {
	if !w.stale {
		return nil
	}
	return w.make()
}

// Unwind unwinds a thread's native stack from its registers (a core's, a
// snapshot's, or a paused live thread's: call it while the thread stands
// still). The frames are not yet named (Name).
func (w *nativeUnwinder) Unwind(regs target.Regs) ([]unwind.Frame, error) {
	frames, err := w.u.Unwind(unwind.FromTarget(regs))
	if errors.Is(err, unwind.ErrUnmapped) {
		// perhaps code mapped since the unwinder was made (code without
		// CFI, such as YJIT's, is in a known mapping: no reason to
		// remake it for that)
		w.stale = true
	}
	return frames, err
}

// Name names unwound frames (their functions and, with lines, their
// source lines from DWARF), once the threads run again.
func (w *nativeUnwinder) Name(frames []unwind.Frame, lines bool) {
	w.u.Symbolize(frames)
	if lines {
		w.u.Lines(frames)
	}
}

// Close releases the files the unwinder holds.
func (w *nativeUnwinder) Close() {
	if w.u != nil {
		w.u.Close()
	}
}
