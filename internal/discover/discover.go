// Package discover finds the Ruby processes of a host from /proc: those
// whose mappings hold a Ruby image (a libruby, or an executable named
// ruby*, as a static build is), containers' included (their mappings name
// paths inside the container; rbscope opens the mapped files themselves).
package discover

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Process is a process that looks like Ruby.
type Process struct {
	PID int
	// Args is its command line (arguments joined by spaces).
	Args string
	// Start is when it started, in clock ticks since boot (0 if unknown):
	// with PID, it names one process, as a PID alone does not once reused.
	Start uint64
}

// Budgets on what a process's /proc files may make the scan read.
const (
	maxMapsBytes    = 8 << 20
	maxCmdlineBytes = 64 << 10
)

// Ruby lists the processes of the host (through proc, normally "/proc")
// whose mappings hold a Ruby image and, when match is set, whose command
// line it matches; rbscope's own process is left out. Processes that end
// or cannot be read meanwhile are left out too.
func Ruby(proc string, match *regexp.Regexp) ([]Process, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		args := Cmdline(proc, pid)
		if match != nil && !match.MatchString(args) {
			continue
		}
		if !mapsRuby(dir) {
			continue
		}
		out = append(out, Process{PID: pid, Args: args, Start: StartTime(proc, pid)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// mapsRuby tells whether the process in dir maps a Ruby image.
func mapsRuby(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxMapsBytes))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		i := bytes.IndexByte(line, '/')
		if i < 0 || !bytes.Contains(line[:i], []byte("x")) { // code only
			continue
		}
		if IsRubyImage(string(line[i:])) {
			return true
		}
	}
	return false
}

// IsRubyImage tells whether a mapped file's path names a Ruby image:
// libruby.so*, libruby-X.Y.so*, or an executable ruby, rubyX.Y, ruby-X.Y.
func IsRubyImage(path string) bool {
	base := filepath.Base(strings.TrimSuffix(path, " (deleted)"))
	if strings.HasPrefix(base, "libruby.so") || strings.HasPrefix(base, "libruby-") && strings.Contains(base, ".so") {
		return true
	}
	return base == "ruby" || strings.HasPrefix(base, "ruby") && len(base) > 4 && (base[4] == '-' || base[4] >= '0' && base[4] <= '9')
}

// Cmdline reads the command line of process pid (through proc, normally
// "/proc"), arguments joined by spaces, at most 64 KiB of it.
func Cmdline(proc string, pid int) string {
	f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxCmdlineBytes))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// StartTime reads when process pid started (through proc, normally
// "/proc"), in clock ticks since boot: field 22 of its stat file, or 0 if
// that cannot be read.
func StartTime(proc string, pid int) uint64 {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The name (field 2) may hold spaces and parentheses: count from the
	// last ')'. After it, field 3 is the first.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// ServiceName derives a service name from a command line, for a process
// given none: a script run by ruby names it (`ruby bin/rails server` ->
// "rails"), else the program does (`puma: cluster worker 0: 12 [app]` ->
// "puma", `sidekiq 7.1.0 app [0 of 5 busy]` -> "sidekiq").
func ServiceName(args string) string {
	fields := strings.Fields(args)
	if len(fields) == 0 {
		return "ruby"
	}
	name := strings.TrimSuffix(filepath.Base(fields[0]), ":")
	if IsRubyImage(name) {
		name = "ruby" // code given with -e, or read from stdin
	scan:
		for i := 1; i < len(fields); i++ {
			switch f := fields[i]; {
			case f == "-e":
				break scan
			case f == "-r" || f == "-I" || f == "-C" || f == "-E":
				i++ // the option's value
			case !strings.HasPrefix(f, "-"):
				name = strings.TrimSuffix(filepath.Base(f), ".rb")
				break scan
			}
		}
	}
	if name == "" {
		return "ruby"
	}
	return name
}
