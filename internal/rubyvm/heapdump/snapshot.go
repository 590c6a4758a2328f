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
	Paused time.Duration // how long its threads stood still, in all
	Bytes  int64         // the memory copied
	Held   int64         // what the copy takes (see target.Snapshot)
	// Stops is how many times the threads stood still, Longest the
	// longest; Method how the copy was made and Fallback why it was not
	// pre-copied (target.Snapshot).
	Stops            int
	Longest          time.Duration
	Method, Fallback string
}

// trimEvery is how many heap pages the dump decodes between two trims of
// a spooled copy (Options.SpoolDir): 16 MB of 64 KB pages.
const trimEvery = 256

// WriteSnapshot is Write of a live process that stands still only
// while its memory is copied (target.Live.Snapshot): it runs again before
// anything is decoded, and the dump is decoded from the copy, with the
// machine_context root from the registers the copy kept. v must read l.
func WriteSnapshot(v *rubyvm.VM, l *target.Live, w io.Writer, opt Options) (*Stats, SnapshotStats, error) {
	if err := v.Supports(layout.FeatureDump); err != nil {
		return nil, SnapshotStats{}, err
	}
	v.PrepareHeapDump()
	snap, err := l.SnapshotWith(target.SnapshotOptions{SpoolDir: opt.SpoolDir})
	if err != nil {
		return nil, SnapshotStats{}, err
	}
	defer snap.Close()
	ss := SnapshotStats{Paused: snap.Paused, Bytes: snap.Bytes, Held: snap.Held,
		Stops: snap.Stops, Longest: snap.Longest, Method: snap.Method, Fallback: snap.Fallback}
	if opt.SpoolDir != "" {
		// The copy's pages read so far leave rbscope's resident memory
		// as the dump goes on (the page cache keeps them).
		progress := opt.Progress
		opt.Progress = func(done, total int) {
			if done%trimEvery == 0 {
				snap.Trim()
			}
			if progress != nil {
				progress(done, total)
			}
		}
	}
	opt.MachineContext = true
	st, err := Write(v.WithTarget(snap), w, opt)
	return st, ss, err
}
