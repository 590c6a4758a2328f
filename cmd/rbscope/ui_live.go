package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/ui"
	"github.com/rbscope/rbscope/internal/wire"
)

// uiLive is rbscope ui's Processes view: the host's Ruby processes, and
// stack, heap dump and record run on them by the commands' own code.
type uiLive struct{}

// imageVersion finds a version in a Ruby image's file name
// (libruby.so.3.4.5, libruby-3.1.so.3.1.2).
var imageVersion = regexp.MustCompile(`[0-9]+\.[0-9]+\.[0-9]+`)

// Processes lists the Ruby processes whose memory this user may read, as
// the commands need to (their /proc/PID/mem opens).
func (uiLive) Processes() ([]ui.LiveProcess, error) {
	found, err := discover.Ruby("/proc", nil)
	if err != nil {
		return nil, err
	}
	out := []ui.LiveProcess{}
	for _, p := range found {
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/mem", p.PID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		unix.Close(fd)
		lp := ui.LiveProcess{PID: p.PID, Command: p.Args}
		if vs := imageVersion.FindAllString(filepath.Base(p.Image), -1); len(vs) > 0 {
			lp.Ruby = vs[len(vs)-1]
		}
		if st, err := procfs.ReadStat(p.PID, 0); err == nil {
			lp.CPUSeconds, lp.Threads = st.CPU().Seconds(), st.NumThreads
		}
		if st, err := procfs.ReadStatus(p.PID, 0); err == nil {
			lp.RSS = st.RSS
		}
		out = append(out, lp)
	}
	return out, nil
}

// Stack is stack -p PID --json's document.
func (uiLive) Stack(pid int) (any, error) {
	p, threads, err := readStacks(pid, stacks.Options{})
	if err != nil {
		return nil, err
	}
	return wire.NewStack(p, threads), nil
}

// HeapDump is heap dump -p PID -o path.
func (uiLive) HeapDump(pid int, path string) error { return heapDump(pid, path, true, false) }

// Record is record -p PID --duration d --format raw -o path, at record's
// default rate.
func (uiLive) Record(ctx context.Context, pid int, d time.Duration, path string) error {
	raw, err := output.Lookup("raw")
	if err != nil {
		return err
	}
	opts := sampler.Options{Rate: 100, Duration: d, VM: vmOptions, Realtime: true, Timeline: raw.Timeline}
	if err := opts.Validate(); err != nil {
		return err
	}
	return record(ctx, pid, nil, opts, false, path, raw, output.Options{Lines: true})
}

var _ ui.Live = uiLive{}
