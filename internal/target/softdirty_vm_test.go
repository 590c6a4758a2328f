package target

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// inVMEnv is set in the virtual machine TestPrecopyOnSoftDirtyKernel boots.
const inVMEnv = "RBSCOPE_IN_TEST_VM"

// SoftDirtyKernel is where scripts/softdirty-kernel.sh puts a kernel built
// with CONFIG_MEM_SOFT_DIRTY (Debian's cloud kernel).
func SoftDirtyKernel() string {
	return filepath.Join(testruby.EnvOr("RBSCOPE_SOFTDIRTY_KERNEL_DIR", "/var/cache/rbscope/softdirty-kernel"), "vmlinuz")
}

// TestPrecopyOnSoftDirtyKernel runs TestSnapshotOfAWriter inside a virtual
// machine whose kernel keeps soft-dirty bits (Debian's), booted by qemu,
// where the host's kernel keeps none: the pre-copy, which the host cannot
// run, is tested there, against a process writing all the time. The
// machine runs this test binary, with its C library, and the writer, from
// an initial RAM disk.
func TestPrecopyOnSoftDirtyKernel(t *testing.T) {
	if os.Getenv(inVMEnv) != "" {
		t.Skip("inside the test machine")
	}
	if why := softDirtyMissing(); why == "" {
		t.Skip("this kernel keeps soft-dirty bits: TestSnapshotOfAWriter pre-copies here")
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testruby.Missing(t, "qemu-system-x86_64 is not installed (make deps installs qemu-system-x86)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testruby.Missing(t, "busybox is not installed (make deps installs busybox-static)")
	}
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		testruby.Missing(t, "cpio is not installed (make deps installs it)")
	}
	kernel := SoftDirtyKernel()
	if _, err := os.Stat(kernel); err != nil {
		testruby.Missing(t, "no kernel with soft-dirty bits at %s (scripts/softdirty-kernel.sh puts it there)", kernel)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	writer := buildC(t, root, "writer", writerProg)
	for _, f := range [][2]string{{self, "/target.test"}, {busybox, "/bin/busybox"}} {
		copyFile(t, f[0], filepath.Join(root, f[1]))
	}
	// The C library and loader the test binary and the writer run on, at
	// their paths.
	for _, bin := range []string{self, writer} {
		out, _ := exec.Command("ldd", bin).Output()
		for _, lib := range regexp.MustCompile(`(/[^ \t\n]+\.so[^ \t\n]*)`).FindAllString(string(out), -1) {
			if _, err := os.Stat(filepath.Join(root, lib)); err == nil {
				continue
			}
			real, err := filepath.EvalSymlinks(lib)
			if err != nil {
				t.Fatal(err)
			}
			copyFile(t, real, filepath.Join(root, lib))
		}
	}
	init := fmt.Sprintf(`#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
cd /
%s=1 %s=/writer /target.test -test.run '^TestSnapshotOfAWriter$' -test.v -test.count=1
echo "rbscope-vm-exit=$?"
poweroff -f
`, inVMEnv, WriterEnv)
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(init), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd")
	pack := exec.Command("sh", "-c", `find . | "$0" -o -H newc > "$1"`, cpio, initrd)
	pack.Dir = root
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("setup: the RAM disk: %v\n%s", err, out)
	}
	// Emulated (TCG), not KVM: a virtual machine's KVM may refuse a
	// nested one (and did here), and the test needs no speed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	vm := testruby.DieWithTest(exec.CommandContext(ctx, qemu, "-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "2",
		"-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet", "-nographic", "-no-reboot"))
	out, err := vm.CombinedOutput()
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if l := strings.TrimRight(sc.Text(), "\r"); strings.Contains(l, "snapshot_test.go") || strings.HasPrefix(strings.TrimSpace(l), "---") || strings.HasPrefix(l, "rbscope-vm-exit") || strings.Contains(l, "FAIL") || strings.Contains(l, "panic") {
			lines = append(lines, l)
		}
	}
	t.Logf("in the machine (%s):\n%s", filepath.Base(kernel), strings.Join(lines, "\n"))
	if err != nil && ctx.Err() != nil {
		t.Fatalf("the machine did not finish in time: %v", ctx.Err())
	}
	text := string(out)
	if !strings.Contains(text, "rbscope-vm-exit=0") || !strings.Contains(text, "--- PASS: TestSnapshotOfAWriter") {
		t.Fatalf("TestSnapshotOfAWriter did not pass in the machine (qemu: %v); its output:\n%s", err, tail(text, 4000))
	}
	if !regexp.MustCompile(`(?m)default.*\n.*pre-copied: paused`).MatchString(text) && !strings.Contains(text, "pre-copied: paused") {
		t.Fatalf("the machine's snapshot was not pre-copied:\n%s", tail(text, 4000))
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
