// Package recording runs one recording of a process from start to end:
// launching the command to record when asked, waiting for its Ruby VM,
// the sampler (user space, or BPF with record --ebpf), the output file
// (written whole or not at all) and the launched command's exit status.
// record and the UI's Processes view run it; the command keeps its flags
// and printing.
package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/rbscope/rbscope/internal/ctxlabels"
	"github.com/rbscope/rbscope/internal/ebpfsample"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/sampling"
)

// Options say what to record, how, and where to write it.
type Options struct {
	// PID is the process to record; Launch, when set instead, is a
	// command (its arguments) to start and record.
	PID    int
	Launch []string
	// Sampler is the sampler's options; EBPF takes the samples with the
	// BPF sampler (which honours only its rate, duration, idle, threads,
	// timeline and VM options: the caller refuses the others).
	Sampler sampler.Options
	EBPF    bool
	// Cuts keep some of the samples (record --thread, --endpoint,
	// --job; profile.Transform's filters): a thread's are kept by the
	// sampler, which reads no other thread's stack, the labels' taken
	// from the profile once ctxlabels has labelled it. A cut that keeps
	// nothing fails the recording, naming what there was.
	Cuts []profile.Transform
	// Path is the output file ("" for rbscope-PID-TIME with the format's
	// extension; "-" for Stdout), Format and Output how it is written.
	Path   string
	Format output.Format
	Output output.Options
	Stdout io.Writer
	// Progress, when set, is called with the recording's progress now and
	// then (a status line).
	Progress func(pid int, p sampling.Progress)
	// Notice, when set, receives one-line notices for the user: the
	// target ran another program, a launched command is being stopped.
	Notice func(string)
}

// Result is what a recording wrote.
type Result struct {
	// PID is the process recorded (the launched command's).
	PID int
	// Path is the file written, "" when the profile went to Stdout.
	Path    string
	Profile *profile.Profile
	// Launched reports that a command was launched; ExitStatus is then
	// its exit status (128+N when signal N ended it), or -1 when it was
	// reaped elsewhere and its status is lost.
	Launched   bool
	ExitStatus int
}

// Run records until ctx is done, the duration passes or the target exits
// or runs another program, and writes the profile. An output that cannot
// be written is refused before the target is touched; a launched command
// is stopped on every failure.
func Run(ctx context.Context, o Options) (Result, error) {
	res := Result{PID: o.PID, ExitStatus: -1}
	// A launched command is not waited for while it is sampled: as its
	// parent and its tracer, rbscope's wait would swallow the ptrace stops
	// the sampler needs. Its exit shows as a zombie, which ends sampling.
	var child *exec.Cmd
	if len(o.Launch) > 0 {
		path, err := exec.LookPath(o.Launch[0])
		if err != nil {
			return res, fmt.Errorf("cannot launch %s: command not found", o.Launch[0])
		}
		child = exec.Command(path, o.Launch[1:]...)
		child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			return res, fmt.Errorf("cannot launch %s: %w", o.Launch[0], err)
		}
		res.PID, res.Launched = child.Process.Pid, true
	}
	if err := run(ctx, o, child, &res); err != nil {
		stopChild(child)
		return res, err
	}
	if child != nil {
		res.ExitStatus = childStatus(child, o.notice)
	}
	return res, nil
}

