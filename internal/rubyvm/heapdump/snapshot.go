package heapdump

import (
	"io"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
)

// SnapshotStats says what WriteSnapshot's copy cost the process.
type SnapshotStats struct {
	Paused time.Duration // how long its threads stood still
	Bytes  int64         // the memory copied meanwhile
	Held   int64         // what the copy takes (see target.Snapshot)
}

// WriteSnapshot is Write of a live process that stands still only
// while its memory is copied (target.Live.Snapshot): it runs again before
// anything is decoded, and the dump is decoded from the copy, with the
// machine_context root from the registers the copy kept. v must read l.
func WriteSnapshot(v *rubyvm.VM, l *target.Live, w io.Writer, opt Options) (*Stats, SnapshotStats, error) {
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
	st, err := Write(v.WithTarget(snap), w, opt)
	return st, ss, err
}
