package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/rbscope/rbscope/internal/ebpfsample"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
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
includes sleeping and waiting threads.

--ebpf (experimental) takes the samples with a BPF program on each CPU's
clock instead of reading the target from rbscope's own thread: the same
stacks, at a fraction of the CPU a sample, and the target is never paused.
It needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) and rbscope in
the host's PID namespace, records one process's threads while they are on
a CPU, and refuses the options it cannot honour (--idle, --gvl, --native,
--nonblocking, --subprocesses).`,
		Example: `  rbscope record -p 4242 --duration 30s
  rbscope record --format pprof -o cpu.pb.gz -- ruby app.rb
  rbscope record -p 4242 --subprocesses --threads --format speedscope
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
			return record(c.Context(), pid, launch, opts, useEBPF, outPath, ofmt, output.Options{Lines: !noLineno})
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
	f.BoolVar(&useEBPF, "ebpf", false, "experimental: take the samples with a BPF program in the kernel (root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE; host PID namespace): on-CPU Ruby stacks of one process at a fraction of the cost, the target never paused")
	return c
}

// ebpfRefusal names the first option of a recording that the BPF sampler
// cannot honour, with what to do instead; nil when there is none. An
// option is refused, never ignored: a profile that silently lacks what
// was asked for would be read as if it had it.
func ebpfRefusal(flags *pflag.FlagSet, opts sampler.Options) error {
	switch {
	case opts.Idle:
		return errors.New("--idle cannot be used with --ebpf: the BPF sampler sees threads only while they run on a CPU; drop --idle, or --ebpf to sample sleeping and waiting threads")
	case opts.GVL:
		return errors.New("--gvl cannot be used with --ebpf: the BPF sampler sees threads only while they run on a CPU, not those waiting for the GVL; drop --gvl, or --ebpf to sample them")
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

// recording is a recording ready to run: the user-space sampler's or the
// BPF sampler's (record --ebpf).
type recording interface {
	SetProgress(func(sampling.Progress))
	// Run records until ctx is done, the duration passes or the target
	// exits; the profile is never nil, and an error says the sampler
	// failed.
	Run(ctx context.Context) (*profile.Profile, error)
}

// userRecording is the user-space sampler as a recording.
type userRecording struct{ *sampler.Sampler }

// Run implements recording: the user-space sampler skips what it cannot
// read and never fails.
func (u userRecording) Run(ctx context.Context) (*profile.Profile, error) {
	return u.Sampler.Run(ctx), nil
}

// newRecording attaches the sampler a recording uses to pid: the BPF
// sampler with useEBPF, else the user-space sampler.
func newRecording(ctx context.Context, pid int, opts sampler.Options, useEBPF, launched bool) (recording, error) {
	if !useEBPF {
		s, err := whenReady(ctx, pid, launched, func() (*sampler.Sampler, error) { return sampler.New(pid, opts) })
		if err != nil {
			return nil, err
		}
		return userRecording{s}, nil
	}
	ropts := ebpfsample.RecordOptions{Rate: opts.Rate, Duration: opts.Duration, Threads: opts.Threads, Timeline: opts.Timeline, VM: opts.VM}
	r, err := whenReady(ctx, pid, launched, func() (*ebpfsample.Recorder, error) { return ebpfsample.NewRecorder(pid, ropts) })
	if err != nil {
		return nil, fmt.Errorf("record --ebpf: %w", err)
	}
	return r, nil
}

// record runs a recording and writes its output; in launch mode the exit
// status is the command's.
func record(ctx context.Context, pid int, launch []string, opts sampler.Options, useEBPF bool, outPath string, format output.Format, oo output.Options) error {
	// A launched command is not waited for while it is sampled: as its
	// parent and its tracer, rbscope's wait would swallow the ptrace stops
	// the sampler needs. Its exit shows as a zombie, which ends sampling.
	var child *exec.Cmd
	if len(launch) > 0 {
		path, err := exec.LookPath(launch[0])
		if err != nil {
			return fmt.Errorf("cannot launch %s: command not found", launch[0])
		}
		child = exec.Command(path, launch[1:]...)
		child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			return fmt.Errorf("cannot launch %s: %w", launch[0], err)
		}
		pid = child.Process.Pid
	}

	// Refuse an unwritable output before touching the target.
	if outPath == "" {
		outPath = fmt.Sprintf("rbscope-%d-%s%s", pid, time.Now().Format("20060102-150405"), format.Ext)
	}
	var out *output.File
	var w io.Writer = os.Stdout
	if outPath != "-" {
		var err error
		if out, err = output.Create(outPath); err != nil {
			stopChild(child)
			return err
		}
		defer out.Abort() // no-op after Commit has renamed the file
		w = out
	}

	s, err := newRecording(ctx, pid, opts, useEBPF, child != nil)
	if err != nil {
		stopChild(child)
		return err
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		opts.Progress = func(p sampling.Progress) {
			fmt.Fprintf(os.Stderr, "\rrecording pid %d: %s, %d samples, %d errors, %.0f ticks/s   ",
				pid, p.Elapsed.Round(time.Second), p.Samples, p.Errors, float64(p.Ticks)/p.Elapsed.Seconds())
		}
		s.SetProgress(opts.Progress)
	}
	prof, err := s.Run(ctx)
	if opts.Progress != nil {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		stopChild(child)
		return fmt.Errorf("record --ebpf: the sampler failed after %d samples: %w", prof.Samples, err)
	}
	if child == nil && !opts.Subprocesses && ctx.Err() == nil && (opts.Duration == 0 || prof.Duration < opts.Duration) && !procfs.Exited(pid) {
		// Ended early, and the PID lives: it runs another program now
		// (an exec, as a server's hot restart does).
		fmt.Fprintf(os.Stderr, "rbscope: pid %d ran another program (exec) after %s; the recording stops there (record the new program with: rbscope record -p %d)\n", pid, prof.Duration.Round(10*time.Millisecond), pid)
	}
	oo.Title = fmt.Sprintf("rbscope record pid %d", pid)
	if err := format.Write(w, prof, oo); err != nil {
		stopChild(child)
		return fmt.Errorf("writing %s: %w", outPath, err)
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			stopChild(child)
			return err
		}
		fmt.Fprintln(os.Stderr, wroteLine(outPath, format.Name, prof))
	}
	if child != nil {
		return childStatus(child)
	}
	return nil
}

