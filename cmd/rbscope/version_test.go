package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/wire"
)

// goVersionM reads a binary's build information as `go version -m` prints
// it: the main module's version and the build settings.
func goVersionM(t *testing.T, bin string) (modVersion string, settings map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	settings = map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			settings[k] = v
		}
	}
	return modVersion, settings
}

// versionJSON runs `bin version --json`.
func versionJSON(t *testing.T, bin string) (doc struct {
	SchemaVersion int    `json:"schema_version"`
	Version       string `json:"version"`
	Commit        string `json:"commit"`
	Modified      bool   `json:"modified"`
	Date          string `json:"date"`
	GoVersion     string `json:"go_version"`
	Platform      string `json:"platform"`
	RubyFamilies  []struct {
		Family   string   `json:"family"`
		MadeFrom string   `json:"made_from"`
		Arch     string   `json:"arch"`
		Releases []string `json:"releases"`
	} `json:"ruby_families"`
}) {
	t.Helper()
	stdout, stderr, code := runCommand(t, exec.Command(bin, "version", "--json"))
	if code != 0 {
		t.Fatalf("version --json: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("version --json: %v\n%s", err, stdout)
	}
	return doc
}

// TestVersionBuildInfo checks that `rbscope version` reports what the Go
// build information of the binary holds (as `go version -m` reads it), and
// that a release's version and date set at link time come first.
func TestVersionBuildInfo(t *testing.T) {
	goOut, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("test build", func(t *testing.T) {
		mod, settings := goVersionM(t, rbscopeBin)
		doc := versionJSON(t, rbscopeBin)
		want := mod
		if want == "(devel)" || want == "" {
			want = "devel"
		}
		if doc.Version != want || doc.Commit != settings["vcs.revision"] || doc.Date != settings["vcs.time"] ||
			doc.Modified != (settings["vcs.modified"] == "true") {
			t.Errorf("version --json says version %q commit %q date %q modified %v; the build information: %q %q %q %q",
				doc.Version, doc.Commit, doc.Date, doc.Modified, want, settings["vcs.revision"], settings["vcs.time"], settings["vcs.modified"])
		}
		if doc.SchemaVersion != wire.SchemaVersion || doc.GoVersion != strings.TrimSpace(string(goOut)) || doc.Platform != settings["GOOS"]+"/"+settings["GOARCH"] {
			t.Errorf("version --json: schema %d, go %q on %q; want %d, %q on %s/%s", doc.SchemaVersion, doc.GoVersion, doc.Platform,
				wire.SchemaVersion, strings.TrimSpace(string(goOut)), settings["GOOS"], settings["GOARCH"])
		}
		// --version prints what the command prints.
		text, _, code := rbscope(t, "version")
		flag, _, fcode := rbscope(t, "--version")
		if code != 0 || fcode != 0 || text != flag || !strings.HasPrefix(text, "rbscope "+doc.Version+"\n") {
			t.Errorf("version (exit %d) and --version (exit %d) differ or do not start with the version:\n%s\n---\n%s", code, fcode, text, flag)
		}
	})
	t.Run("release build", func(t *testing.T) {
		// As `make dist` builds: VCS stamping where the source is a
		// repository, the version and date given at link time.
		bin := filepath.Join(t.TempDir(), "rbscope")
		build := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", "-X main.version=9.8.7 -X main.buildDate=2031-02-03", "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		_, settings := goVersionM(t, bin)
		doc := versionJSON(t, bin)
		if doc.Version != "9.8.7" || doc.Date != "2031-02-03" || doc.Commit != settings["vcs.revision"] {
			t.Errorf("version --json says %q of %q at commit %q; want 9.8.7 of 2031-02-03 at %q", doc.Version, doc.Date, doc.Commit, settings["vcs.revision"])
		}
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		switch {
		case settings["vcs.revision"] == "":
			// Go stamps no VCS information in a git worktree (whose .git
			// is a file) nor outside a repository.
			t.Logf("the build holds no VCS information (git worktree or no repository): commit not compared with git")
		case err != nil:
			t.Logf("git rev-parse HEAD: %v: commit not compared with git", err)
		case doc.Commit != strings.TrimSpace(string(head)):
			t.Errorf("commit %q, git's HEAD is %s", doc.Commit, head)
		}
	})
}

// TestVersionFamilies checks the families `rbscope version` lists against
// the generated layout tables themselves: one file per family, whose
// header names the Ruby release it was generated from.
func TestVersionFamilies(t *testing.T) {
	files, err := filepath.Glob("../../internal/rubyvm/layouts/ruby_*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no layout tables found: %v", err)
	}
	fileName := regexp.MustCompile(`^ruby_(\d+)_(\d+)(?:_(\w+))?\.go$`) // ruby_3_1.go is x86_64's, ruby_3_1_aarch64.go aarch64's
	release := regexp.MustCompile(`^// Code generated by tools/layoutgen from .*?\bC?Ruby (\d+\.\d+\.\d+)\b`)
	want := map[string]string{}
	for _, f := range files {
		m := fileName.FindStringSubmatch(filepath.Base(f))
		if m == nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := release.FindStringSubmatch(string(b))
		if r == nil {
			t.Fatalf("%s: no 'Code generated ... Ruby X.Y.Z' header", f)
		}
		archName := m[3]
		if archName == "" {
			archName = "x86_64"
		}
		want[m[1]+"."+m[2]+" "+archName] = r[1]
	}
	doc := versionJSON(t, rbscopeBin)
	got := map[string]string{}
	for _, f := range doc.RubyFamilies {
		got[f.Family+" "+f.Arch] = f.MadeFrom
	}
	if len(got) != len(want) {
		t.Errorf("version lists %d families %v; the layout tables are %d: %v", len(got), got, len(want), want)
	}
	for fam, rel := range want {
		if got[fam] != rel {
			t.Errorf("family %s: version says made from %q; its table's header says %q", fam, got[fam], rel)
		}
	}
	text, _, _ := rbscope(t, "version")
	for _, f := range doc.RubyFamilies {
		made := want[f.Family+" "+f.Arch]
		line := `^\s+` + regexp.QuoteMeta(f.Family) + `\s+made from ` + regexp.QuoteMeta(made) + `\s+` + f.Arch
		if len(f.Releases) > 0 {
			line += regexp.QuoteMeta("; releases " + strings.Join(f.Releases, " "))
		}
		if !regexpLine(text, line+`$`) {
			t.Errorf("version's text lacks family %s made from %s for %s and its releases %v:\n%s", f.Family, made, f.Arch, f.Releases, text)
		}
		if f.Arch != "x86_64" && len(f.Releases) > 0 {
			t.Errorf("family %s for %s lists releases %v: the release layouts are x86_64's", f.Family, f.Arch, f.Releases)
		}
		// every release listed is one whose layout rbscope gives, the
		// release its table was made from among them
		if len(f.Releases) > 0 && !slices.Contains(f.Releases, made) {
			t.Errorf("family %s lists releases %v, without %s, which its table was made from", f.Family, f.Releases, made)
		}
		for _, r := range f.Releases {
			if l, known, _ := layouts.ForRelease(r); l == nil || !known || l.Release != r {
				t.Errorf("version lists %s, whose layout is not known", r)
			}
		}
	}
}
