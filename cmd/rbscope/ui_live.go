package main

import (
	"context"
	"time"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/ui"
	"github.com/rbscope/rbscope/internal/wire"
)

// uiLive is what rbscope ui's Processes view does to a process: stack,
// heap dump and record, run by the commands' own code.
type uiLive struct{}

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
