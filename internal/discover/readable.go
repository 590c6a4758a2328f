package discover

import (
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

// Readable is a Ruby process the commands can read, and what the UI's
// Processes view shows of it.
type Readable struct {
	Process
	// Ruby is the exact release read from the process's Ruby image (never
	// from a file's name); RubyError says why it could not be read
	// (rbscope would refuse the process: an unknown release, a layout
	// that does not fit), and Ruby is then empty.
	Ruby      string
	RubyError string
	// RSS is its resident memory in bytes, CPUSeconds its CPU time and
	// Threads its thread count, as the kernel gives them now.
	RSS        uint64
	CPUSeconds float64
	Threads    int
}

// Lister lists the Ruby processes the commands can read. It reads a
// process's Ruby release once, when first listed (the process is opened
// as a command opens it, with vmOpts), and keeps it while that process
// lives (by PID and start time).
type Lister struct {
	proc   string
	vmOpts rubyvm.Options
	mu     sync.Mutex
	known  map[[2]uint64]versionRead
}

// versionRead is a process's Ruby release, or why it could not be read.
type versionRead struct{ version, err string }

// NewLister returns a Lister of the processes under proc (normally
// procfs.Root), which opens their VMs with vmOpts (a BuildCache in it
// shares the images' reads).
func NewLister(proc string, vmOpts rubyvm.Options) *Lister {
	return &Lister{proc: proc, vmOpts: vmOpts, known: map[[2]uint64]versionRead{}}
}

// List returns the Ruby processes whose memory this user may open (as the
// commands do: /proc/PID/mem), with their Ruby releases and the kernel's
// figures, by PID.
func (l *Lister) List() ([]Readable, error) {
	found, err := Ruby(l.proc, nil, nil)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	alive := map[[2]uint64]bool{}
	out := []Readable{}
	for _, p := range found {
		if !canOpenMemory(l.proc, p.PID) {
			continue
		}
		key := [2]uint64{uint64(p.PID), p.Start}
		alive[key] = true
		v, ok := l.known[key]
		if !ok {
			v = l.readVersion(p.PID)
			l.known[key] = v
		}
		r := Readable{Process: p, Ruby: v.version, RubyError: v.err}
		if st, err := procfs.ReadStat(p.PID, 0); err == nil {
			r.CPUSeconds, r.Threads = st.CPU().Seconds(), st.NumThreads
		}
		if st, err := procfs.ReadStatus(p.PID, 0); err == nil {
			r.RSS = st.RSS
		}
		out = append(out, r)
	}
	for k := range l.known {
		if !alive[k] {
			delete(l.known, k)
		}
	}
	return out, nil
}

// readVersion opens process pid's VM as the commands do and returns its
// release, or why it could not.
func (l *Lister) readVersion(pid int) versionRead {
	p, err := liveproc.Open(pid, liveproc.Options{VM: l.vmOpts})
	if err != nil {
		return versionRead{err: err.Error()}
	}
	defer p.Close()
	return versionRead{version: p.VM.Version}
}

// canOpenMemory reports whether this user may open process pid's memory
// (under proc), as the commands need to.
func canOpenMemory(proc string, pid int) bool {
	fd, err := unix.Open(filepath.Join(proc, strconv.Itoa(pid), "mem"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
