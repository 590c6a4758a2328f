package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/clidocs"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/reference and docs/man from the command definitions (make docs)")

// referenceDirs are the generated reference's directories (Markdown, man
// pages) and the files the reference owns in each.
var referenceDirs = []struct{ dir, glob string }{
	{"../../docs/reference", "*.md"},
	{"../../docs/man", "*.1"},
}

// docsRoot is the command tree as rbscope runs it, with the help and
// completion commands cobra adds on execution.
func docsRoot() *cobra.Command {
	root := newRootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// TestReferenceDocs regenerates the command reference (Markdown and man
// pages) from the cobra definitions and fails when the committed files
// differ: run `make docs` after changing a command, a flag or a help text.
func TestReferenceDocs(t *testing.T) {
	md, man := referenceDirs[0], referenceDirs[1]
	if *updateDocs {
		for _, d := range referenceDirs {
			old, _ := filepath.Glob(filepath.Join(d.dir, d.glob))
			for _, f := range old {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := clidocs.Write(docsRoot(), md.dir, man.dir); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	genMD, genMan := filepath.Join(tmp, "reference"), filepath.Join(tmp, "man")
	if err := clidocs.Write(docsRoot(), genMD, genMan); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ committed, generated, glob string }{{md.dir, genMD, md.glob}, {man.dir, genMan, man.glob}} {
		want := names(t, d.generated, d.glob)
		have := names(t, d.committed, d.glob)
		for _, f := range want {
			if !slices.Contains(have, f) {
				t.Errorf("%s/%s is missing: run make docs", d.committed, f)
				continue
			}
			a, err := os.ReadFile(filepath.Join(d.committed, f))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(d.generated, f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s/%s is stale: run make docs", d.committed, f)
			}
		}
		for _, f := range have {
			if !slices.Contains(want, f) {
				t.Errorf("%s/%s documents no command: run make docs", d.committed, f)
			}
		}
	}
}

// names lists the base names of dir's files that match glob.
func names(t *testing.T, dir, glob string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, p := range paths {
		ns = append(ns, filepath.Base(p))
	}
	return ns
}
