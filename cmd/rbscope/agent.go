package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/agent"
)

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var tags, pids []string
	var match, passwordFile, metricsAddr string
	var interval time.Duration
	c := &cobra.Command{
		Use:   "agent --server URL",
		Short: "Profile every Ruby process of the host without end, pushing to Pyroscope",
		Long: `Find the Ruby processes of the host (those whose mappings hold a Ruby image,
containers' included; found again every few seconds, so new workers join and
exited ones leave), sample each without pausing it (--pause to stop it for
each sample), and push one pprof profile per process per --upload-interval
to a Pyroscope server's Push API (/ingest for an older server).

Profiles carry the labels the Pyroscope Ruby gem sends: __name__=process_cpu,
service_name, pid, hostname, process.runtime.name=ruby,
process.runtime.version, and each --tag. service_name is --service-name, or
derived from the process's command line: the script Ruby runs ('ruby
bin/rails server' -> rails), else the program ('puma: cluster worker 0' ->
puma, 'sidekiq 7.1.0 app' -> sidekiq).

While the server is away, profiles wait in a queue of 256 (the oldest
dropped first, counted); retries back off up to 30 s; sampling never waits.
SIGINT or SIGTERM flushes what is held (for at most 10 s) and exits.`,
		Example: `  rbscope agent --server http://pyroscope:4040
  rbscope agent --server https://profiles.example.com --service-name billing --tag env=prod --match puma
  rbscope agent --server http://pyroscope:4040 --pid 4242 --metrics-addr :9464`,
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Args:        noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if cfg.Server == "" {
				return usageError{fmt.Errorf("--server URL is required (see 'rbscope agent --help')")}
			}
			if u, err := url.Parse(cfg.Server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError{fmt.Errorf("--server %q: want an http:// or https:// URL (see 'rbscope agent --help')", cfg.Server)}
			}
			cfg.Tags = map[string]string{}
			for _, t := range tags {
				k, v, ok := strings.Cut(t, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--tag %q: want key=value", t)}
				}
				cfg.Tags[k] = v
			}
			for _, p := range pids {
				var pid int
				if _, err := fmt.Sscan(p, &pid); err != nil || pid <= 0 {
					return usageError{fmt.Errorf("--pid %q: want a process ID", p)}
				}
				cfg.PIDs = append(cfg.PIDs, pid)
			}
			if match != "" {
				re, err := regexp.Compile(match)
				if err != nil {
					return usageError{fmt.Errorf("--match %q: %w", match, err)}
				}
				cfg.Match = re
			}
			if (cfg.BasicAuthUser == "") != (passwordFile == "") {
				return usageError{fmt.Errorf("--basic-auth-user and --basic-auth-password-file go together")}
			}
			if passwordFile != "" {
				b, err := os.ReadFile(passwordFile)
				if err != nil {
					return fmt.Errorf("--basic-auth-password-file: %w", err)
				}
				cfg.BasicAuthPassword = strings.TrimRight(string(b), "\r\n")
			}
			if cfg.Rate < 1 || cfg.Rate > 1000 {
				return usageError{fmt.Errorf("--rate %v: give 1 to 1000 samples per second", cfg.Rate)}
			}
			cfg.UploadInterval = interval
			cfg.Log = os.Stderr
			cfg.VM = vmOptions
			metrics := agent.NewMetrics()
			if metricsAddr != "" {
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				srv := &http.Server{Handler: metrics.Handler(), ReadHeaderTimeout: 5 * time.Second}
				go func() {
					if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
						fmt.Fprintln(os.Stderr, "rbscope agent: metrics:", err)
					}
				}()
				defer srv.Close()
			}
			fmt.Fprintf(os.Stderr, "rbscope agent: pushing to %s every %v\n", cfg.Server, cfg.UploadInterval)
			return agent.New(cfg, metrics).Run(c.Context(), 10*time.Second)
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Server, "server", "", "the Pyroscope server's URL")
	f.StringVar(&cfg.ServiceName, "service-name", "", "service_name of every profile (default: from each process's command line)")
	f.StringArrayVar(&tags, "tag", nil, "a label key=value on every profile (repeatable)")
	durationFlag(f, &interval, "upload-interval", "", agent.DefaultUploadInterval, "how long each profile covers")
	f.Float64Var(&cfg.Rate, "rate", agent.DefaultRate, "samples per second per process")
	f.StringArrayVar(&pids, "pid", nil, "profile this process only (repeatable); default: every Ruby process of the host")
	f.StringVar(&match, "match", "", "profile only the processes whose command line matches this regular expression")
	f.BoolVar(&cfg.Pause, "pause", false, "stop each process for each sample (exact stacks, more overhead)")
	f.StringVar(&cfg.TenantID, "tenant-id", "", "X-Scope-OrgID of every upload")
	f.StringVar(&cfg.BasicAuthUser, "basic-auth-user", "", "HTTP basic auth user")
	f.StringVar(&passwordFile, "basic-auth-password-file", "", "file holding the HTTP basic auth password")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve the agent's own metrics (Prometheus text) at this address, e.g. :9464")
	return c
}