// childStatus waits for a launched command, stopping it first if it is
// still running (the recording ended by --duration or a signal), and
// returns its exit status as rbscope's.
func childStatus(child *exec.Cmd) error {
	if !procfs.Exited(child.Process.Pid) {
		fmt.Fprintf(os.Stderr, "rbscope: recording ended; stopping %s (pid %d)\n", child.Path, child.Process.Pid)
		stopChild(child)
	} else {
		child.Wait()
	}
	if child.ProcessState == nil {
		return nil // reaped elsewhere: its status is lost, not an rbscope failure
	}
	ws, ok := child.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return nil
	case ws.Signaled():
		return exitCode(128 + int(ws.Signal()))
	case ws.ExitStatus() != 0:
		return exitCode(ws.ExitStatus())
	}
	return nil
}

// whenReady attaches to pid with open; a launched command is given time
// to exec and start its VM. A refusal of the BPF sampler is final.
func whenReady[T any](ctx context.Context, pid int, launched bool, open func() (T, error)) (T, error) {
	var none T
	if !launched {
		return open()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := open()
		if err == nil {
			return s, nil
		}
		if errors.Is(err, ebpfsample.ErrNotAllowed) || errors.Is(err, ebpfsample.ErrUnsupported) {
			return none, err
		}
		if procfs.Exited(pid) {
			return none, fmt.Errorf("the command exited before its Ruby VM could be read: %w", err)
		}
		if time.Now().After(deadline) {
			if errors.Is(err, rubyvm.ErrNotRuby) {
				return none, fmt.Errorf("the launched command is %w", err)
			}
			return none, err
		}
		select {
		case <-ctx.Done():
			return none, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stopChild ends a launched command: SIGTERM, then SIGKILL after 5 s.
func stopChild(child *exec.Cmd) {
	if child == nil {
		return
	}
	done := make(chan struct{})
	go func() { child.Wait(); close(done) }()
	child.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		child.Process.Kill()
		<-done
	}
}

// exitCode makes rbscope exit with a launched command's status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("the command exited with status %d", int(e)) }
