package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
)

func newReportCmd() *cobra.Command {
	var (
		inPath, outPath, format string
		noLineno                bool
		cut                     cuts
		by, callers             string
		lines                   bool
	)
	c := &cobra.Command{
		Use:   "report -i RAW [--format FORMAT | --by KEY | --callers FUNCTION] [-o OUT]",
		Short: "Render a raw recording in any format, cut by thread or endpoint",
		Long: `Render a recording made with 'rbscope record --format raw' in any output
format, as if it had been recorded in that format: the same samples, stacks
and counts. The raw file keeps every sample's time and thread, so it can be
rendered again later (a flame graph now, the Firefox Profiler or callgrind
later).

--thread, --endpoint and --job keep the samples of one thread, endpoint
(Rails controller action or Sinatra route) or job (Sidekiq or ActiveJob
class), as record does; a cut that keeps nothing fails, naming what the
recording has.

--by thread|endpoint|job prints a table instead: a row each, the most
samples first, with the row's samples, their share of all, the seconds of
thread time they stand for (samples over the rate), the shares of its
samples in the GC and waiting for the GVL, and its hottest function (the
most self samples) with its share of the row; the samples without an
endpoint or job make a row of their own.

--callers FUNCTION prints the function's sandwich: the samples it is in and
in its own code, who calls it and what it calls, with the samples of its
stacks in which each does; with --lines, its callers by the line they call
from, its callees by its own line that calls them, and its own samples by
line (what splits "waiting for the lock" from "working inside it").
FUNCTION is a label (Object#work) or a name as the summary prints it
(Object#work (app.rb)). Tables go to stdout unless -o says otherwise.`,
		Example: `  rbscope record -p 4242 --duration 30 --format raw -o app.raw.gz
  rbscope report -i app.raw.gz --format flamegraph -o app.svg
  rbscope report -i app.raw.gz --format summary -o -
  rbscope report -i app.raw.gz --by endpoint
  rbscope report -i app.raw.gz --endpoint IssuesController#show --format flamegraph
  rbscope report -i app.raw.gz --thread 'puma srv tp 001' --callers 'Thread::Mutex#synchronize' --lines`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if inPath == "" {
				return usageError{fmt.Errorf("--input is required (see 'rbscope report --help')")}
			}
			switch {
			case by != "" && by != "thread" && by != profile.LabelEndpoint && by != profile.LabelJob:
				return usageError{fmt.Errorf("--by %q: want thread, endpoint or job (see 'rbscope report --help')", by)}
			case by != "" && callers != "":
				return usageError{fmt.Errorf("--by and --callers print two different tables: give one")}
			case (by != "" || callers != "") && c.Flags().Changed("format"):
				return usageError{fmt.Errorf("--by and --callers print a table, not a --format: drop --format, or them")}
			case lines && callers == "":
				return usageError{fmt.Errorf("--lines goes with --callers (the formats keep lines unless --nolineno)")}
			}
			ofmt, err := output.Lookup(format)
			if err != nil {
				return usageError{err}
			}
			write := func(w io.Writer, prof *profile.Profile, title string) error {
				return ofmt.Write(w, prof, output.Options{Lines: !noLineno, Title: title})
			}
			switch {
			case by != "":
				write = func(w io.Writer, prof *profile.Profile, _ string) error { return output.ByTable(w, prof, by) }
			case callers != "":
				write = func(w io.Writer, prof *profile.Profile, _ string) error {
					fn, err := prof.FindFunction(callers)
					if err != nil {
						return fmt.Errorf("--callers: %w", err)
					}
					return output.SandwichText(w, prof, fn, lines)
				}
			}
			table := by != "" || callers != ""
			if table && outPath == "" {
				outPath = "-"
			}
			what := ofmt.Name
			switch {
			case by != "":
				what = "table by " + by
			case callers != "":
				what = "callers and callees"
			}
			err = report(inPath, outPath, ofmt, what, cut.transforms(), write)
			if errors.Is(err, profile.ErrNoMatch) {
				return usageError{err}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVarP(&inPath, "input", "i", "", "raw recording to read (from record --format raw)")
	f.StringVarP(&outPath, "output", "o", "", "output file (default: the input's name with the format's extension, stdout for --by and --callers; - for stdout)")
	f.StringVarP(&format, "format", "f", "flamegraph", "output format: "+strings.Join(output.Names(), ", "))
	f.BoolVar(&noLineno, "nolineno", false, "leave line numbers out of frame names (flamegraph, collapsed)")
	cut.register(f)
	f.StringVar(&by, "by", "", "print a table of the samples by thread, endpoint or job instead of a profile")
	f.StringVar(&callers, "callers", "", "print the callers and callees of this function (a sandwich) instead of a profile")
	f.BoolVar(&lines, "lines", false, "with --callers: by line (callers' lines, the function's lines that call, its own lines)")
	return c
}

// report reads the raw recording inPath, keeps the samples the cuts keep
// (profile.Transform's filters) and writes what write makes of them (what
// names it) into outPath ("-": stdout; "": the input's name with format's
// extension).
func report(inPath, outPath string, format output.Format, what string, cuts []profile.Transform, write func(io.Writer, *profile.Profile, string) error) error {
	in, err := os.Open(inPath)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", inPath, err)
	}
	defer in.Close()
	if outPath == "" {
		outPath = strings.TrimSuffix(strings.TrimSuffix(inPath, ".gz"), ".raw") + format.Ext
		if outPath == inPath {
			return usageError{fmt.Errorf("give -o: the default output would overwrite %s", inPath)}
		}
	}
	// Refuse an unwritable output before reading a long recording.
	var out *output.File
	var w io.Writer = os.Stdout
	if outPath != "-" {
		if out, err = output.Create(outPath); err != nil {
			return err
		}
		defer out.Abort() // no-op after Commit has renamed the file
		w = out
	}
	prof, title, err := output.ReadRaw(in)
	if err != nil {
		return fmt.Errorf("%s: %w", inPath, err)
	}
	if len(cuts) > 0 {
		if err := prof.NoMatch(cuts); err != nil {
			return fmt.Errorf("%s: %w", inPath, err)
		}
		if prof, err = prof.Apply(cuts); err != nil {
			return fmt.Errorf("%s: %w", inPath, err)
		}
	}
	if err := write(w, prof, title); err != nil {
		return fmt.Errorf("writing %s: %w", outPath, err)
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, wroteLine(outPath, what, prof))
	}
	return nil
}

// wroteLine is what record and report print once a profile is written:
// how many samples over how long, and how many ticks found a thread
// unreadable or runnable but waiting for a CPU (left out of a CPU profile).
func wroteLine(path, format string, prof *profile.Profile) string {
	line := fmt.Sprintf("rbscope: wrote %s (%s): %d samples in %.1fs, %d unreadable", path, format, prof.Samples, prof.Duration.Seconds(), prof.Errors)
	if prof.Waiting > 0 {
		line += fmt.Sprintf(", %d left out as waiting for a CPU", prof.Waiting)
	}
	return line
}
