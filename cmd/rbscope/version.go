package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/wire"
)

// version and buildDate are a release's version and build date, set at
// link time:
//
//	go build -ldflags "-X main.version=1.2.0 -X main.buildDate=2026-11-25" ./cmd/rbscope
//
// Without them rbscope reports the module's version (`go install
// ...@v1.2.0`) and the commit's time from the Go build information.
// commit, set by make build (-X main.commit=...), names the commit where
// the Go build information has none (GOFLAGS=-buildvcs=false, a copy of
// the tree without .git).
var version, buildDate, commit string

// buildVersion describes this binary: its version, commit and date from the
// link-time variables and the Go build information, and the Ruby families
// of the built-in layout tables.
func buildVersion() wire.Version {
	v := wire.Version{Version: version, Date: buildDate, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, RubyFamilies: []wire.RubyFamily{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Commit == "" {
		v.Commit = commit
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	for _, a := range arch.All {
		for _, f := range layouts.FamiliesFor(a) {
			// The release layouts are x86_64's: each is its table with
			// the fields the release moved.
			rel := []string{}
			if a == arch.AMD64 {
				rel = append(rel, layouts.Releases(f)...)
			}
			v.RubyFamilies = append(v.RubyFamilies, wire.RubyFamily{Family: f, MadeFrom: layouts.CommittedArch(a, f).Checked, Arch: a.Name, Releases: rel})
		}
	}
	return v
}

// printVersion writes v as `rbscope version` prints it.
func printVersion(w io.Writer, v wire.Version) {
	fmt.Fprintf(w, "rbscope %s\n", v.Version)
	commit := v.Commit
	if commit == "" {
		commit = "unknown (built without VCS information)"
	} else if v.Modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(w, "commit:  %s\n", commit)
	if v.Date != "" {
		fmt.Fprintf(w, "date:    %s\n", v.Date)
	}
	fmt.Fprintf(w, "go:      %s %s\n", v.GoVersion, v.Platform)
	fmt.Fprintln(w, "Ruby families with a built-in layout table (for Rubies without debug information),")
	fmt.Fprintln(w, "and the releases whose own layout it gives (the table with the fields each release moved):")
	for _, f := range v.RubyFamilies {
		fmt.Fprintf(w, "  %-5s made from %-6s %s", f.Family, f.MadeFrom, f.Arch)
		if len(f.Releases) > 0 {
			fmt.Fprintf(w, "; releases %s", strings.Join(f.Releases, " "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "A newer release of a family is read with its newest known release's layout, checked at attach;")
	fmt.Fprintln(w, "any other Ruby is read through its own debug information (DWARF).")
}

// addVersion gives root the version command and the --version flag, which
// print the same.
func addVersion(root *cobra.Command) {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print rbscope's version, commit, Go version and the Ruby families it knows",
		Long: `Print rbscope's version, the commit it was built from and that commit's time
(or a release's build date), the Go version and platform, and the Ruby
version families rbscope has built-in layout tables for, with the release
each table was made from. Give this output with a bug report.`,
		Example: `  rbscope version
  rbscope --version
  rbscope version --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if asJSON {
				return printJSON(buildVersion())
			}
			printVersion(c.OutOrStdout(), buildVersion())
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: {version, commit, modified, date, go_version, platform, ruby_families: [{family, made_from}]}")
	root.AddCommand(c)
	// cobra prints VersionTemplate for --version; the flag is defined here
	// so that it has no -v shorthand.
	root.Flags().Bool("version", false, "print rbscope's version (as 'rbscope version')")
	var text strings.Builder
	printVersion(&text, buildVersion())
	root.Version = text.String()
	root.SetVersionTemplate("{{.Version}}")
}
