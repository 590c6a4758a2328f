package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rbscope/rbscope/internal/agent"
	"github.com/rbscope/rbscope/internal/otlp"
)

// agentSettings are the agent's flags.
type agentSettings struct {
	server, otlpEndpoint, serviceName, match string
	passwordFile, metricsAddr                string
	tenantID, basicAuthUser                  string
	tags, pids, profiles                     []string
	interval                                 time.Duration
	rate                                     float64
	pause, realtime, ebpf, contextLabels     bool
}

// defineAgentFlags defines the agent's flags on fs, into s, with s's
// values as defaults (so that a --config file overrides the command line).
// agentProcs is how many of the Go runtime's processors (GOMAXPROCS) an
// agent run takes: with the BPF sampler, whose walks run in the kernel,
// the agent only wakes to drain rings, and one processor spares the
// runtime waking a second thread to look for work at each wake (0.95%
// of a core against 0.73% at 10 processes, --ebpf cpu,wall, Ruby 3.1.2);
// the user-space sampler keeps the runtime's own count (def), its ticks
// not waiting behind an upload's encoding. A GOMAXPROCS the environment
// sets wins.
func agentProcs(ebpf bool, def int) int {
	if os.Getenv("GOMAXPROCS") != "" || !ebpf {
		return def
	}
	return 1
}

func defineAgentFlags(fs *pflag.FlagSet, s *agentSettings) {
	fs.StringVar(&s.server, "server", s.server, "the Pyroscope server's URL")
	fs.StringVar(&s.otlpEndpoint, "otlp-endpoint", s.otlpEndpoint, "an OpenTelemetry receiver's OTLP/HTTP URL (a collector's, http://collector:4318): profiles go to URL"+otlp.Path+" as OTLP profiles (signal "+otlp.SignalVersion+"), beside --server or instead of it")
	fs.StringVar(&s.serviceName, "service-name", s.serviceName, "service_name of every profile (default: from each process's command line)")
	fs.StringArrayVar(&s.tags, "tag", s.tags, "a label key=value on every profile (repeatable)")
	durationFlag(fs, &s.interval, "upload-interval", "", s.interval, "how long each profile covers")
	fs.Float64Var(&s.rate, "rate", s.rate, "samples per second per process")
	fs.StringArrayVar(&s.pids, "pid", s.pids, "profile this process only (repeatable); default: every Ruby process of the host")
	fs.StringVar(&s.match, "match", s.match, "profile only the processes whose command line matches this regular expression")
	fs.BoolVar(&s.pause, "pause", s.pause, "stop each process for each sample (exact stacks, more overhead)")
	fs.BoolVar(&s.realtime, "realtime", s.realtime, "run the sampling thread at real-time priority where allowed (root or CAP_SYS_NICE), so that samples on a busy host land where they were drawn (it leaves real time when its ticks use half of a CPU); --realtime=false to keep it at normal priority")
	fs.BoolVar(&s.ebpf, "ebpf", s.ebpf, "sample with the BPF sampler (experimental): the Ruby frame walk runs in the kernel on each CPU's clock and the agent wakes 20 times a second while a process is busy, down to 2.5 while all are quiet (sooner when a ring buffer is a quarter full), whatever the rate and the number of processes; wall profiles add each thread's time off a CPU from the scheduler's context switches (the kernel's BTF needed); needs root (CAP_BPF, CAP_PERFMON) in the host's PID namespace")
	fs.StringSliceVar(&s.profiles, "profile", s.profiles, "the profiles pushed for each process: cpu (the threads on a CPU), wall (every thread, whatever it does: waits for the database, locks, the GVL, sleep), or cpu,wall")
	fs.BoolVar(&s.contextLabels, "context-labels", s.contextLabels, "label each sample with the program's context, read from its stack: endpoint, the Rails controller action (IssuesController#show) or Sinatra route (GET /items/:id), and job, the Sidekiq or ActiveJob job class; --context-labels=false for none")
	fs.StringVar(&s.tenantID, "tenant-id", s.tenantID, "X-Scope-OrgID of every upload")
	fs.StringVar(&s.basicAuthUser, "basic-auth-user", s.basicAuthUser, "HTTP basic auth user")
	fs.StringVar(&s.passwordFile, "basic-auth-password-file", s.passwordFile, "file holding the HTTP basic auth password")
	fs.StringVar(&s.metricsAddr, "metrics-addr", s.metricsAddr, "serve the agent's own metrics (Prometheus text) at this address, e.g. :9464")
}

