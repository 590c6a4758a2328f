package main

import (
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
	)
	c := &cobra.Command{
		Use:   "report -i RAW --format FORMAT [-o OUT]",
		Short: "Render a raw recording in any format",
		Long: `Render a recording made with 'rbscope record --format raw' in any output
format, as if it had been recorded in that format: the same samples, stacks
and counts. The raw file keeps every sample's time and thread, so it can be
rendered again later (a flame graph now, the Firefox Profiler or callgrind
later).`,
		Example: `  rbscope record -p 4242 --duration 30 --format raw -o app.raw.gz
  rbscope report -i app.raw.gz --format flamegraph -o app.svg
  rbscope report -i app.raw.gz --format summary -o -`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if inPath == "" {
				return usageError{fmt.Errorf("--input is required (see 'rbscope report --help')")}
			}
			ofmt, err := output.Lookup(format)
			if err != nil {
				return usageError{err}
			}
			return report(inPath, outPath, ofmt, output.Options{Lines: !noLineno})
		},
	}
	f := c.Flags()
	f.StringVarP(&inPath, "input", "i", "", "raw recording to read (from record --format raw)")
	f.StringVarP(&outPath, "output", "o", "", "output file (default: the input's name with the format's extension; - for stdout)")
	f.StringVarP(&format, "format", "f", "flamegraph", "output format: "+strings.Join(output.Names(), ", "))
	f.BoolVar(&noLineno, "nolineno", false, "leave line numbers out of frame names (flamegraph, collapsed)")
	return c
}

// report renders the raw recording inPath as format into outPath.
func report(inPath, outPath string, format output.Format, oo output.Options) error {
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
	oo.Title = title
	if err := format.Write(w, prof, oo); err != nil {
		return fmt.Errorf("writing %s: %w", outPath, err)
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, wroteLine(outPath, format.Name, prof))
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
