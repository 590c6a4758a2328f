// Package clidocs writes the reference of a command-line tool from its
// cobra definitions: a Markdown page and a man page (section 1) for each
// command. The pages carry no date, so that the same definitions always
// give the same files.
package clidocs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Write writes the Markdown reference of root and its commands into mdDir
// (rbscope.md, rbscope_stack.md, ...) and their man pages into manDir
// (rbscope.1, rbscope-stack.1, ...). Both directories are created if
// missing; files already there are overwritten, not removed.
func Write(root *cobra.Command, mdDir, manDir string) error {
	root.DisableAutoGenTag = true // its line holds the day of generation
	for _, d := range []string{mdDir, manDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("reference docs: %w", err)
		}
	}
	return walk(root, func(c *cobra.Command) error {
		var md bytes.Buffer
		if err := doc.GenMarkdown(c, &md); err != nil {
			return fmt.Errorf("markdown page of %s: %w", c.CommandPath(), err)
		}
		base := strings.ReplaceAll(c.CommandPath(), " ", "_")
		if err := os.WriteFile(filepath.Join(mdDir, base+".md"), md.Bytes(), 0o644); err != nil {
			return fmt.Errorf("reference docs: %w", err)
		}
		var man bytes.Buffer
		// A date of its own keeps SOURCE_DATE_EPOCH and the clock out;
		// undated then removes it.
		header := &doc.GenManHeader{Section: "1", Source: root.Name(), Manual: root.Name() + " manual", Date: &time.Time{}}
		if err := doc.GenMan(c, header, &man); err != nil {
			return fmt.Errorf("man page of %s: %w", c.CommandPath(), err)
		}
		page := ManPageName(c)
		if err := os.WriteFile(filepath.Join(manDir, page), undated(man.Bytes()), 0o644); err != nil {
			return fmt.Errorf("reference docs: %w", err)
		}
		return nil
	})
}

// ManPageName is the man page file of command c: "rbscope-stack.1".
func ManPageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
}

// walk calls f on c and each of its commands that a user can run or read
// help for (not hidden, deprecated or the help command), as cobra/doc's
// own tree functions do.
func walk(c *cobra.Command, f func(*cobra.Command) error) error {
	for _, sub := range c.Commands() {
		if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
			continue
		}
		if err := walk(sub, f); err != nil {
			return err
		}
	}
	return f(c)
}

// thDate is the date field of a man page's .TH line, which cobra/doc fills
// with the month of generation.
var thDate = regexp.MustCompile(`(?m)^(\.TH "[^"]*" "[^"]*" )"[^"]*"`)

// undated empties the date of a man page's title line (man then shows none).
func undated(page []byte) []byte {
	return thDate.ReplaceAll(page, []byte(`$1""`))
}