// withConfig returns s overridden by the flags of the file at path: flags
// as on the command line, any number a line, '#' starting a comment.
func (s agentSettings) withConfig(path string) (agentSettings, error) {
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("--config: %w", err)
	}
	var args []string
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		args = append(args, strings.Fields(line)...)
	}
	s.tags, s.pids = slices.Clone(s.tags), slices.Clone(s.pids)
	fs := pflag.NewFlagSet("config", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineAgentFlags(fs, &s)
	if err := fs.Parse(args); err != nil {
		return s, fmt.Errorf("--config %s: %w", path, err)
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("--config %s: unexpected %q (flags only)", path, fs.Arg(0))
	}
	return s, nil
}

// config checks the settings and makes the agent's configuration.
func (s agentSettings) config() (agent.Config, error) {
	cfg := agent.Config{Server: s.server, OTLPEndpoint: s.otlpEndpoint, Version: buildVersion().Version, ServiceName: s.serviceName, Rate: s.rate, Pause: s.pause, Realtime: s.realtime, EBPF: s.ebpf, ContextLabels: s.contextLabels,
		TenantID: s.tenantID, BasicAuthUser: s.basicAuthUser, UploadInterval: s.interval, Tags: map[string]string{}}
	if cfg.Server == "" && cfg.OTLPEndpoint == "" {
		return cfg, usageError{fmt.Errorf("--server URL or --otlp-endpoint URL is required (see 'rbscope agent --help')")}
	}
	for flag, v := range map[string]string{"--server": cfg.Server, "--otlp-endpoint": cfg.OTLPEndpoint} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, usageError{fmt.Errorf("%s %q: want an http:// or https:// URL (see 'rbscope agent --help')", flag, v)}
		}
	}
	for _, t := range s.tags {
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			return cfg, usageError{fmt.Errorf("--tag %q: want key=value", t)}
		}
		cfg.Tags[k] = v
	}
	for _, p := range s.pids {
		var pid int
		if _, err := fmt.Sscan(p, &pid); err != nil || pid <= 0 {
			return cfg, usageError{fmt.Errorf("--pid %q: want a process ID", p)}
		}
		cfg.PIDs = append(cfg.PIDs, pid)
	}
	if s.match != "" {
		re, err := regexp.Compile(s.match)
		if err != nil {
			return cfg, usageError{fmt.Errorf("--match %q: %w", s.match, err)}
		}
		cfg.Match = re
	}
	if (s.basicAuthUser == "") != (s.passwordFile == "") {
		return cfg, usageError{fmt.Errorf("--basic-auth-user and --basic-auth-password-file go together")}
	}
	if s.passwordFile != "" {
		b, err := os.ReadFile(s.passwordFile)
		if err != nil {
			return cfg, fmt.Errorf("--basic-auth-password-file: %w", err)
		}
		cfg.BasicAuthPassword = strings.TrimRight(string(b), "\r\n")
	}
	if cfg.Rate < 1 || cfg.Rate > 1000 {
		return cfg, usageError{fmt.Errorf("--rate %v: give 1 to 1000 samples per second", cfg.Rate)}
	}
	if cfg.UploadInterval <= 0 {
		return cfg, usageError{fmt.Errorf("--upload-interval %v: give a positive duration", cfg.UploadInterval)}
	}
	for _, p := range s.profiles {
		switch p {
		case "cpu":
			cfg.CPU = true
		case "wall":
			cfg.Wall = true
		default:
			return cfg, usageError{fmt.Errorf("--profile %q: give cpu, wall or cpu,wall", p)}
		}
	}
	if cfg.EBPF && cfg.Pause {
		return cfg, usageError{fmt.Errorf("--pause cannot be used with --ebpf: the BPF sampler reads threads as they run; drop one of them")}
	}
	cfg.Log = os.Stderr
	cfg.VM = vmOptions
	return cfg, nil
}

