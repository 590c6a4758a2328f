package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/recording"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/sampling"
)

func newRecordCmd() *cobra.Command {
	var (
		pid      int
		opts     sampler.Options
		outPath  string
		format   string
		noLineno bool
		useEBPF  bool
		cut      cuts
	)
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "record (-p PID | -- COMMAND [ARGS...])",
		Short:       "Sample a Ruby process's stacks and write a profile",
		Long: `Sample the Ruby stacks of a running process (-p PID) or of a command rbscope
starts (-- ruby app.rb ...) at a fixed rate, and write a flame graph, speedscope
or pprof profile, collapsed stacks or a summary.

Recording ends on Ctrl-C, after --duration, or when the target exits or runs
another program in its place (exec, as a server's hot restart does), and the
output is always written. Samples that cannot be read (a thread dying
mid-read, memory changing under --nonblocking) are counted and skipped.
By default only threads the kernel reports as running are sampled; --idle
includes sleeping and waiting threads. --thread samples one thread (or
those a regular expression names), reading no other thread's stack; one
that names none of a running process's threads fails within a second.

Every sample carries the context labels the agent derives from its stack
(endpoint: the Rails controller action or Sinatra route; job: the Sidekiq
or ActiveJob job class), in raw recordings too and as pprof's sample
labels; --endpoint and --job keep the samples of one. A cut that keeps
nothing fails, naming what the recording had.

--ebpf (experimental) takes the samples with a BPF program on each CPU's
clock instead of reading the target from rbscope's own thread: the same
stacks, at a fraction of the CPU a sample, and the target is never paused.
It needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) and rbscope in
the host's PID namespace, and records one process's threads while they are
on a CPU; with --idle, also the time each thread spends off a CPU, read by
a program on the scheduler's context switches as the thread leaves its CPU
(the kernel's BTF needed), counted under the stack it left with (threads
waiting for the GVL get no (waiting for GVL) leaf). It refuses the options
it cannot honour (--gvl, --native, --nonblocking, --subprocesses).`,
		Example: `  rbscope record -p 4242 --duration 30s
  rbscope record --format pprof -o cpu.pb.gz -- ruby app.rb
  rbscope record -p 4242 --subprocesses --threads --format speedscope
  rbscope record -p 4242 --thread 'puma srv tp .*' --endpoint IssuesController#show
  sudo rbscope record --ebpf -p 4242 --duration 30s`,
		RunE: func(c *cobra.Command, args []string) error {
			launch := args
			if c.ArgsLenAtDash() < 0 && len(args) > 0 {
				return usageError{fmt.Errorf("unexpected argument %q: put a command to launch after -- (see 'rbscope record --help')", args[0])}
			}
			if (pid > 0) == (len(launch) > 0) {
				return usageError{fmt.Errorf("give either --pid PID or -- COMMAND (see 'rbscope record --help')")}
			}
			ofmt, err := output.Lookup(format)
			if err != nil {
				return usageError{err}
			}
			opts.VM = vmOptions
			opts.Timeline = ofmt.Timeline
			if err := opts.Validate(); err != nil {
				return usageError{err}
			}
			if useEBPF {
				if err := ebpfRefusal(c.Flags(), opts); err != nil {
					return usageError{err}
				}
			}
			ro := recording.Options{PID: pid, Launch: launch, Sampler: opts, EBPF: useEBPF, Cuts: cut.transforms(), Path: outPath, Format: ofmt, Output: output.Options{Lines: !noLineno}}
			return record(c.Context(), ro)
		},
	}
	f := c.Flags()
	f.IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process to record")
	f.Float64VarP(&opts.Rate, "rate", "r", 100, "samples per second (1-1000)")
	durationFlag(f, &opts.Duration, "duration", "d", 0, "stop after this long; default: until Ctrl-C or the target exits")
	f.StringVarP(&outPath, "output", "o", "", "output file (default rbscope-PID-TIME with the format's extension; - for stdout)")
	f.StringVarP(&format, "format", "f", "flamegraph", "output format: "+strings.Join(output.Names(), ", "))
	f.BoolVar(&opts.Subprocesses, "subprocesses", false, "also record the target's descendants (each under a root frame \"pid NNN\")")
	f.BoolVar(&opts.Idle, "idle", false, "include threads that are sleeping or waiting (those waiting for the GVL end in (waiting for GVL))")
	f.BoolVar(&opts.GVL, "gvl", false, "also sample threads waiting for the GVL, with a (waiting for GVL) leaf")
	f.BoolVar(&opts.Nonblocking, "nonblocking", false, "read without pausing the target (lower overhead, occasional torn samples)")
	f.BoolVar(&opts.Native, "native", false, "add every sampled thread's native frames (unwound with the code's CFI), Ruby frames beside the exec-loop frame that runs them: mixed flame graphs")
	f.BoolVar(&opts.Threads, "threads", false, "split samples by thread (each under a root frame \"thread NAME\")")
	f.BoolVar(&opts.Realtime, "realtime", true, "run the sampling thread at real-time priority where allowed (root or CAP_SYS_NICE), so that samples on a busy machine land where they were drawn; --realtime=false to keep it at normal priority")
	f.BoolVar(&noLineno, "nolineno", false, "leave line numbers out of frame names (flamegraph, collapsed)")
	cut.register(f)
	f.BoolVar(&useEBPF, "ebpf", false, "experimental: take the samples with a BPF program in the kernel (root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE; host PID namespace): on-CPU Ruby stacks of one process at a fraction of the cost (with --idle, their time off a CPU too), the target never paused")
	return c
}

