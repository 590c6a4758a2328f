package ui

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rbscope/rbscope/internal/ui/uitest"
	"github.com/rbscope/rbscope/internal/wire"
)

// TestDomTree: the dominator tree, a level a request, holds together on
// the dump of a real program (testdata/heap_graph.rb): the roots' largest
// child is the top view's first retainer; the roots' children retain every
// reachable byte, by object and by class alike; a node retains its own
// bytes and its children's; its children are the object page's dominated
// objects, and the object page's retained figures the top view's.
func TestDomTree(t *testing.T) {
	dump, _ := heapGraphDump(t, t.TempDir())
	ts := newTestServer(t, Options{Files: []string{dump}})
	var top wire.HeapTop
	ts.get(t, "/api/heap/top?f=0&n=5", &top)
	if len(top.Retainers) == 0 {
		t.Fatalf("top: %+v", top)
	}
	type row struct {
		Address           string
		Memsize, Retained uint64
		Children          int
	}
	type level struct {
		ReachableBytes uint64 `json:"reachable_bytes"`
		Node           *row
		Ancestors      []row
		Objects        *page[row]
		Groups         *page[struct {
			Count    int
			Retained uint64
		}]
	}
	children := func(addr string) (level, []row) {
		var all []row
		for off := 0; ; off += 1000 {
			var lv level
			ts.get(t, fmt.Sprintf("/api/heap/domtree?f=0&limit=1000&offset=%d&addr=%s", off, addr), &lv)
			all = append(all, lv.Objects.Rows...)
			if off+1000 >= lv.Objects.Total {
				return lv, all
			}
		}
	}
	root, kids := children("")
	var sum uint64
	for _, k := range kids {
		sum += k.Retained
	}
	if len(kids) == 0 || kids[0].Address != top.Retainers[0].Address || sum != root.ReachableBytes || root.Node != nil || root.ReachableBytes != top.ReachableBytes {
		t.Errorf("the roots' children: %d, retaining %d of %d; top's first %s, %d reachable bytes", len(kids), sum, root.ReachableBytes, top.Retainers[0].Address, top.ReachableBytes)
	}
	var groups level
	ts.get(t, "/api/heap/domtree?f=0&by=class&limit=1000", &groups)
	var gsum uint64
	gcount := 0
	for _, g := range groups.Groups.Rows {
		gsum, gcount = gsum+g.Retained, gcount+g.Count
	}
	if gsum != root.ReachableBytes || gcount != len(kids) {
		t.Errorf("the roots' children by class: %d objects retaining %d; by object %d retaining %d", gcount, gsum, len(kids), root.ReachableBytes)
	}
	r0 := top.Retainers[0]
	node, nkids := children(r0.Address)
	var obj struct {
		Object struct {
			Memsize       uint64
			Retained      uint64
			RetainedCount uint64 `json:"retained_count"`
		}
		Dominated page[struct{ Address string }]
	}
	ts.get(t, "/api/heap/object?f=0&limit=1000&addr="+r0.Address, &obj)
	if obj.Object.Retained != r0.Retained || obj.Object.RetainedCount != r0.Count {
		t.Errorf("object %s retains %d bytes in %d objects; top says %d in %d", r0.Address, obj.Object.Retained, obj.Object.RetainedCount, r0.Retained, r0.Count)
	}
	sum = obj.Object.Memsize
	for k, c := range nkids {
		sum += c.Retained
		if k < len(obj.Dominated.Rows) && obj.Dominated.Rows[k].Address != c.Address {
			t.Errorf("child %d: %s, the object page's dominated %s", k, c.Address, obj.Dominated.Rows[k].Address)
		}
	}
	if node.Node == nil || sum != node.Node.Retained || len(nkids) != obj.Dominated.Total || len(node.Ancestors) != 0 {
		t.Errorf("node %s: retains %v; itself and its %d children %d (object page: %d dominated)", r0.Address, node.Node, len(nkids), sum, obj.Dominated.Total)
	}
}

// TestPathsAndMerged: the paths view leads from a root to the object the
// program holds through the Array and the Hash it names, the Hash marked
// its dominator; the merged paths of the program's 5,000 leaked objects
// (one class, held in a global Array) are one chain, the path the paths
// view gives the last of them, every object on it passing all 5,000.
func TestPathsAndMerged(t *testing.T) {
	dump, rep := heapGraphDump(t, t.TempDir())
	_, after, leak := diffDumps(t)
	ts := newTestServer(t, Options{Files: []string{dump, after}})
	type hop struct {
		Address   string
		Dominator bool
	}
	type paths struct {
		Paths []struct {
			Root string
			Hops []hop
		}
	}
	var ps paths
	ts.get(t, "/api/heap/paths?f=0&addr="+rep.Path.Target, &ps)
	found := false
	for _, p := range ps.Paths {
		var addrs []string
		hash := false
		for _, h := range p.Hops {
			addrs = append(addrs, h.Address)
			hash = hash || h.Address == rep.Path.Hash && h.Dominator
		}
		if n := len(addrs); n >= 3 && slices.Equal(addrs[n-3:], []string{rep.Path.Array, rep.Path.Hash, rep.Path.Target}) && hash {
			found = true
		}
	}
	if !found {
		t.Errorf("no path to %s through the Array %s and the Hash %s (a dominator): %+v", rep.Path.Target, rep.Path.Array, rep.Path.Hash, ps.Paths)
	}

	group := uitest.ClassGroup(t, ts.get, 1, "Leaky")
	m := uitest.GetMerged(t, ts.get, 1, group)
	var last paths
	ts.get(t, "/api/heap/paths?f=1&n=1&addr="+leak.LastLeaky, &last)
	if len(last.Paths) == 0 {
		t.Fatalf("no path to the last Leaky %s", leak.LastLeaky)
	}
	var hops []string
	for _, h := range last.Paths[0].Hops[:len(last.Paths[0].Hops)-1] {
		hops = append(hops, h.Address)
	}
	uitest.CheckOneChain(t, m, leak.Leaky, last.Paths[0].Root, hops)
}
