package main

import (
	"fmt"
	"os"

	"github.com/rbscope/rbscope/internal/liveproc"
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
	p, err := liveproc.Open(pid, liveproc.Options{VM: vmOptions})
	if err != nil {
		return nil, nil, nil, err
	}
	noteVersion(p.VM)
	noteLayout(p.VM)
	return p.Live, p.VM, p.Close, nil
}

// noteVersion says on stderr, in one line, how a live process's release
// was found when its image's ruby_version did not say it (proven from its
// heap); the user's own --force-version goes unsaid. A core says it among
// its fallbacks (corefile).
func noteVersion(vm *rubyvm.VM) {
	if vm.VersionFrom != "" && vm.VersionFrom != "--force-version" {
		fmt.Fprintf(os.Stderr, "rbscope: Ruby %s taken from %s\n", vm.Version, vm.VersionFrom)
	}
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
