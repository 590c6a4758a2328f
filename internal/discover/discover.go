// Package discover finds the Ruby processes of a host from /proc: those
// whose mappings hold a Ruby image by rbscope's one rule (procfs.RubyImage:
// a libruby, or an executable named ruby*, as a static build is),
// containers' included (their mappings name paths inside the container;
// rbscope opens the mapped files themselves).
package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/procfs"
)

// Process is a process that looks like Ruby.
type Process struct {
	PID int
	// Args is its command line (arguments joined by spaces).
	Args string
	// Start is when it started, in clock ticks since boot (0 if unknown):
	// with PID, it names one process, as a PID alone does not once reused.
	Start uint64
	// Image is the path of its Ruby image as its mappings name it.
	Image string
}

// maxMapsBytes bounds what a process's maps file may make the scan read
// (procfs bounds its command line).
const maxMapsBytes = 8 << 20

// Ruby lists the processes of the host (through proc, normally "/proc")
// whose mappings hold a Ruby image and, when match is set, whose command
// line it matches; rbscope's own process is left out. Processes that end
// or cannot be read meanwhile are left out too.
// When known is set, the processes it says the caller has already are
// left out before their mappings are read: an agent scanning every few
// seconds reads only the new processes' maps, not its fifty workers'
// again.
func Ruby(proc string, match *regexp.Regexp, known func(pid int) bool) ([]Process, error) {
	pids, err := procfs.PIDs(proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var out []Process
	for _, pid := range pids {
		if pid == self || known != nil && known(pid) {
			continue
		}
		args := procfs.Cmdline(proc, pid)
		if match != nil && !match.MatchString(args) {
			continue
		}
		maps, err := procfs.ReadMapsFile(filepath.Join(proc, strconv.Itoa(pid), "maps"), maxMapsBytes)
		if err != nil {
			continue
		}
		image, ok := procfs.RubyImage(maps)
		if !ok {
			continue
		}
		out = append(out, Process{PID: pid, Args: args, Start: StartTime(proc, pid), Image: image})
	}
	return out, nil
}

// StartTime reads when process pid started (through proc, normally
// "/proc"), in clock ticks since boot: field 22 of its stat file, or 0 if
// that cannot be read.
func StartTime(proc string, pid int) uint64 {
	st, err := procfs.ReadStatFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	return st.StartTime
}

// ServiceName derives a service name from a command line, for a process
// given none: a script run by ruby names it (`ruby bin/rails server` ->
// "rails"), else the program does (`puma: cluster worker 0: 12 [app]` ->
// "puma", `sidekiq 7.1.0 app [0 of 5 busy]` -> "sidekiq"). A program
// run by the dynamic linker itself (`ld-linux-x86-64.so.2 --library-path
// DIR ruby3.4 app.rb`) is named as if run directly.
func ServiceName(args string) string {
	fields := skipDynamicLinker(strings.Fields(args))
	if len(fields) == 0 {
		return "ruby"
	}
	name := strings.TrimSuffix(filepath.Base(fields[0]), ":")
	if procfs.IsRubyImage(name) {
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

// ldsoValueOptions are the options of glibc's dynamic linker, run as a
// command, that take a value as the next argument.
var ldsoValueOptions = []string{"--library-path", "--inhibit-rpath", "--audit", "--preload", "--argv0",
	"--glibc-hwcaps-prefix", "--glibc-hwcaps-mask"}

// skipDynamicLinker returns the command line fields of the program a
// dynamic linker run as a command (glibc's ld-linux*.so*, musl's
// ld-musl-*.so*) loads, without the linker and its options; other
// command lines are returned as they are.
func skipDynamicLinker(fields []string) []string {
	if len(fields) == 0 {
		return fields
	}
	base := filepath.Base(fields[0])
	if !(strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-musl-") || base == "ld.so") || !strings.Contains(base, ".so") {
		return fields
	}
	for i := 1; i < len(fields); i++ {
		f := fields[i]
		switch {
		case slices.Contains(ldsoValueOptions, f):
			i++ // the option's value
		case !strings.HasPrefix(f, "--"):
			return fields[i:]
		}
	}
	return nil
}
