// Package docs holds the tests of rbscope's documentation: the README stays
// short, every relative link of the Markdown pages leads to a file (and a
// heading) that exists, and every page an error message names exists.
package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, seen from this package.
const root = ".."

// maxReadmeLines is as long as the README may grow: it is for a new user's
// first minutes; the rest belongs in docs/.
const maxReadmeLines = 200

func TestReadmeShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the details to a page under docs/", n, maxReadmeLines)
	}
}

// mdLink finds Markdown links and images: [text](target) and ![alt](target).
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// TestLinks checks every relative link of README.md, ARCHITECTURE.md,
// CONTRIBUTING.md and docs/**/*.md: its file exists, and a #fragment names a
// heading of that file (as GitHub makes anchors of headings).
func TestLinks(t *testing.T) {
	pages := []string{"README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, page := range pages {
		lines, err := proseLines(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(link, "#")
				target := filepath.Join(root, page)
				if file != "" {
					target = filepath.Join(filepath.Dir(target), filepath.FromSlash(file))
				}
				if msg := checkTarget(target, frag); msg != "" {
					t.Errorf("%s:%d: link %s: %s", page, l.n, link, msg)
				}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found in %d pages: is the link pattern still right?", checked, len(pages))
	}
}

// docPath finds a page of the documentation named in a Go string.
var docPath = regexp.MustCompile(`docs/[A-Za-z0-9_./-]+\.md(#[A-Za-z0-9_-]+)?`)

// TestErrorPages checks every docs/... page named by a string in rbscope's
// Go code (error messages pointing at the page that explains them): the
// file exists (it is shipped in the packages too), and so does the heading.
func TestErrorPages(t *testing.T) {
	found := map[string]string{} // page -> where
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, m := range docPath.FindAllString(s, -1) {
					found[m] = fset.Position(lit.Pos()).String()
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The permission, ptrace_scope, container and unsupported-Ruby errors.
	if len(found) < 4 {
		t.Errorf("only %d docs pages named in the code (%v): want the permission, ptrace_scope, container and supported-Rubies pages", len(found), found)
	}
	for page, where := range found {
		file, frag, _ := strings.Cut(page, "#")
		if msg := checkTarget(filepath.Join(root, filepath.FromSlash(file)), frag); msg != "" {
			t.Errorf("%s names %s: %s", where, page, msg)
		}
	}
}

// checkTarget says what is wrong with a link to file#frag, or "".
func checkTarget(file, frag string) string {
	st, err := os.Stat(file)
	if err != nil {
		return "no such file"
	}
	if frag == "" {
		return ""
	}
	if st.IsDir() || !strings.HasSuffix(file, ".md") {
		return "a #fragment on a file that is not a Markdown page"
	}
	anchors, err := headingAnchors(file)
	if err != nil {
		return err.Error()
	}
	if !anchors[frag] {
		return "no heading makes the anchor #" + frag
	}
	return ""
}

type line struct {
	n    int
	text string
}

// proseLines returns the lines of a Markdown file outside fenced code
// blocks, numbered from 1.
func proseLines(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []line
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line{n, l})
		}
	}
	return out, sc.Err()
}

// headingAnchors returns the anchors GitHub makes of a page's headings:
// lowercased, punctuation but '-' and '_' dropped, spaces made '-', and a
// repeated anchor numbered (-1, -2, ...).
func headingAnchors(path string) (map[string]bool, error) {
	lines, err := proseLines(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines {
		if !strings.HasPrefix(l.text, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l.text, "#"))
		a := slug(title)
		if k := seen[a]; k > 0 {
			anchors[a+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"`rbscope heap dump -p PID -o FILE`": "rbscope-heap-dump--p-pid--o-file",
		"`ptrace_scope`":                     "ptrace_scope",
		"What it does not trust, and how":    "what-it-does-not-trust-and-how",
		"`rbscope ui [FILE...]`":             "rbscope-ui-file",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

// modulePath is the module's import path, the prefix of its packages'.
const modulePath = "github.com/rbscope/rbscope/"

// importsBlock finds ARCHITECTURE.md's block of every package's imports:
// the code block after the sentence naming TestArchitectureImports.
var importsBlock = regexp.MustCompile("(?s)`TestArchitectureImports`.*?\n```\n(.*?)```")

// TestArchitectureImports holds ARCHITECTURE.md's block of imports to the
// code, both ways: every package of internal/ and cmd/ has its line, unless
// the block's last line names it a test helper; each line names exactly
// the project's packages the package's own (non-test) files import; a test
// helper is imported by tests only.
func TestArchitectureImports(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := importsBlock.FindSubmatch(b)
	if m == nil {
		t.Fatal("ARCHITECTURE.md has no code block after the sentence naming TestArchitectureImports")
	}
	drawn := map[string][]string{}
	helpers := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if rest, ok := strings.CutPrefix(line, "(test helpers, imported by tests only: "); ok {
			for _, h := range strings.Split(strings.TrimSuffix(rest, ")"), ", ") {
				helpers[h] = true
			}
			continue
		}
		name, deps, _ := strings.Cut(line, " ──> ")
		if _, dup := drawn[name]; dup {
			t.Errorf("ARCHITECTURE.md draws %s twice", name)
		}
		drawn[name] = nil
		if deps != "" {
			drawn[name] = strings.Split(deps, ", ")
		}
	}
	code := packageImports(t)
	for name, imports := range code {
		if helpers[name] {
			continue
		}
		deps, ok := drawn[name]
		if !ok {
			t.Errorf("ARCHITECTURE.md's imports block has no line for %s (it imports %s)", name, strings.Join(imports, ", "))
			continue
		}
		for _, imp := range imports {
			if helpers[imp] {
				t.Errorf("%s imports the test helper %s outside its tests", name, imp)
			}
		}
		if got, want := strings.Join(deps, ", "), strings.Join(imports, ", "); got != want {
			t.Errorf("ARCHITECTURE.md: %s ──> %s; its code imports %s", name, got, want)
		}
	}
	for name := range drawn {
		if _, ok := code[name]; !ok {
			t.Errorf("ARCHITECTURE.md draws %s, which is no package", name)
		}
	}
	for name := range helpers {
		if _, ok := code[name]; !ok {
			t.Errorf("ARCHITECTURE.md names the test helper %s, which is no package", name)
		}
	}
}

// packageImports returns, for each package under internal/ and cmd/ (named
// as ARCHITECTURE.md names them: internal/ left out), the project's
// packages its non-test files import, sorted.
func packageImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	short := func(p string) string { return strings.TrimPrefix(p, "internal/") }
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			name := short(filepath.ToSlash(rel))
			set := out[name]
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if dep, ok := strings.CutPrefix(p, modulePath); ok && !slices.Contains(set, short(dep)) {
					set = append(set, short(dep))
				}
			}
			out[name] = set
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for name := range out {
		slices.Sort(out[name])
	}
	return out
}
