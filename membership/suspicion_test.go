package membership

import (
	"maps"
	"slices"
	"testing"
)

func TestSuspected(t *testing.T) {
	view := func(n int) *View {
		v := &View{Epoch: 3}
		for i := 1; i <= n; i++ {
			v.Members = append(v.Members, Member{ID: ID(i), Incarnation: 7})
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		members int
		// accusations: accuser → suspects; hears: reporter → whom it heard.
		accusations map[ID][]ID
		hears       map[ID][]ID
		want        []ID
	}{
		{"no reports yet: nothing counts", 3, map[ID][]ID{1: {3}}, nil, nil},
		{"a crash", 3, map[ID][]ID{1: {3}, 2: {3}}, map[ID][]ID{1: {2}, 2: {1}}, []ID{3}},
		{"a crash seen by one neighbour", 5, map[ID][]ID{4: {5}},
			map[ID][]ID{1: {2, 3, 4}, 2: {1}, 3: {1}, 4: {1}}, []ID{5}},
		{"hearing in one direction is enough", 3, map[ID][]ID{1: {3}}, map[ID][]ID{1: nil, 2: {1}}, []ID{3}},
		{"minority side of a partition", 5,
			map[ID][]ID{1: {3, 4}, 2: {3, 5}, 3: {1, 2}, 4: {1}, 5: {2}},
			map[ID][]ID{1: {2}, 2: {1}, 3: {4, 5}, 4: {3, 5}, 5: {3, 4}}, []ID{1, 2}},
		{"the majority has not reported yet", 5,
			map[ID][]ID{1: {3, 4}, 2: {3, 5}},
			map[ID][]ID{1: {2}, 2: {1}}, nil},
		{"a member cut off reports alone", 3, map[ID][]ID{3: {1, 2}},
			map[ID][]ID{1: {2}, 2: {1}, 3: nil}, []ID{3}},
		{"an even split has no majority", 4, map[ID][]ID{1: {3}, 3: {1}},
			map[ID][]ID{1: {2}, 2: {1}, 3: {4}, 4: {3}}, nil},
		{"a bad link between two members", 3, nil,
			map[ID][]ID{1: {3}, 2: {3}, 3: {1, 2}}, nil},
		{"strangers are ignored", 3, map[ID][]ID{9: {1}, 1: {9}},
			map[ID][]ID{1: {2, 9}, 2: {1}, 9: {1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := view(tc.members)
			suspects := make(map[ID]map[ID]string)
			for by, ss := range tc.accusations {
				for _, s := range ss {
					if suspects[s] == nil {
						suspects[s] = make(map[ID]string)
					}
					suspects[s][by] = "silent"
				}
			}
			reports := make(map[ID]Report)
			for id, hears := range tc.hears {
				reports[id] = Report{Epoch: v.Epoch, Member: Member{ID: id, Incarnation: 7}, Hears: hears}
			}
			got := slices.Sorted(maps.Keys(Suspected(v, suspects, reports)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Suspected = %v, want %v", got, tc.want)
			}
		})
	}
}
