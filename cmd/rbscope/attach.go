package main

import (
	"os"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/wire"
)

// vmOptions are the root command's options for finding a Ruby VM
// (--force-version), used by every command that opens one: openRuby, the
// sampler's (record, top) and core. Their one BuildCache lets the
// processes of one Ruby image that a run reads (record --subprocesses of
// a server's workers, the agent's) share what is read of it.
var vmOptions = rubyvm.Options{Builds: rubyvm.NewBuildCache()}

// openRuby attaches to a live process and finds its Ruby VM. The returned
// close releases both.
func openRuby(pid int) (*target.Live, *rubyvm.VM, func(), error) {
	t, err := target.Attach(pid)
	if err != nil {
		return nil, nil, nil, err
	}
	vm, err := rubyvm.OpenWith(t, vmOptions)
	if err != nil {
		t.Close()
		return nil, nil, nil, err
	}
	noteLayout(vm)
	return t, vm, func() { vm.Close(); t.Close() }, nil
}

// whilePaused runs read with every thread of the target stopped, when
// pause is set, in one target.WhilePaused session: the threads run again
// whatever read returns, and read runs on the tracer thread.
func whilePaused(t *target.Live, pause bool, read func() error) error {
	if !pause {
		return read()
	}
	return t.WhilePaused(nil, func(*target.Stopped) error { return read() })
}

// printJSON prints the JSON object v on stdout, schema_version first.
func printJSON(v any) error { return wire.Write(os.Stdout, v) }
