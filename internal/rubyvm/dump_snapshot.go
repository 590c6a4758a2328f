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
	st, err := v.WithTarget(snap).HeapDump(w, opt)
	return st, ss, err
}
