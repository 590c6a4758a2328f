package testruby

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EmulatedCore runs script (with a report path first) on a Ruby run under
// qemu-user (see Arm64) in a directory of its own, where qemu writes the
// guest's core when the program dies of a signal
// (qemu_<prog>_<time>_<pid>.core). It returns the core, the report and
// what the program printed. kill, when set, is called with the program's
// PID and its report's path once the report is written, to end it.
func EmulatedCore(t *testing.T, rb Ruby, script string, rep any, kill func(pid int, report string), args ...string) (core, output string) {
	t.Helper()
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	cmd := rb.Command(append([]string{Testdata(script), report}, args...)...)
	cmd.Dir = dir
	DieWithTest(cmd)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	// qemu writes a core as the kernel would: within the core size
	// limit, which the program inherits (raised to the hard limit).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &lim)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	if kill != nil {
		// Not waited for meanwhile: kill may pause it with ptrace, and
		// a parent's wait would take the tracer's stops.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(report); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("no report within 2 minutes:\n%s", out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		kill(cmd.Process.Pid, report)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the program ended without a signal:\n%s", out.String())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no report: %v\n%s", err, out.String())
	}
	if err := json.Unmarshal(b, rep); err != nil {
		t.Fatal(err)
	}
	cores, _ := filepath.Glob(filepath.Join(dir, "qemu_*.core"))
	if len(cores) != 1 {
		t.Fatalf("qemu wrote %d cores (%v); is the core size limit 0? output:\n%s", len(cores), cores, out.String())
	}
	return cores[0], out.String()
}
