// Package crash installs rbscope as the kernel's core_pattern handler and,
// when a process dumps core, keeps a full report: Ruby and native stacks,
// registers, a /proc snapshot and the compressed core.
package crash

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/wire"
)

// The kernel's settings crash install changes, and where they live.
const (
	CorePatternSysctl   = "kernel/core_pattern"
	CorePipeLimitSysctl = "kernel/core_pipe_limit"
)

// The files of the kernel's settings crash install changes.
var (
	CorePatternPath   = procfs.SysctlPath(CorePatternSysctl)
	CorePipeLimitPath = procfs.SysctlPath(CorePipeLimitSysctl)
)

// DefaultConfigPath is where `crash install` keeps its settings: the
// kernel's core_pattern holds at most 127 bytes, so only the %-specifiers
// travel there.
const DefaultConfigPath = "/etc/rbscope/crash.json"

// DefaultDir is the default crash store.
const DefaultDir = "/var/lib/rbscope/crashes"

// Config is what `crash install` saved and `crash handle` obeys.
type Config struct {
	Dir     string
	Webhook string
	Email   string
	SMTP    string
	// MaxCoreBytes caps a stored core (uncompressed bytes read); the rest
	// of the stream is read and dropped, and the report says so.
	MaxCoreBytes int64
	// KeepFreeBytes: no core is stored when the store's disk has less free.
	KeepFreeBytes int64
	// MaxCrashes: the oldest crashes beyond this many are removed.
	MaxCrashes int
	// Timeout bounds a whole handler run, notifications included.
	Timeout time.Duration
	// InsecureNotify allows a webhook over plain http and mail to an SMTP
	// server that offers no STARTTLS: reports name the crashed program and
	// its stacks, so by default they travel encrypted or not at all.
	InsecureNotify bool
	// PreviousPattern and PreviousPipeLimit are what was installed before,
	// restored by uninstall; a previous pipe handler still gets every core.
	PreviousPattern   string
	PreviousPipeLimit string
}

// wireConfig is the config as its file holds it.
func wireConfig(c *Config) *wire.CrashConfig {
	return &wire.CrashConfig{Dir: c.Dir, Webhook: c.Webhook, Email: c.Email, SMTP: c.SMTP, MaxCoreBytes: c.MaxCoreBytes,
		KeepFreeBytes: c.KeepFreeBytes, MaxCrashes: c.MaxCrashes, Timeout: c.Timeout.String(), InsecureNotify: c.InsecureNotify,
		PreviousPattern: c.PreviousPattern, PreviousPipeLimit: c.PreviousPipeLimit}
}

// configFromWire is the config a file holds.
func configFromWire(w *wire.CrashConfig) (*Config, error) {
	c := &Config{Dir: w.Dir, Webhook: w.Webhook, Email: w.Email, SMTP: w.SMTP, MaxCoreBytes: w.MaxCoreBytes,
		KeepFreeBytes: w.KeepFreeBytes, MaxCrashes: w.MaxCrashes, InsecureNotify: w.InsecureNotify,
		PreviousPattern: w.PreviousPattern, PreviousPipeLimit: w.PreviousPipeLimit}
	if w.Timeout != "" {
		d, err := time.ParseDuration(w.Timeout)
		if err != nil {
			return nil, fmt.Errorf("timeout: %w", err)
		}
		c.Timeout = d
	}
	return c, nil
}

// Defaults fills what is unset.
func (c *Config) Defaults() {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.MaxCoreBytes == 0 {
		c.MaxCoreBytes = 2 << 30
	}
	if c.KeepFreeBytes == 0 {
		c.KeepFreeBytes = 1 << 30
	}
	if c.MaxCrashes == 0 {
		c.MaxCrashes = 50
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
}

// LoadConfig reads a config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no crash handler config at %s: run 'rbscope crash install' first", path)
		}
		return nil, err
	}
	var w wire.CrashConfig
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := configFromWire(&w)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Defaults()
	return c, nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// checkStore refuses a store that root does not own, that others can write,