// ebpfRefusal names the first option of a recording that the BPF sampler
// cannot honour, with what to do instead; nil when there is none. An
// option is refused, never ignored: a profile that silently lacks what
// was asked for would be read as if it had it.
func ebpfRefusal(flags *pflag.FlagSet, opts sampler.Options) error {
	switch {
	case opts.GVL:
		return errors.New("--gvl cannot be used with --ebpf: the BPF sampler cannot tell a thread waiting for the GVL from one waiting for anything else; drop --gvl (--idle counts their time under their stacks), or --ebpf to sample them")
	case opts.Native:
		return errors.New("--native cannot be used with --ebpf: the BPF sampler reads Ruby frames only; drop --native, or --ebpf for mixed native and Ruby stacks")
	case opts.Subprocesses:
		return errors.New("--subprocesses cannot be used with --ebpf: the BPF sampler records one process; drop --subprocesses, or --ebpf to follow the target's descendants")
	case opts.Nonblocking:
		return errors.New("--nonblocking has no meaning with --ebpf: the BPF sampler never pauses the target (it reads each stack in the kernel as the thread is interrupted); drop --nonblocking")
	case flags.Changed("realtime") && opts.Realtime:
		return errors.New("--realtime has no meaning with --ebpf: the kernel's perf events take the samples, not an rbscope thread; drop --realtime")
	}
	return nil
}

// record runs a recording and writes its output; in launch mode the exit
// status is the command's.
func record(ctx context.Context, ro recording.Options) error {
	ro.Stdout = os.Stdout
	ro.Notice = func(line string) { fmt.Fprintln(os.Stderr, line) }
	progress := term.IsTerminal(int(os.Stderr.Fd()))
	if progress {
		ro.Progress = func(pid int, p sampling.Progress) {
			fmt.Fprintf(os.Stderr, "\rrecording pid %d: %s, %d samples, %d errors, %.0f ticks/s   ",
				pid, p.Elapsed.Round(time.Second), p.Samples, p.Errors, float64(p.Ticks)/p.Elapsed.Seconds())
		}
	}
	res, err := recording.Run(ctx, ro)
	if progress && res.Profile != nil {
		fmt.Fprintln(os.Stderr)
	}
	if errors.Is(err, profile.ErrNoMatch) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if res.Path != "" {
		fmt.Fprintln(os.Stderr, wroteLine(res.Path, ro.Format.Name, res.Profile))
	}
	if res.Launched && res.ExitStatus > 0 {
		return exitCode(res.ExitStatus)
	}
	return nil
}

// exitCode makes rbscope exit with a launched command's status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("the command exited with status %d", int(e)) }
