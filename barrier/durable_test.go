package barrier

import (
	"errors"
	"slices"
	"testing"
)

func TestDurable(t *testing.T) {
	d := NewDurable(3)
	if got := d.Barrier(); got != 0 {
		t.Fatalf("initial barrier %d, want 0", got)
	}
	steps := []struct {
		rank    int
		idx     uint64
		err     error
		barrier uint64
	}{
		{0, 10, nil, 0},
		{1, 7, nil, 0},
		{2, 9, nil, 7},
		{1, 12, nil, 9},
		{2, 3, ErrBackwards, 9},
		{5, 3, ErrUnknownMember, 9},
		{2, 20, nil, 10},
	}
	for i, s := range steps {
		err := d.Announce(s.rank, s.idx)
		if !errors.Is(err, s.err) || (s.err == nil && err != nil) {
			t.Fatalf("step %d: Announce(%d, %d) = %v, want %v", i, s.rank, s.idx, err, s.err)
		}
		if got := d.Barrier(); got != s.barrier {
			t.Fatalf("step %d: barrier %d, want %d", i, got, s.barrier)
		}
	}
	if got := d.Lagging(5); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("Lagging(5) = %v, want [0 1]", got)
	}
	if got := d.Lagging(100); len(got) != 0 {
		t.Fatalf("Lagging(100) = %v, want none", got)
	}
}