// run is Run's recording and writing, for the process res.PID; it fills
// in res.
func run(ctx context.Context, o Options, child *exec.Cmd, res *Result) error {
	pid := res.PID
	path := o.Path
	if path == "" {
		path = fmt.Sprintf("rbscope-%d-%s%s", pid, time.Now().Format("20060102-150405"), o.Format.Ext)
	}
	var out *output.File
	w := o.Stdout
	if path != "-" {
		var err error
		if out, err = output.Create(path); err != nil {
			return err
		}
		defer out.Abort() // no-op after Commit has renamed the file
		w = out
	}
	var threadCut *sampling.ThreadCut
	var labelCuts []profile.Transform
	for _, t := range o.Cuts {
		if t.Op == "thread" {
			threadCut = sampling.NewThreadCut(t.Function)
		} else {
			labelCuts = append(labelCuts, t)
		}
	}
	s, err := open(ctx, pid, o.Sampler, o.EBPF, child != nil, threadCut)
	if err != nil {
		return err
	}
	if o.Progress != nil {
		s.SetProgress(func(p sampling.Progress) { o.Progress(pid, p) })
	}
	runCtx := ctx
	if threadCut != nil && child == nil && !o.EBPF {
		// The user-space sampler asks the cut about every thread at
		// each tick: a --thread that names none of a running process's
		// threads fails in a second, not at the end of the recording.
		var stop context.CancelFunc
		runCtx, stop = context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-time.After(time.Second):
				if threadCut.Asked() && threadCut.Unmatched() != nil {
					stop()
				}
			case <-runCtx.Done():
			}
		}()
	}
	prof, err := s.Run(runCtx)
	res.Profile = prof
	if err != nil {
		return fmt.Errorf("record --ebpf: the sampler failed after %d samples: %w", prof.Samples, err)
	}
	// Every recording carries the context labels the agent derives
	// (endpoint, job), in raw recordings too.
	ctxlabels.Annotate(prof, nil)
	if threadCut != nil {
		if err := threadCut.Unmatched(); err != nil {
			return err
		}
	}
	if len(labelCuts) > 0 {
		if err := prof.NoMatch(labelCuts); err != nil {
			return fmt.Errorf("%w (record --format raw keeps every sample, to cut later with rbscope report)", err)
		}
		cut, err := prof.Apply(labelCuts)
		if err != nil {
			return err
		}
		prof, res.Profile = cut, cut
	}
	opts := o.Sampler
	if child == nil && !opts.Subprocesses && ctx.Err() == nil && (opts.Duration == 0 || prof.Duration < opts.Duration) && !procfs.Exited(pid) {
		// Ended early, and the PID lives: it runs another program now
		// (an exec, as a server's hot restart does).
		o.notice(fmt.Sprintf("rbscope: pid %d ran another program (exec) after %s; the recording stops there (record the new program with: rbscope record -p %d)", pid, prof.Duration.Round(10*time.Millisecond), pid))
	}
	oo := o.Output
	oo.Title = fmt.Sprintf("rbscope record pid %d", pid)
	if err := o.Format.Write(w, prof, oo); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
		res.Path = path
	}
	return nil
}

func (o Options) notice(line string) {
	if o.Notice != nil {
		o.Notice(line)
	}
}

// sampled is a sampler ready to run: the user-space sampler's or the BPF
// sampler's (record --ebpf).
type sampled interface {
	SetProgress(func(sampling.Progress))
	// Run records until ctx is done, the duration passes or the target
	// exits; the profile is never nil, and an error says the sampler
	// failed.
	Run(ctx context.Context) (*profile.Profile, error)
}

// userSampler is the user-space sampler as a sampled.
type userSampler struct{ *sampler.Sampler }

// Run implements sampled: the user-space sampler skips what it cannot
// read and never fails.
func (u userSampler) Run(ctx context.Context) (*profile.Profile, error) {
	return u.Sampler.Run(ctx), nil
}

// open attaches the sampler a recording uses to pid: the BPF sampler with
// useEBPF, else the user-space sampler; threads, when not nil, keeps the
// samples of some threads only.
func open(ctx context.Context, pid int, opts sampler.Options, useEBPF, launched bool, threads *sampling.ThreadCut) (sampled, error) {
	if threads != nil {
		opts.ThreadFilter = threads.Filter()
	}
	if !useEBPF {
		s, err := whenReady(ctx, pid, launched, func() (*sampler.Sampler, error) { return sampler.New(pid, opts) })
		if err != nil {
			return nil, err
		}
		return userSampler{s}, nil
	}
	ropts := ebpfsample.RecordOptions{Rate: opts.Rate, Duration: opts.Duration, Threads: opts.Threads, Timeline: opts.Timeline, Idle: opts.Idle, VM: opts.VM}
	if threads != nil {
		ropts.ThreadFilter = threads.Keep
	}
	r, err := whenReady(ctx, pid, launched, func() (*ebpfsample.Recorder, error) { return ebpfsample.NewRecorder(pid, ropts) })
	if err != nil {
		return nil, fmt.Errorf("record --ebpf: %w", err)
	}
	return r, nil
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

// childStatus waits for a launched command, stopping it first if it is
// still running (the recording ended by the duration or a signal), and
// returns its exit status (128+N when signal N ended it; -1 when it was
// reaped elsewhere).
func childStatus(child *exec.Cmd, notice func(string)) int {
	if !procfs.Exited(child.Process.Pid) {
		notice(fmt.Sprintf("rbscope: recording ended; stopping %s (pid %d)", child.Path, child.Process.Pid))
		stopChild(child)
	} else {
		child.Wait()
	}
	if child.ProcessState == nil {
		return -1
	}
	ws, ok := child.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return -1
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
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
