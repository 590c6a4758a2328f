package rubyvm

import (
	"io"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
)

// SnapshotStats says what HeapDumpSnapshot's copy cost the process.
type SnapshotStats struct {
	Paused time.Duration // how long its threads stood still
	Bytes  int64         // the memory copied meanwhile
	Held   int64         // what the copy takes (see target.Snapshot)
}

// HeapDumpSnapshot is HeapDump of a live process that stands still only
// while its memory is copied (target.Live.Snapshot): it runs again before
// anything is decoded, and the dump is decoded from the copy, with the
// machine_context root from the registers the copy kept. v must read l.
func (v *VM) HeapDumpSnapshot(l *target.Live, w io.Writer, opt DumpOptions) (*DumpStats, SnapshotStats, error) {
	if err := v.Supports(layout.FeatureDump); err != nil {
		return nil, SnapshotStats{}, err
	}
	v.PrepareHeapDump()
	snap, err := l.Snapshot()
	if err != nil {
		return nil, SnapshotStats{}, err
	}
	defer snap.Close()
	ss := SnapshotStats{Paused: snap.Paused, Bytes: snap.Bytes, Held: snap.Held}
	opt.MachineContext = true
	st, err := v.withTarget(snap).HeapDump(w, opt)
	return st, ss, err
}

// withTarget returns a VM that reads the same process through t (a
// snapshot of it, or a budgeted reader): it keeps what v found (the
// Build, the layout, the globals it located), not what it cached of
// memory, nor the mappings it was opened with. It is never closed: v owns the image and the Build.
func (v *VM) withTarget(t target.Target) *VM {
	w := *v
	w.T = t
	w.m = mem{t: t}
	w.tpTIDs = nil
	w.live = false
	// The mappings are t's: a snapshot's are those of its pause, which
	// may hold heap pages the process mapped after v was opened (read
	// against v's, a benign process mapping a page in between was
	// refused as a layout that does not fit).
	if maps, err := t.Mappings(); err == nil && len(maps) > 0 {
		w.maps = maps
	}
	w.ForgetCaches()
	return &w
}