func newAgentCmd() *cobra.Command {
	s := agentSettings{interval: agent.DefaultUploadInterval, rate: agent.DefaultRate, profiles: []string{"cpu"}, realtime: true, contextLabels: true}
	var configPath string
	c := &cobra.Command{
		Use:   "agent --server URL | --otlp-endpoint URL",
		Short: "Profile every Ruby process of the host without end, pushing to Pyroscope or OpenTelemetry",
		Long: `Find the Ruby processes of the host (those whose mappings hold a Ruby image,
containers' included; found again every few seconds, so new workers join and
exited ones leave), sample each without pausing it (--pause to stop it for
each sample), and push one pprof profile per process per --upload-interval
to a Pyroscope server's Push API (/ingest for an older server), or to an
OpenTelemetry receiver as OTLP profiles (--otlp-endpoint: OTLP/HTTP, the
profiles signal v1development, the labels below as the resource's
attributes, service_name as service.name, pid as process.pid, hostname as
host.name), or to both, each through a queue of its own.

Profiles carry the labels the Pyroscope Ruby gem sends: __name__=process_cpu,
service_name, pid, hostname, process.runtime.name=ruby,
process.runtime.version, and each --tag; and process.title, the command line
as ps shows it when the process was found, which forking servers set per
process ('puma: cluster worker 0: 4242 [app]', 'unicorn worker[1] ...'), to
tell a master and its workers apart. service_name is --service-name, or
derived from the process's command line: the script Ruby runs ('ruby
bin/rails server' -> rails), else the program ('puma: cluster worker 0' ->
puma, 'sidekiq 7.1.0 app' -> sidekiq).

Each sample carries the program's context, read from its stack
(--context-labels=false for none): endpoint, the Rails controller action
that Rails' dispatch called ('IssuesController#show'; not in filters,
middleware or rendering after the action) or the Sinatra route whose block
runs ('GET /items/:id'; not with --ebpf), and job, the class whose perform
Sidekiq's processor or ActiveJob called ('HardJob'). They are pprof sample
labels, which Pyroscope makes series labels to filter by, and OTLP sample
attributes; a sample out of any action or job has neither.

While the server is away, profiles wait in a queue of 256 (the oldest
dropped first, counted); retries back off up to 30 s; sampling never waits.
SIGINT or SIGTERM flushes what is held (for at most 10 s) and exits. --config
FILE holds more flags (as on the command line, '#' for comments), which
override the command line's; SIGHUP reads it again and restarts the
profiling with it (--metrics-addr keeps its first value).`,
		Example: `  rbscope agent --server http://pyroscope:4040
  rbscope agent --server https://profiles.example.com --service-name billing --tag env=prod --match puma
  rbscope agent --otlp-endpoint http://otel-collector:4318
  rbscope agent --config /etc/rbscope/agent.flags --metrics-addr :9464`,
		Annotations: map[string]string{stopsOnSignal: "yes", reloadsOnSIGHUP: "yes"},
		Args:        noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			settings, err := s.withConfig(configPath)
			if err != nil {
				return usageError{err}
			}
			cfg, err := settings.config()
			if err != nil {
				return err
			}
			metrics := agent.NewMetrics()
			if settings.metricsAddr != "" {
				ln, err := net.Listen("tcp", settings.metricsAddr)
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
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			procs := runtime.GOMAXPROCS(0)
			for {
				// A SIGTERM that came with a SIGHUP, while the agent
				// flushed for it, ends the run here rather than starting
				// it again.
				if c.Context().Err() != nil {
					return nil
				}
				with := ""
				if cfg.EBPF {
					with = " (BPF sampler)"
				}
				runtime.GOMAXPROCS(agentProcs(cfg.EBPF, procs))
				server, interval := strings.Join(slices.DeleteFunc([]string{cfg.Server, cfg.OTLPEndpoint}, func(s string) bool { return s == "" }), " and "), cfg.UploadInterval
				cfg.Started = func() {
					fmt.Fprintf(os.Stderr, "rbscope agent: pushing to %s every %v%s\n", server, interval, with)
				}
				runCtx, stop := context.WithCancel(c.Context())
				done := make(chan struct{})
				var runErr error
				go func() {
					defer close(done)
					runErr = agent.New(cfg, metrics).Run(runCtx, 10*time.Second)
				}()
				select {
				case <-done:
					stop()
					return runErr
				case <-hup:
					stop()
					<-done // what it held is pushed
					next, err := s.withConfig(configPath)
					if err == nil {
						var ncfg agent.Config
						if ncfg, err = next.config(); err == nil {
							cfg = ncfg
						}
					}
					if err != nil {
						fmt.Fprintf(os.Stderr, "rbscope agent: SIGHUP: %v; going on with the configuration before\n", err)
					} else {
						fmt.Fprintln(os.Stderr, "rbscope agent: SIGHUP: configuration read again")
					}
				}
			}
		},
	}
	defineAgentFlags(c.Flags(), &s)
	c.Flags().StringVar(&configPath, "config", "", "a file of more flags (overriding the command line's), read again on SIGHUP")
	return c
}
