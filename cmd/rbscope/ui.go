package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/ui"
)

func newUICmd() *cobra.Command {
	var listen, cacheDir, crashConfig string
	var cacheMaxAge time.Duration
	var cacheMaxMB int64
	c := &cobra.Command{
		Use:   "ui [FILE...]",
		Short: "Look at heap dumps and raw recordings in a local web page",
		Long: `Serve a web page on this machine for heap dumps (ObjectSpace.dump_all JSON
lines, from rbscope heap dump or Ruby itself, plain or compressed with zstd
or gzip) and raw recordings (record
--format raw) given as arguments or dropped on the page, and the reports of
the crash store (rbscope crash install's), and the Ruby processes of the
host that this user may read: their stacks, heap dumps and 10-second
recordings are taken from the page by the same code as rbscope stack, heap
dump and record (each action a POST with the page's CSRF token; dumps and
recordings kept under the cache directory, 0600, and removed once older
than --cache-max-age, the oldest first while it holds more than
--cache-max-mb, never one that is open). rbscope prints one URL,
with a random token every request needs, and serves until interrupted.

A dump is indexed on first open (its graph, dominator tree and retained
sizes); the index is kept beside the dump (or under --cache-dir when the
dump's directory is not writable), 0600, and reused while the dump is
unchanged. The page serves 127.0.0.1 only unless --listen says otherwise;
from another machine use ssh -L PORT:127.0.0.1:PORT HOST.`,
		Example: `  rbscope ui heap.json app.raw.gz
  rbscope ui --listen 127.0.0.1:8080 heap.json`,
		Annotations: map[string]string{stopsOnSignal: "yes"},
		RunE: func(c *cobra.Command, args []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usageError{fmt.Errorf("--listen %q: want HOST:PORT, such as 127.0.0.1:8080 (see '%s --help')", listen, c.CommandPath())}
			}
			if cacheDir == "" {
				if d, err := os.UserCacheDir(); err == nil {
					cacheDir = filepath.Join(d, "rbscope")
				}
			}
			if cacheDir != "" {
				if err := os.MkdirAll(cacheDir, 0o700); err != nil {
					return fmt.Errorf("cache directory: %w", err)
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("cannot listen on %s: %w", listen, err)
			}
			if cacheMaxAge < 0 || cacheMaxMB < 0 {
				return usageError{fmt.Errorf("--cache-max-age %v, --cache-max-mb %d: want 0 (no limit) or more (see '%s --help')", cacheMaxAge, cacheMaxMB, c.CommandPath())}
			}
			o := ui.Options{Files: args, CacheDir: cacheDir, ListenHost: host, Log: os.Stderr, Processes: discover.NewLister(procfs.Root, vmOptions), VM: vmOptions,
				CacheLimits: ui.CacheLimits{MaxAge: cacheMaxAge, MaxBytes: cacheMaxMB << 20}}
			if cfg, err := crash.LoadConfig(crashConfig); err == nil {
				o.CrashDir = cfg.Dir
			} else {
				o.CrashErr = err
			}
			s, err := ui.New(ln, o)
			if err != nil {
				ln.Close()
				return err
			}
			fmt.Println(s.URL())
			return s.Serve(c.Context())
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve on (port 0: a random one)")
	c.Flags().StringVar(&crashConfig, "crash-config", crash.DefaultConfigPath, "crash handler config file, naming the crash store the page lists")
	c.Flags().StringVar(&cacheDir, "cache-dir", "", "where indexes of dumps in unwritable directories and dropped files go (default: the user's cache directory/rbscope)")
	c.Flags().DurationVar(&cacheMaxAge, "cache-max-age", 14*24*time.Hour, "remove what the cache directory keeps (dumps and recordings taken from the page, dropped files, indexes) once older than this; 0: never")
	c.Flags().Int64Var(&cacheMaxMB, "cache-max-mb", 20<<10, "remove the oldest of what the cache directory keeps while it holds more than this many MiB; 0: no limit")
	return c
}
