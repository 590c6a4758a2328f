// Package uitest is what the UI's tests ask of its HTTP API: those of
// internal/ui (in process) and those of the rbscope command (over HTTP,
// from `rbscope ui`) read the same answers the same way.
package uitest

import (
	"fmt"
	"testing"
)

// Get reads the JSON an API path answers into v, or ends the test.
type Get func(t *testing.T, path string, v any)

// ClassGroup returns the ID of the heap overview's row (by class) of the
// objects of class in dump f, -1 when there is none.
func ClassGroup(t *testing.T, get Get, f int, class string) int {
	t.Helper()
	var ov struct {
		Page struct {
			Rows []struct {
				ID    int
				Class string
			}
		}
	}
	get(t, fmt.Sprintf("/api/heap/overview?f=%d&limit=1000&by=class", f), &ov)
	for _, r := range ov.Page.Rows {
		if r.Class == class {
			return r.ID
		}
	}
	return -1
}

// MergedNode is a node of /api/heap/merged's tree: a root, or an object
// on the way from one, and how many of the objects followed it passes.
type MergedNode struct {
	Root     string
	Object   *struct{ Address string }
	Targets  int
	Children []*MergedNode
}

// Merged is /api/heap/merged's answer: the merged paths to the objects
// of a group.
type Merged struct {
	Followed, Unreached int
	Tree                []*MergedNode
}

// GetMerged reads the merged paths to the objects of group (by class) in
// dump f, and checks that no node passes fewer objects than its children
// do.
func GetMerged(t *testing.T, get Get, f, group int) Merged {
	t.Helper()
	var m Merged
	get(t, fmt.Sprintf("/api/heap/merged?f=%d&by=class&group=%d", f, group), &m)
	var check func(n *MergedNode) int
	check = func(n *MergedNode) int {
		sum := 0
		for _, c := range n.Children {
			sum += check(c)
		}
		if sum > n.Targets {
			t.Errorf("a merged node passes %d objects, its children %d", n.Targets, sum)
		}
		return n.Targets
	}
	for _, r := range m.Tree {
		check(r)
	}
	return m
}

// CheckOneChain checks that m, the merged paths to n objects, all
// followed, is one chain: from root through the objects at hops (a path's
// hops to one of them, its own left out), each passing all n.
func CheckOneChain(t *testing.T, m Merged, n uint64, root string, hops []string) {
	t.Helper()
	if uint64(m.Followed) != n || m.Unreached != 0 || len(m.Tree) != 1 || m.Tree[0].Root != root || uint64(m.Tree[0].Targets) != n {
		t.Fatalf("merged paths of %d objects: followed %d, unreached %d, roots %+v; want one, %s", n, m.Followed, m.Unreached, m.Tree, root)
	}
	node := m.Tree[0]
	for _, h := range hops {
		if len(node.Children) == 0 || node.Children[0].Object == nil || node.Children[0].Object.Address != h || uint64(node.Children[0].Targets) != n {
			t.Fatalf("the merged chain parts from the path at %s: %+v", h, node.Children)
		}
		node = node.Children[0]
	}
}
