package main

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/testruby"
)

var (
	buildOnce sync.Once
	built     *Result
	buildErr  error
	buildDir  string
)

// release builds the release files once for the package's tests.
func release(t *testing.T) *Result {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "rbscope-dist-test")
		if buildErr == nil {
			built, buildErr = Build("../..", buildDir, "")
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// manPages lists the committed man pages' names.
func manPages(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/man/*.1")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no man pages in docs/man: %v", err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	return names
}

// TestArchive unpacks each architecture's release archive and checks its
// files: a static binary for that architecture that runs (the arm64 one
// under qemu-aarch64-static) and reports the release's version, every man
// page, the three completions and the agent's unit.
func TestArchive(t *testing.T) {
	r := release(t)
	if len(r.Files) != len(arch.All) {
		t.Fatalf("%d architectures' files, want %d", len(r.Files), len(arch.All))
	}
	for _, af := range r.Files {
		t.Run(af.Arch.GOARCH, func(t *testing.T) { checkArchive(t, r, af) })
	}
}

func checkArchive(t *testing.T, r *Result, af ArchFiles) {
	f, err := os.Open(af.Archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	top := "rbscope-" + r.Version + "-linux-" + af.Arch.GOARCH + "/"
	dir := t.TempDir()
	got := map[string]int64{} // path -> mode
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(h.Name, top) {
			t.Fatalf("%s lies outside the archive's directory %s", h.Name, top)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(h.Name, top)
		got[name] = h.Mode
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{"rbscope": 0o755, "completions/rbscope.bash": 0o644, "completions/_rbscope": 0o644,
		"completions/rbscope.fish": 0o644, "systemd/rbscope-agent.service": 0o644}
	for _, p := range manPages(t) {
		want["man/"+p] = 0o644
	}
	if _, err := os.Stat("../../LICENSE"); err == nil {
		want["LICENSE"] = 0o644
	}
	docs, err := DocFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		want[d] = 0o644
	}
	for _, d := range []string{"README.md", "docs/security.md", "docs/rubies.md", "docs/guides/containers-kubernetes.md"} {
		if _, ok := want[d]; !ok {
			t.Errorf("the release's documentation lacks %s, which error messages name", d)
		}
	}
	for name, mode := range want {
		if m, ok := got[name]; !ok {
			t.Errorf("the archive lacks %s", name)
		} else if m != mode {
			t.Errorf("%s has mode %o, want %o", name, m, mode)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("the archive holds %s, which the release does not list", name)
		}
	}

	bin := filepath.Join(dir, "rbscope")
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the archive's rbscope is dynamically linked (%v): want a static binary", p.Type)
		}
	}
	if e.Machine != af.Arch.Machine {
		t.Errorf("the archive's rbscope is for %v, want %v", e.Machine, af.Arch.Machine)
	}
	cmd := exec.Command(bin, "version", "--json")
	if af.Arch != arch.Host() {
		qemu, err := exec.LookPath("qemu-" + af.Arch.Name + "-static")
		if err != nil {
			testruby.Missing(t, "qemu-%s-static is not installed (make deps installs qemu-user-static): the %s binary is not run", af.Arch.Name, af.Arch.GOARCH)
		}
		cmd = exec.Command(qemu, bin, "version", "--json")
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rbscope version --json: %v", err)
	}
	var v struct {
		Version string `json:"version"`
		Date    string `json:"date"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != r.Version || v.Date == "" {
		t.Errorf("the archive's rbscope says version %q, date %q; want version %q and a date", v.Version, v.Date, r.Version)
	}
	unit, _ := os.ReadFile(filepath.Join(dir, "systemd/rbscope-agent.service"))
	committed, _ := os.ReadFile("../../contrib/rbscope-agent.service")
	if string(unit) != string(committed) || len(unit) == 0 {
		t.Errorf("the archive's unit is not contrib/rbscope-agent.service")
	}
}

// TestDebInstall installs the Debian package with dpkg, runs what it
// installed (rbscope version, man -w, the bash completion), removes it and
// checks that none of its files is left.
func TestDebInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("installing a package needs root: run as root (CI does) to test the .deb")
	}
	for _, tool := range []string{"dpkg", "dpkg-query", "man", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			testruby.Missing(t, "%s is not installed (make deps installs man-db): the .deb is not tested", tool)
		}
	}
	if _, err := os.Stat(bashCompletion); err != nil {
		testruby.Missing(t, "bash-completion is not installed (make deps installs it): the .deb is not tested")
	}
	if status := debStatus(); status != "" {
		t.Skipf("a package rbscope is known to dpkg on this machine (%s): the test would replace and remove it", status)
	}
	r := release(t)
	deb := ""
	for _, af := range r.Files {
		if af.Arch == arch.Host() {
			deb = af.Deb
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Whatever happens below, the machine is left without the package.
	t.Cleanup(func() {
		if debStatus() != "" {
			if out, err := exec.Command("dpkg", "--purge", "rbscope").CombinedOutput(); err != nil {
				t.Errorf("dpkg --purge rbscope: %v\n%s", err, out)
			}
		}
	})
	// --path-include: some images keep dpkg from installing man pages and
	// documentation.
	run("dpkg", "--path-include=/usr/share/man/man1/rbscope*", "--path-include=/usr/share/doc/rbscope/*", "-i", deb)
	listed := strings.Fields(run("dpkg", "-L", "rbscope"))

	wantFiles := []string{"/usr/bin/rbscope", "/usr/share/bash-completion/completions/rbscope",
		"/usr/share/zsh/vendor-completions/_rbscope", "/usr/share/fish/vendor_completions.d/rbscope.fish",
		"/lib/systemd/system/rbscope-agent.service",
		// The pages error messages name (docs/security.md#permissions, ...).
		"/usr/share/doc/rbscope/README.md", "/usr/share/doc/rbscope/docs/security.md",
		"/usr/share/doc/rbscope/docs/rubies.md", "/usr/share/doc/rbscope/docs/guides/containers-kubernetes.md"}
	for _, p := range manPages(t) {
		wantFiles = append(wantFiles, "/usr/share/man/man1/"+p+".gz")
	}
	for _, f := range wantFiles {
		if !slices.Contains(listed, f) {
			t.Errorf("dpkg -L rbscope does not list %s", f)
		} else if st, err := os.Stat(f); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s is not installed: %v", f, err)
		}
	}

	if out := run("/usr/bin/rbscope", "version"); !strings.HasPrefix(out, "rbscope "+r.Version+"\n") {
		t.Errorf("the installed rbscope version prints:\n%s\nwant it to start with rbscope %s", out, r.Version)
	}
	if out := strings.TrimSpace(run("man", "-w", "rbscope-stack")); out != "/usr/share/man/man1/rbscope-stack.1.gz" {
		t.Errorf("man -w rbscope-stack = %q, want /usr/share/man/man1/rbscope-stack.1.gz", out)
	}
	// The bash completion, sourced as bash-completion would, completes
	// "rbscope st" through the installed binary.
	script := `source ` + bashCompletion + ` || exit 1
source /usr/share/bash-completion/completions/rbscope || exit 1
COMP_WORDS=(rbscope st); COMP_CWORD=1; COMP_LINE="rbscope st"; COMP_POINT=${#COMP_LINE}
__start_rbscope rbscope st rbscope
printf '%s\n' "${COMPREPLY[@]}"`
	if out := run("bash", "--norc", "--noprofile", "-c", script); !slices.Contains(strings.Fields(out), "stack") {
		t.Errorf("the bash completion of 'rbscope st' offers %q, want stack", out)
	}

	run("dpkg", "-r", "rbscope")
	for _, p := range listed {
		st, err := os.Stat(p) // /lib is a link to usr/lib on merged-/usr systems
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !st.IsDir() {
			t.Errorf("%s is left after dpkg -r", p)
			continue
		}
		// A directory stays when another package owns it or it holds
		// other files.
		if err := exec.Command("dpkg-query", "-S", p).Run(); err == nil {
			continue
		}
		if entries, _ := os.ReadDir(p); len(entries) == 0 {
			t.Errorf("the empty directory %s is left after dpkg -r", p)
		}
	}
	// The maintainer scripts keep the package known ("config-files")
	// until it is purged; it has no configuration file to keep.
	if status := debStatus(); status != "deinstall ok config-files" && status != "" {
		t.Errorf("after dpkg -r, dpkg says rbscope is %q", status)
	}
	run("dpkg", "--purge", "rbscope")
	if status := debStatus(); status != "" {
		t.Errorf("after dpkg --purge, dpkg says rbscope is %q", status)
	}
}

// TestDebArchitectures checks each architecture's Debian package: its
// control file names the architecture, and the rbscope it installs is a
// binary for it.
func TestDebArchitectures(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		testruby.Missing(t, "dpkg-deb is not installed: the packages are not checked")
	}
	r := release(t)
	for _, af := range r.Files {
		out, err := exec.Command("dpkg-deb", "-f", af.Deb, "Architecture").Output()
		if err != nil || strings.TrimSpace(string(out)) != af.Arch.GOARCH {
			t.Errorf("%s: Architecture %q (%v), want %s", af.Deb, out, err, af.Arch.GOARCH)
		}
		dir := t.TempDir()
		if out, err := exec.Command("dpkg-deb", "-x", af.Deb, dir).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", af.Deb, err, out)
		}
		e, err := elf.Open(filepath.Join(dir, "usr/bin/rbscope"))
		if err != nil {
			t.Fatal(err)
		}
		if e.Machine != af.Arch.Machine {
			t.Errorf("%s installs an rbscope for %v, want %v", af.Deb, e.Machine, af.Arch.Machine)
		}
		e.Close()
	}
}

// bashCompletion is bash-completion's library, which shells load before
// the completion scripts.
const bashCompletion = "/usr/share/bash-completion/bash_completion"

// debStatus is dpkg's status of the package rbscope, "" when dpkg knows
// none (never installed, or purged).
func debStatus() string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "rbscope").Output()
	if err != nil {
		return ""
	}
	if s := strings.TrimSpace(string(out)); s != "unknown ok not-installed" {
		return s
	}
	return ""
}
