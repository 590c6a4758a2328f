package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rbscope/rbscope/internal/ctxlabels"
	"github.com/rbscope/rbscope/internal/ebpfsample"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/sampling"
	"github.com/rbscope/rbscope/internal/textsafe"
)

func newTopCmd() *cobra.Command {
	var (
		pid     int
		opts    sampler.Options
		window  time.Duration
		runFor  time.Duration
		cut     cuts
		useEBPF bool
	)
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "top -p PID",
		Short:       "Live view of the hottest Ruby methods",
		Long: `Sample a running Ruby process and show, refreshed every second, the methods
with the most samples over the last --window: self (running the method itself)
and total (the method or anything it called). Quit with q or Ctrl-C, or
let --duration end it (the last table then stays on the terminal); the
terminal is restored and the target left running. When the output is not a
terminal, a plain table is printed every second instead.

The header says how many threads a tick found on average: those on a CPU
(with --gvl, and those waiting for the GVL), or with --idle every thread,
running or not, so that four threads make 4.0 whatever they do.

--ebpf (experimental) takes the samples with a BPF program in the kernel,
as record --ebpf does (root, host PID namespace; --idle needs the kernel's
BTF), and refuses --gvl and --nonblocking.`,
		Example: `  rbscope top -p 4242
  rbscope top -p 4242 --thread worker --window 30s
  rbscope top -p 4242 --duration 30s > top.txt`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope top --help')")}
			}
			opts.VM = vmOptions
			if err := opts.Validate(); err != nil {
				return usageError{err}
			}
			if runFor < 0 {
				return usageError{fmt.Errorf("--duration %v is negative: give how long top runs, or 0 to run until q or Ctrl-C", runFor)}
			}
			if window < time.Second {
				return usageError{fmt.Errorf("--window %v is too short: give at least 1s", window)}
			}
			if useEBPF {
				switch {
				case opts.GVL:
					return usageError{fmt.Errorf("--gvl cannot be used with --ebpf: the BPF sampler cannot tell a thread waiting for the GVL from one waiting for anything else; drop --gvl (--idle counts their time under their stacks), or --ebpf")}
				case opts.Nonblocking:
					return usageError{fmt.Errorf("--nonblocking has no meaning with --ebpf: the BPF sampler never pauses the target; drop --nonblocking")}
				}
			}
			return top(c.Context(), pid, opts, window, runFor, cut, useEBPF)
		},
	}
	f := c.Flags()
	f.IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	f.Float64VarP(&opts.Rate, "rate", "r", 100, "samples per second (1-1000)")
	durationFlag(f, &window, "window", "", 10*time.Second, "how much recent history the table covers")
	durationFlag(f, &runFor, "duration", "d", 0, "stop after this long, leaving the last table on the terminal; default: until q or Ctrl-C, or the target exits")
	cut.register(f)
	f.BoolVar(&opts.Idle, "idle", false, "include threads that are sleeping or waiting (those waiting for the GVL end in (waiting for GVL))")
	f.BoolVar(&opts.GVL, "gvl", false, "also sample threads waiting for the GVL, with a (waiting for GVL) leaf")
	f.BoolVar(&opts.Nonblocking, "nonblocking", false, "read without pausing the target")
	f.BoolVar(&useEBPF, "ebpf", false, "experimental: take the samples with a BPF program in the kernel (root; host PID namespace), as record --ebpf does")
	return c
}

