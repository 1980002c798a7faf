package vsync

import (
	"slices"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/membership"
)

// TestUnregistered: a member of the view whose etcd registration is
// missing counts as suspected only once it has been missing for a whole
// lease period (a live member whose lease lapsed registers again meanwhile);
// one whose registration names a newer incarnation counts at once.
func TestUnregistered(t *testing.T) {
	const ttl = time.Second
	view := membership.View{Epoch: 3, Members: []membership.Member{{ID: 1, Incarnation: 10}, {ID: 2, Incarnation: 20}, {ID: 3, Incarnation: 30}}}
	reg := func(ms ...membership.Member) map[uint64]membership.Member {
		out := make(map[uint64]membership.Member)
		for _, m := range ms {
			out[m.ID] = m
		}
		return out
	}
	all := reg(view.Members...)
	// Steps read one state each, at a time on the clock; want lists the
	// members counted as suspected after the read.
	for _, tc := range []struct {
		name  string
		steps []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}
	}{
		{"all registered", []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}{{0, all, nil}, {5 * ttl, all, nil}}},
		{"missing for a lease period", []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}{
			{0, reg(view.Members[0], view.Members[1]), nil},
			{ttl / 2, reg(view.Members[0], view.Members[1]), nil},
			{ttl, reg(view.Members[0], view.Members[1]), []uint64{3}},
		}},
		{"back in time: the wait starts over", []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}{
			{0, reg(view.Members[0], view.Members[1]), nil},
			{ttl / 2, all, nil},
			{ttl, reg(view.Members[0], view.Members[1]), nil},
			{ttl + ttl/2, reg(view.Members[0], view.Members[1]), nil},
			{2 * ttl, reg(view.Members[0], view.Members[1]), []uint64{3}},
		}},
		{"a newer incarnation at once", []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}{
			{0, reg(view.Members[0], membership.Member{ID: 2, Incarnation: 21}, view.Members[2]), []uint64{2}},
		}},
		{"every registration gone", []struct {
			at   time.Duration
			reg  map[uint64]membership.Member
			want []uint64
		}{
			{0, reg(), nil},
			{ttl - 1, reg(), nil},
			{ttl, reg(), []uint64{1, 2, 3}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCore(Config{LeaseTTL: ttl}, membership.Member{ID: 1, Incarnation: 10})
			for i, s := range tc.steps {
				got := c.unregistered(int64(s.at), &membership.State{Current: view, Registered: s.reg})
				var ids []uint64
				for id := range got {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				if !slices.Equal(ids, s.want) {
					t.Errorf("step %d (at %v): suspected %v, want %v", i, s.at, ids, s.want)
				}
			}
		})
	}
}
