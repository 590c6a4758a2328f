// Package corefile opens a core file and the Ruby VM it holds, for every
// command that reads cores (core, core --heap-dump, core --native), and
// says what to do when the files the process had mapped are not on this
// machine.
package corefile

import (
	"errors"
	"fmt"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// Core is an open core and its Ruby VM.
type Core struct {
	*target.Core
	VM *rubyvm.VM
}

// Open opens the core at path (opts: where the crashed machine's files
// are) and finds its Ruby VM with vmOpts. note, when set, is told at once
// what the user should know of how the core is read, even when its VM is
// then not found: what the core lacks, how the VM was found when not the
// ordinary way.
func Open(path string, opts target.CoreOptions, vmOpts rubyvm.Options, note func(string)) (*Core, error) {
	if note == nil {
		note = func(string) {}
	}
	t, err := target.OpenCore(path, opts)
	if err != nil {
		return nil, err
	}
	if w := t.Truncated(); w != "" {
		note("warning: " + w)
	}
	vm, err := rubyvm.OpenWith(t, vmOpts)
	if err != nil {
		t.Close()
		return nil, Error(t, err)
	}
	if fb := vm.Fallbacks(); fb != "" {
		note(fb)
	}
	return &Core{Core: t, VM: vm}, nil
}

// Close releases the VM and the core.
func (c *Core) Close() {
	c.VM.Close()
	c.Core.Close()
}

// Error names the core t in err and says what to do about files that are
// not on this machine, or not the ones the process ran.
func Error(t *target.Core, err error) error {
	advice := "pass --sysroot DIR with the crashed machine's files at their paths"
	var missing *target.MissingFileError
	if errors.As(err, &missing) && missing.Path == t.Exe() || errors.Is(err, target.ErrFileMismatch) {
		advice += ", or --exe PATH for the executable"
	}
	switch {
	case missing != nil && missing.Tried == "":
		return fmt.Errorf("core %s: %w, and the core does not hold what rbscope needs of it", t.Path(), missing)
	case missing != nil:
		return fmt.Errorf("core %s: the process had %s mapped, and it is not on this machine (looked for %s); %s",
			t.Path(), missing.Path, missing.Tried, advice)
	case errors.Is(err, target.ErrFileMismatch):
		return fmt.Errorf("core %s: %w; %s", t.Path(), err, advice)
	}
	return fmt.Errorf("core %s: %w", t.Path(), err)
}
