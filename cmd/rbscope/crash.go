package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

func newCrashCmd() *cobra.Command {
	var configPath string
	c := &cobra.Command{
		Use:   "crash",
		Short: "Keep a full report of every crash (a core_pattern handler)",
		Long: `rbscope crash install points the kernel's core_pattern at 'rbscope crash handle'.
For every process that dumps core it then keeps, under the store directory, a
report (report.json and report.txt: signal, registers, native and Ruby stacks
of every thread, a /proc snapshot with secrets redacted) and the core,
zstd-compressed; it notifies a webhook or an email address, and passes the core
on to the handler that was installed before. uninstall restores the previous
settings exactly.`,
	}
	c.PersistentFlags().StringVar(&configPath, "config", crash.DefaultConfigPath, "crash handler config file")

	var cfg crash.Config
	install := &cobra.Command{
		Use:   "install",
		Short: "Install rbscope as the core_pattern handler",
		Args:  noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			exe, _ = filepath.EvalSymlinks(exe)
			if (cfg.Email == "") != (cfg.SMTP == "") {
				return usageError{fmt.Errorf("--email and --smtp go together")}
			}
			if cfg.Webhook != "" {
				if err := crash.CheckWebhook(cfg.Webhook, cfg.InsecureNotify); err != nil {
					return usageError{err}
				}
			}
			if err := crash.Install(&cfg, configPath, exe); err != nil {
				return err
			}
			st := crash.GetStatus(configPath)
			fmt.Printf("installed: core_pattern = %s (was %q), core_pipe_limit = %s; crashes go to %s\n", st.CorePattern, cfg.PreviousPattern, st.CorePipeLimit, cfg.Dir)
			return nil
		},
	}
	f := install.Flags()
	f.StringVar(&cfg.Dir, "dir", crash.DefaultDir, "where crash reports and cores are kept (root-owned, 0700)")
	f.StringVar(&cfg.Webhook, "webhook", "", "POST each report as JSON to this URL")
	f.StringVar(&cfg.Email, "email", "", "mail each report to this address (with --smtp)")
	f.StringVar(&cfg.SMTP, "smtp", "", "SMTP server HOST:PORT for --email (STARTTLS required)")
	f.BoolVar(&cfg.InsecureNotify, "insecure-notify", false, "allow an http webhook and an SMTP server without STARTTLS")
	f.Int64Var(&cfg.MaxCoreBytes, "max-core", 2<<30, "largest core to keep, in bytes (the rest is dropped and the report says so)")
	f.Int64Var(&cfg.KeepFreeBytes, "keep-free", 1<<30, "keep at least this many bytes free on the store's disk")
	f.IntVar(&cfg.MaxCrashes, "max-crashes", 50, "keep at most this many crashes (oldest removed)")

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Restore the core_pattern handler that was there before",
		Args:  noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			prev, err := crash.Uninstall(configPath)
			if err != nil {
				return err
			}
			fmt.Printf("uninstalled: core_pattern = %q, core_pipe_limit = %s (crashes stay in %s)\n", prev.PreviousPattern, prev.PreviousPipeLimit, prev.Dir)
			return nil
		},
	}
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show what is installed",
		Args:  noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			st := crash.GetStatus(configPath)
			if asJSON {
				return printJSON(st)
			}
			if !st.Installed {
				fmt.Printf("not installed: core_pattern = %q, core_pipe_limit = %s\n", st.CorePattern, st.CorePipeLimit)
				return nil
			}
			fmt.Printf("installed: core_pattern = %s\ncore_pipe_limit = %s\nstore: %s (%d crashes)\nprevious core_pattern: %q\n",
				st.CorePattern, st.CorePipeLimit, st.Config.Dir, st.Crashes, st.Config.PreviousPattern)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	handle := &cobra.Command{
		Use:    "handle PID TID SIGNAL TIME [CORE_LIMIT DUMPABLE UID GID]",
		Short:  "Run by the kernel for each core dump (core on stdin)",
		Hidden: true,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 4 && len(args) != 8 {
				return usageError{fmt.Errorf("crash handle takes 4 or 8 arguments (core_pattern's %%P %%i %%s %%t [%%c %%d %%u %%g]), got %d", len(args))}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			var n [8]int64
			kernel := len(args) == 8
			for i, a := range args {
				v, err := strconv.ParseInt(a, 10, 64)
				if i == 4 {
					// %c is the process's own RLIMIT_CORE, printed unsigned:
					// the process chooses it. At or above 2^63: unlimited.
					u, uerr := strconv.ParseUint(a, 10, 64)
					v, err = int64(min(u, math.MaxInt64)), uerr
					if u >= math.MaxInt64 {
						v = -1
					}
				}
				if err != nil && i >= 4 {
					kernel = false // never lose a crash over the optional four
					continue
				}
				if err != nil {
					return usageError{fmt.Errorf("argument %d (%q) is not a number", i+1, a)}
				}
				n[i] = v
			}
			cfg, err := crash.LoadConfig(configPath)
			if err != nil {
				return err
			}
			r, err := crash.Handle(cfg, crash.Args{PID: int(n[0]), TID: int(n[1]), Signal: int(n[2]), Time: time.Unix(n[3], 0),
				Kernel: kernel, CoreLimit: n[4], Dumpable: int(n[5]), UID: n[6], GID: n[7]}, os.Stdin)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "rbscope: crash %s kept in %s\n", r.ID, cfg.Dir)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the kept crashes",
		Args:  noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := crash.LoadConfig(configPath)
			if err != nil {
				return err
			}
			entries, err := crash.ListReports(cfg.Dir)
			if err != nil {
				return err
			}
			doc := wire.NewCrashList(entries)
			if asJSON {
				return printJSON(doc)
			}
			fmt.Printf("%-28s %-20s %-8s %-8s %-24s %s\n", "ID", "TIME", "PID", "SIGNAL", "EXE", "TOP RUBY FRAME")
			for _, r := range doc.Crashes {
				fmt.Printf("%-28s %-20s %-8d %-8s %-24s %s\n", textsafe.Clean(r.ID), r.Time, r.PID, textsafe.Clean(r.Signal), textsafe.Clean(r.Exe), textsafe.Clean(r.TopRubyFrame))
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one crash report",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := crash.LoadConfig(configPath)
			if err != nil {
				return err
			}
			r, err := crash.Load(cfg.Dir, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(wire.NewCrashReport(r))
			}
			crash.WriteText(os.Stdout, r)
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(install, uninstall, status, handle, list, show)
	return c
}