// top runs the live view until ctx is done, runFor passes (0: never) or
// the target exits.
func top(ctx context.Context, pid int, opts sampler.Options, window, runFor time.Duration, cut cuts, useEBPF bool) error {
	var threadCut *sampling.ThreadCut
	if cut.thread != "" {
		threadCut = sampling.NewThreadCut(cut.thread)
		opts.ThreadFilter = threadCut.Filter()
	}
	updates := make(chan *profile.Profile, 4)
	flush := func(p *profile.Profile) {
		// Each second's samples get their context labels, and lose
		// those the cuts by label leave out.
		ctxlabels.Annotate(p, nil)
		if ls := cut.labels(); len(ls) > 0 {
			p, _ = p.Apply(ls) // label cuts need no timeline
		}
		select {
		case updates <- p:
		default: // the screen is behind; drop rather than stall sampling
		}
	}
	var run func(context.Context)
	if useEBPF {
		ro := ebpfsample.RecordOptions{Rate: opts.Rate, Idle: opts.Idle, VM: opts.VM, FlushEvery: time.Second, Flush: flush}
		if threadCut != nil {
			ro.ThreadFilter = threadCut.Keep
		}
		r, err := ebpfsample.NewRecorder(pid, ro)
		if err != nil {
			return fmt.Errorf("top --ebpf: %w", err)
		}
		run = func(ctx context.Context) {
			if _, err := r.Run(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "rbscope: top --ebpf: the sampler failed: %v\n", err)
			}
		}
	} else {
		opts.FlushEvery = time.Second
		opts.Flush = flush
		s, err := sampler.New(pid, opts)
		if err != nil {
			return err
		}
		run = func(ctx context.Context) { s.Run(ctx) }
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if runFor > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, runFor)
		defer stop()
	}
	done := make(chan struct{})
	go func() {
		run(ctx)
		close(done)
	}()

	interactive := term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	restore := func() {} // leaves the alternate screen and raw mode, once
	if interactive {
		old, err := term.MakeRaw(int(os.Stdin.Fd()))
		if err != nil {
			cancel()
			<-done
			return fmt.Errorf("terminal: %w", err)
		}
		fmt.Print("\x1b[?1049h\x1b[?25l") // alternate screen, hide cursor
		restored := false
		restore = func() {
			if !restored {
				restored = true
				fmt.Print("\x1b[?25h\x1b[?1049l")
				term.Restore(int(os.Stdin.Fd()), old)
			}
		}
		defer restore()
		go func() {
			b := make([]byte, 1)
			for {
				if n, err := os.Stdin.Read(b); err != nil || n == 1 && (b[0] == 'q' || b[0] == 3 || b[0] == 4) {
					cancel()
					return
				}
			}
		}()
	}

	var history []*profile.Profile
	var last *profile.Profile
	for {
		select {
		case <-done:
			var why string
			switch {
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				// --duration ended it: the last table stays on the
				// terminal, below the alternate screen left.
				restore()
				if interactive && last != nil {
					drawTop(os.Stdout, pid, last, opts, cut, threadCut, 40, 120, false)
				}
				return nil
			case procfs.Exited(pid):
				why = fmt.Sprintf("pid %d exited", pid)
			case ctx.Err() == nil:
				// The sampler let go of a process that lives: it runs
				// another program now (an exec).
				why = fmt.Sprintf("pid %d ran another program (exec); watch it with: rbscope top -p %d", pid, pid)
			}
			if why != "" {
				restore()
				fmt.Fprintln(os.Stderr, "rbscope: "+why)
			}
			return nil
		case p := <-updates:
			history = append(history, p)
			for len(history) > int(window/time.Second) {
				history = history[1:]
			}
			merged := profile.NewProfile(opts.Rate)
			for _, h := range history {
				merged.Merge(h)
			}
			rows, cols := 40, 120
			if interactive {
				if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
					rows, cols = h, w
				}
				fmt.Print("\x1b[H\x1b[2J")
			}
			drawTop(os.Stdout, pid, merged, opts, cut, threadCut, rows, cols, interactive)
			last = merged
		}
	}
}

// drawTop prints one screen of the top view; threadCut, when not nil, is
// the --thread cut, which says so when it matched no thread yet.
func drawTop(w io.Writer, pid int, p *profile.Profile, opts sampler.Options, cut cuts, threadCut *sampling.ThreadCut, rows, cols int, raw bool) {
	nl := "\n"
	if raw {
		nl = "\r\n" // raw mode: no newline translation
	}
	fmt.Fprintf(w, "rbscope top: pid %d, last %.0fs%s: %d samples, %s, %d errors%s",
		pid, p.Duration.Seconds(), cut, p.Samples, perTick(p, opts), p.Errors, nl)
	if threadCut != nil {
		if err := threadCut.Unmatched(); err != nil {
			fmt.Fprint(w, textsafe.Clean(err.Error()), nl)
			rows--
		}
	}
	fmt.Fprint(w, output.Breakdown(p), nl)
	n, _ := output.FunctionTable(w, p, output.TableOptions{MaxRows: max(rows-5, 1), Width: cols, Newline: nl})
	if n == 0 {
		fmt.Fprint(w, "  (no thread running Ruby code; --idle includes sleeping threads)", nl)
	}
	if raw {
		fmt.Fprint(w, nl, "q to quit")
	} else {
		fmt.Fprint(w, strings.Repeat("-", 40), nl)
	}
}

// perTick says how many threads a tick of p found on average, as what
// they were: samples are threads, not ticks, so a share of ticks would
// pass 100% with two threads on CPUs, or with --idle's sleeping threads.
func perTick(p *profile.Profile, opts sampler.Options) string {
	n := 0.0
	if p.Ticks > 0 {
		n = float64(p.Samples) / float64(p.Ticks)
	}
	switch {
	case opts.Idle:
		return fmt.Sprintf("%.1f threads a tick (--idle: running or not)", n)
	case opts.GVL:
		return fmt.Sprintf("%.2f threads a tick on a CPU or waiting for the GVL", n)
	}
	return fmt.Sprintf("%.2f threads a tick on a CPU", n)
}
