// Package heapfile writes a live process's heap to a file, whole or not
// at all, in ObjectSpace.dump_all's format: read from a copy of the
// process's memory taken in one short pause (a snapshot), or read in
// place without a pause. heap dump and the UI's Processes view run it; the
// command keeps its flags and printing.
package heapfile

import (
	"errors"
	"fmt"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/target"
)

// Options say how a heap is written.
type Options struct {
	// Pause reads the heap from a snapshot (the process stands still for
	// the copy); else it is read in place as the process runs, and objects
	// that change meanwhile are skipped as torn.
	Pause bool
	// Redact writes strings' lengths but not their bytes.
	Redact bool
	// VM is how the process's Ruby VM is found (the command's options).
	VM rubyvm.Options
	// Progress, when set, is called as heap pages are done.
	Progress func(done, total int)
}

// Result is what a dump wrote.
type Result struct {
	Stats    *heapdump.Stats
	Snapshot heapdump.SnapshotStats
	// Took is how long reading and writing took.
	Took time.Duration
	// Compression is the file's, and Stored its size (Stats.Bytes is the
	// dump's, before compression).
	Compression heap.Compression
	Stored      int64
	// Version is the process's Ruby release, and LayoutNote what rubyvm
	// noted of its layout (empty for none).
	Version    string
	LayoutNote string
}

// Write writes process pid's heap to path, compressed as its name asks
// (Create). An output that cannot be written is refused before the
// process is touched; the file appears only once it is whole.
func Write(pid int, path string, o Options) (Result, error) {
	var res Result
	out, err := Create(path)
	if err != nil {
		return res, err
	}
	defer out.Abort() // no-op after Commit
	p, err := liveproc.Open(pid, liveproc.Options{VM: o.VM})
	if err != nil {
		return res, err
	}
	defer p.Close()
	t, vm := p.Live, p.VM
	res.Version, res.LayoutNote = vm.Version, vm.LayoutNote
	opts := heapdump.Options{RedactStrings: o.Redact, Progress: o.Progress}
	start := time.Now()
	if o.Pause {
		res.Stats, res.Snapshot, err = heapdump.WriteSnapshot(vm, t, out, opts)
	} else {
		vm.PrepareHeapDump()
		res.Stats, err = heapdump.Write(vm, out, opts)
	}
	if errors.Is(err, target.ErrSnapshotTooBig) {
		return res, fmt.Errorf("pid %d: %w; --nonblocking dumps it without a copy", pid, err)
	}
	if err != nil {
		return res, fmt.Errorf("pid %d: %w", pid, err)
	}
	err = out.Commit()
	res.Took = time.Since(start)
	res.Compression, res.Stored = out.Compression, out.Stored()
	return res, err
}