// or that is a symbolic link; it creates a missing one 0700.
func checkStore(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("crash store %s is not a directory (symbolic links are refused)", dir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if ok && sys.Uid != 0 {
		return fmt.Errorf("crash store %s is owned by uid %d, not root: refused", dir, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("crash store %s is writable by others (%v): refused", dir, st.Mode().Perm())
	}
	return nil
}

// Install points core_pattern at `exe crash handle` and saves cfg (with the
// settings it replaces) at configPath. It refuses to install twice.
func Install(cfg *Config, configPath, exe string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("crash install changes %s: run it as root", CorePatternPath)
	}
	cfg.Defaults()
	if err := checkStore(cfg.Dir); err != nil {
		return err
	}
	prev, err := procfs.Sysctl(CorePatternSysctl)
	if err != nil {
		return fmt.Errorf("reading %s: %w", CorePatternPath, err)
	}
	if strings.Contains(prev, " crash handle") {
		return fmt.Errorf("an rbscope crash handler is already installed (%s); run 'rbscope crash uninstall' first", prev)
	}
	prevLimit, err := procfs.Sysctl(CorePipeLimitSysctl)
	if err != nil {
		return fmt.Errorf("reading %s: %w", CorePipeLimitPath, err)
	}
	cfg.PreviousPattern, cfg.PreviousPipeLimit = prev, prevLimit
	pattern := "|" + exe + " crash handle"
	if configPath != DefaultConfigPath {
		pattern += " --config " + configPath
	}
	pattern += " %P %i %s %t %c %d %u %g"
	if len(pattern) > 127 {
		return fmt.Errorf("core_pattern would be %d bytes, over the kernel's 127: install rbscope at a shorter path or keep the config at %s", len(pattern), DefaultConfigPath)
	}
	b, _ := json.MarshalIndent(wireConfig(cfg), "", "  ")
	if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(configPath, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", configPath, err)
	}
	// The kernel waits for at most core_pipe_limit handlers at once and
	// keeps /proc/PID readable while they run; 0 means it does not wait.
	if n, _ := strconv.Atoi(prevLimit); n < 16 {
		if err := procfs.SetSysctl(CorePipeLimitSysctl, "16"); err != nil {
			os.Remove(configPath)
			return fmt.Errorf("writing %s: %w", CorePipeLimitPath, err)
		}
	}
	if err := procfs.SetSysctl(CorePatternSysctl, pattern); err != nil {
		procfs.SetSysctl(CorePipeLimitSysctl, prevLimit)
		os.Remove(configPath)
		return fmt.Errorf("writing %s: %w", CorePatternPath, err)
	}
	return nil
}

// Uninstall restores exactly what Install replaced.
func Uninstall(configPath string) (*Config, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("crash uninstall changes %s: run it as root", CorePatternPath)
	}
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return nil, fmt.Errorf("no rbscope crash handler is installed (%w)", err)
	}
	if err := procfs.SetSysctl(CorePatternSysctl, cfg.PreviousPattern); err != nil {
		return nil, fmt.Errorf("restoring %s: %w", CorePatternPath, err)
	}
	if err := procfs.SetSysctl(CorePipeLimitSysctl, cfg.PreviousPipeLimit); err != nil {
		return nil, fmt.Errorf("restoring %s: %w", CorePipeLimitPath, err)
	}
	if err := os.Remove(configPath); err != nil {
		return nil, err
	}
	return cfg, nil
}

// GetStatus reads the kernel's settings and the config.
func GetStatus(configPath string) *wire.CrashStatus {
	st := &wire.CrashStatus{ConfigPath: configPath}
	st.CorePattern, _ = procfs.Sysctl(CorePatternSysctl)
	st.CorePipeLimit, _ = procfs.Sysctl(CorePipeLimitSysctl)
	if cfg, err := LoadConfig(configPath); err == nil {
		st.Config = wireConfig(cfg)
		st.Installed = strings.Contains(st.CorePattern, " crash handle")
		if ids, err := List(cfg.Dir); err == nil {
			st.Crashes = len(ids)
		}
	}
	return st
}
