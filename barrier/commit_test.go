package barrier

import (
	"errors"
	"testing"
)

func TestCommit(t *testing.T) {
	type announce struct {
		rank int
		f    Timestamp
		err  error
	}
	tests := []struct {
		name      string
		members   int
		announces []announce
		announced []Timestamp // each member's announced frontier at the end
		barrier   Timestamp
	}{
		{
			name:      "initially zero",
			members:   3,
			announced: []Timestamp{0, 0, 0},
			barrier:   0,
		},
		{
			name:      "the barrier waits for the last member",
			members:   3,
			announces: []announce{{0, 10, nil}, {1, 20, nil}},
			announced: []Timestamp{10, 20, 0},
			barrier:   0,
		},
		{
			name:      "the barrier is the minimum",
			members:   3,
			announces: []announce{{0, 10, nil}, {1, 20, nil}, {2, 15, nil}},
			announced: []Timestamp{10, 20, 15},
			barrier:   10,
		},
		{
			name:      "the barrier follows the lowest member",
			members:   3,
			announces: []announce{{0, 10, nil}, {1, 20, nil}, {2, 15, nil}, {0, 30, nil}},
			announced: []Timestamp{30, 20, 15},
			barrier:   15,
		},
		{
			name:      "a repeated frontier is accepted",
			members:   2,
			announces: []announce{{0, 10, nil}, {0, 10, nil}, {1, 12, nil}},
			announced: []Timestamp{10, 12},
			barrier:   10,
		},
		{
			name:      "backwards rejected and ignored",
			members:   2,
			announces: []announce{{0, 10, nil}, {1, 12, nil}, {0, 5, ErrBackwards}},
			announced: []Timestamp{10, 12},
			barrier:   10,
		},
		{
			name:      "unknown rank",
			members:   2,
			announces: []announce{{2, 10, ErrUnknownMember}, {-1, 10, ErrUnknownMember}, {0, 7, nil}, {1, 9, nil}},
			announced: []Timestamp{7, 9},
			barrier:   7,
		},
		{
			name:      "one member",
			members:   1,
			announces: []announce{{0, 42, nil}},
			announced: []Timestamp{42},
			barrier:   42,
		},
		{
			name:    "no members: the barrier is infinite",
			members: 0,
			barrier: Infinity,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCommit(tt.members)
			for _, a := range tt.announces {
				err := c.Announce(a.rank, a.f)
				if a.err == nil && err != nil {
					t.Fatalf("Announce(%d, %d): %v", a.rank, a.f, err)
				}
				if a.err != nil && !errors.Is(err, a.err) {
					t.Fatalf("Announce(%d, %d): got error %v, want %v", a.rank, a.f, err, a.err)
				}
			}
			for i, want := range tt.announced {
				if got := c.Announced(i); got != want {
					t.Errorf("Announced(%d) = %d, want %d", i, got, want)
				}
			}
			if got := c.Barrier(); got != tt.barrier {
				t.Errorf("Barrier() = %d, want %d", got, tt.barrier)
			}
		})
	}
}
