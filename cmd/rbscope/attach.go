package main

import (
	"encoding/json"
	"os"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// openRuby attaches to a live process and finds its Ruby VM. The returned
// close releases both (resuming the target if it is still paused).
func openRuby(pid int) (*target.Live, *rubyvm.VM, func(), error) {
	t, err := target.Attach(pid)
	if err != nil {
		return nil, nil, nil, err
	}
	vm, err := rubyvm.Open(t)
	if err != nil {
		t.Close()
		return nil, nil, nil, err
	}
	return t, vm, func() { vm.Close(); t.Close() }, nil
}

// whilePaused runs read with the target paused (when pause is set) and
// always resumes it, whatever read returns.
func whilePaused(t *target.Live, pause bool, read func() error) error {
	if pause {
		if err := t.Pause(); err != nil {
			t.Resume()
			return err
		}
	}
	err := read()
	if rerr := t.Resume(); err == nil {
		err = rerr
	}
	return err
}

// printJSON prints v as indented JSON on stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
