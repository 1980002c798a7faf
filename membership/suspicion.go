package membership

// Suspected returns the members of cur that a view change leaves out as
// failed, given the recorded suspicions (suspect → accuser → reason) and
// the final reports so far.
//
// Suspicions alone cannot tell a crash from a partition: when a partition
// splits the view, members on both sides confirm (through probes on their
// own side) that the other side is gone. What settles it is reachability.
// Once wedged, a member beats to every member and its report lists whom it
// heard from (Report.Hears). Reporters that hear each other, in either
// direction, form connected groups; at most one of them holds more than
// half of cur's members. When that majority group exists:
//
//   - reporters outside it are suspected (they are cut off from it), and
//   - a suspicion counts only if its accuser is inside it and the suspect
//     is not (a suspect that reported and is heard by the majority is
//     alive and connected, whatever was suspected before).
//
// A crashed member never reports; the survivors, who reach each other,
// form the majority group and their suspicions exclude it. On the
// minority side of a partition the members' suspicions of the majority
// count for nothing. Until a majority group has reported, nothing counts:
// the change waits for more reports.
func Suspected(cur *View, suspects map[ID]map[ID]string, reports map[ID]Report) map[ID]bool {
	rank := make(map[ID]int, len(cur.Members))
	for i, m := range cur.Members {
		rank[m.ID] = i
	}
	// Union-find over the reporters of cur (matching incarnation).
	parent := make([]int, len(cur.Members))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	reported := make([]bool, len(cur.Members))
	for id, r := range reports {
		i, ok := rank[id]
		if !ok || r.Member.Incarnation != cur.Members[i].Incarnation || r.Epoch != cur.Epoch {
			continue
		}
		reported[i] = true
	}
	for id, r := range reports {
		i, ok := rank[id]
		if !ok || !reported[i] {
			continue
		}
		for _, h := range r.Hears {
			if j, ok := rank[h]; ok && reported[j] {
				parent[find(i)] = find(j)
			}
		}
	}
	size := make(map[int]int)
	for i := range cur.Members {
		if reported[i] {
			size[find(i)]++
		}
	}
	major := -1
	for root, n := range size {
		if 2*n > len(cur.Members) {
			major = root
		}
	}
	out := make(map[ID]bool)
	if major < 0 {
		return out
	}
	inMajor := func(i int) bool { return reported[i] && find(i) == major }
	for i, m := range cur.Members {
		if reported[i] && !inMajor(i) {
			out[m.ID] = true
		}
	}
	for suspect, by := range suspects {
		// A suspect that reported and is heard by the majority group is
		// alive and connected whatever was suspected earlier (a partition
		// that has healed, say).
		if i, ok := rank[suspect]; !ok || inMajor(i) {
			continue
		}
		for accuser := range by {
			if j, ok := rank[accuser]; ok && accuser != suspect && inMajor(j) {
				out[suspect] = true
				break
			}
		}
	}
	return out
}
