package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	prom "github.com/prometheus/procfs"
)

// The host's files under /proc, beside the processes': its CPUs' times
// (stat), its memory (meminfo) and the kernel's settings (sys: Yama's
// ptrace policy, the crash handler's core_pattern).

// HostCPUTimes is the time this machine's CPUs have spent since boot,
// summed over them (/proc/stat's cpu line): Busy running tasks and
// interrupts (user, nice, system, irq, softirq), Idle (idle and waiting
// for I/O), and Steal, the time the hypervisor took: time a thread on a
// vCPU spent, by the guest's clocks, on a CPU that was not running it.
type HostCPUTimes struct {
	Busy, Idle, Steal time.Duration
	// CPUs is how many CPUs the line sums.
	CPUs int
}

// HostCPU reads HostCPUTimes.
func HostCPU() (HostCPUTimes, error) {
	fs, err := prom.NewFS(Root)
	if err != nil {
		return HostCPUTimes{}, fmt.Errorf("opening %s: %w", Root, err)
	}
	st, err := fs.Stat()
	if err != nil {
		return HostCPUTimes{}, fmt.Errorf("reading %s/stat: %w", Root, err)
	}
	c := st.CPUTotal
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return HostCPUTimes{
		Busy:  sec(c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ),
		Idle:  sec(c.Idle + c.Iowait),
		Steal: sec(c.Steal),
		CPUs:  len(st.CPU),
	}, nil
}

// HostSteal is HostCPU's Steal.
func HostSteal() (time.Duration, error) {
	c, err := HostCPU()
	return c.Steal, err
}

// HostMemAvailable is the memory the kernel says can still be had without
// swapping (/proc/meminfo's MemAvailable), in bytes; false where it does
// not say.
func HostMemAvailable() (int64, bool) {
	fs, err := prom.NewFS(Root)
	if err != nil {
		return 0, false
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemAvailable == nil {
		return 0, false
	}
	return int64(*mi.MemAvailable) << 10, true
}

// PtraceScope is Yama's kernel.yama.ptrace_scope (0 to 3); false where the
// kernel has no Yama or the setting cannot be read.
func PtraceScope() (int, bool) {
	v, err := Sysctl("kernel/yama/ptrace_scope")
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil
}

// SysctlPath is the file of the kernel setting name ("kernel/core_pattern")
// under Root.
func SysctlPath(name string) string {
	return filepath.Join(Root, "sys", name)
}

// Sysctl reads the kernel setting name, without its trailing newline.
func Sysctl(name string) (string, error) {
	b, err := os.ReadFile(SysctlPath(name))
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// SetSysctl writes the kernel setting name.
func SetSysctl(name, value string) error {
	return os.WriteFile(SysctlPath(name), []byte(value+"\n"), 0o644)
}
