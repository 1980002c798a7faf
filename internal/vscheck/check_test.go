package vscheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func view(epoch, start uint64, members ...uint64) Event {
	return Event{View: &View{Epoch: epoch, Start: start, Members: members}}
}

func del(epoch, index, sender, seq uint64) Event {
	return Event{Delivery: &Delivery{Epoch: epoch, Index: index, Sender: sender, Seq: seq, Payload: fmt.Sprintf("m%d-%d", sender, seq)}}
}

func inc(ev Event, incarnation uint64) Event {
	d := *ev.Delivery
	d.Incarnation = incarnation
	return Event{Delivery: &d}
}

func withPayload(ev Event, p string) Event {
	d := *ev.Delivery
	d.Payload = p
	return Event{Delivery: &d}
}

// good is a correct run: members 1, 2 and 3 deliver in view 1; member 3
// is excluded by view 2 after index 4 (its history is a prefix), and
// member 4 joins in view 3.
func good() map[string][]Event {
	common := []Event{
		view(1, 0, 1, 2, 3),
		del(1, 1, 1, 1), del(1, 2, 2, 1), del(1, 3, 3, 1), del(1, 4, 1, 2),
		view(2, 4, 1, 2),
		del(2, 5, 2, 2), del(2, 6, 1, 3),
		view(3, 6, 1, 2, 4),
		del(3, 7, 4, 1), del(3, 8, 1, 4),
	}
	return map[string][]Event{
		"m1":   common,
		"m2":   slices.Clone(common[:9]), // a prefix: killed before index 7
		"m3":   slices.Clone(common[:4]), // excluded, delivered up to 3
		"m4":   append([]Event{view(3, 6, 1, 2, 4)}, common[9:]...),
		"none": nil,
	}
}

// replace makes h hold exactly the histories of with.
func replace(h, with map[string][]Event) {
	for name := range h {
		delete(h, name)
	}
	for name, events := range with {
		h[name] = events
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change plants a violation in a correct run.
		change func(h map[string][]Event)
		want   string // a substring of the error; "" for none
		kind   Kind   // the kind of a violation with that substring
	}{
		{name: "correct", change: func(map[string][]Event) {}},
		{name: "gap", kind: Sequence, want: "index 4 delivered after index 2", change: func(h map[string][]Event) {
			h["m1"] = slices.Delete(slices.Clone(h["m1"]), 3, 4)
		}},
		{name: "different message at one index", kind: TotalOrder, want: "index 5:", change: func(h map[string][]Event) {
			h["m2"][6] = withPayload(h["m2"][6], "other")
		}},
		{name: "different sender at one index", kind: TotalOrder, want: "index 2:", change: func(h map[string][]Event) {
			h["m3"][2] = del(1, 2, 3, 7)
		}},
		{name: "virtual synchrony: one member misses a message of the view", kind: VirtualSynchrony, want: "virtual synchrony broken in view 1", change: func(h map[string][]Event) {
			// m2 installs view 2 right after index 3: it delivered fewer
			// messages in view 1 than m1 (and sees view 2 start elsewhere).
			m2 := slices.Delete(slices.Clone(h["m2"]), 4, 5)
			m2 = slices.Delete(m2, 4, len(m2))
			h["m2"] = append(m2, view(2, 3, 1, 2))
		}},
		{name: "virtual synchrony: excluded member delivers beyond the cut", kind: VirtualSynchrony, want: "beyond the cut of view 2", change: func(h map[string][]Event) {
			h["m3"] = append(h["m3"], del(1, 4, 1, 2), del(1, 5, 3, 2))
		}},
		{name: "duplicate in one history", kind: Duplicate, want: "delivered twice", change: func(h map[string][]Event) {
			h["m1"] = append(h["m1"], withPayload(del(3, 9, 2, 3), "m1-1"))
		}},
		{name: "same payload at two indexes", kind: Duplicate, want: `payload "m2-2" delivered at index 5`, change: func(h map[string][]Event) {
			h["m4"] = append(h["m4"], withPayload(del(3, 9, 1, 5), "m2-2"))
		}},
		{name: "fifo", kind: FIFO, want: "FIFO", change: func(h map[string][]Event) {
			for _, name := range []string{"m1", "m2"} {
				h[name] = slices.Clone(h[name])
				h[name][1], h[name][4] = del(1, 1, 1, 2), del(1, 4, 1, 1)
			}
			h["m3"] = slices.Clone(h["m3"])
			h["m3"][1] = del(1, 1, 1, 2)
		}},
		{name: "fifo restarts when the sender leaves the views", change: func(h map[string][]Event) {
			// Member 3 is excluded by view 2 and comes back in view 3 as a
			// new incarnation, numbering from 1 again.
			replace(h, map[string][]Event{"a": {
				view(1, 0, 1, 3), del(1, 1, 3, 1), del(1, 2, 3, 2),
				view(2, 2, 1), del(2, 3, 1, 1),
				view(3, 3, 1, 3), withPayload(del(3, 4, 3, 1), "m3-1 again"),
			}})
		}},
		{name: "fifo does not restart while the sender stays", kind: FIFO, want: "sender 3's seq 1 delivered after its seq 2", change: func(h map[string][]Event) {
			replace(h, map[string][]Event{"a": {
				view(1, 0, 1, 3), del(1, 1, 3, 1), del(1, 2, 3, 2),
				view(2, 2, 1, 3), del(2, 3, 1, 1), withPayload(del(2, 4, 3, 1), "m3-1 again"),
			}})
		}},
		{name: "fifo restarts with a new incarnation", change: func(h map[string][]Event) {
			// Member 3 restarts (a new incarnation) and rejoins without a
			// view in between that leaves it out.
			replace(h, map[string][]Event{"a": {
				view(1, 0, 1, 3), inc(del(1, 1, 3, 1), 1), inc(del(1, 2, 3, 2), 1),
				view(2, 2, 1, 3), inc(withPayload(del(2, 3, 3, 1), "m3-1 again"), 2),
			}})
		}},
		{name: "fifo within an incarnation", kind: FIFO, want: "sender 3's seq 1 delivered after its seq 2", change: func(h map[string][]Event) {
			replace(h, map[string][]Event{"a": {
				view(1, 0, 1, 3), inc(del(1, 1, 3, 1), 2), inc(del(1, 2, 3, 2), 2),
				view(2, 2, 1, 3), inc(withPayload(del(2, 3, 3, 1), "m3-1 again"), 2),
			}})
		}},
		{name: "sender not a member", kind: NotMember, want: "sender 4 is not a member of view 1", change: func(h map[string][]Event) {
			h["m3"] = append(slices.Clone(h["m3"]), withPayload(del(1, 4, 4, 1), "m1-2"))
		}},
		{name: "views differ", kind: TotalOrder, want: "view 2 differs", change: func(h map[string][]Event) {
			h["m2"] = slices.Clone(h["m2"])
			h["m2"][5] = view(2, 4, 2, 1)
		}},
		{name: "view misplaced", kind: Sequence, want: "view 2 (start 4) installed after index 3", change: func(h map[string][]Event) {
			h["m3"] = append(slices.Clone(h["m3"]), view(2, 4, 1, 2))
		}},
		{name: "epoch skipped", kind: Sequence, want: "view 3 installed after view 1", change: func(h map[string][]Event) {
			h["m2"] = append(slices.Clone(h["m2"][:5]), view(3, 4, 1, 2, 4))
			// and m1 agrees on view 3's start, to isolate the skip.
			delete(h, "m1")
			delete(h, "m4")
		}},
		{name: "delivery in another epoch", kind: Sequence, want: "in epoch 2, but view 1 is installed", change: func(h map[string][]Event) {
			h["m3"] = append(slices.Clone(h["m3"]), del(2, 4, 1, 2))
		}},
		{name: "delivery before any view", kind: Malformed, want: "before any view", change: func(h map[string][]Event) {
			h["m5"] = []Event{del(1, 1, 1, 1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			tc.change(h)
			err := Check(h)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Check found nothing, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Check: %v\nwant an error containing %q", err, tc.want)
			}
			list, _ := Violations(h)
			if (len(list) == 0) != (err == nil) {
				t.Fatalf("Violations returned %d violations, Check %v", len(list), err)
			}
			if tc.want != "" && !slices.ContainsFunc(list, func(v Violation) bool {
				return v.Kind == tc.kind && strings.Contains(v.Msg, tc.want)
			}) {
				t.Fatalf("Violations: %v\nwant a violation of kind %v containing %q", list, tc.kind, tc.want)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	h := good()
	got := Missing(map[string][]Event{"m1": h["m1"], "m2": h["m2"], "m4": h["m4"]}, []string{"m1-1", "m4-1", "m1-4", "m9-9"})
	// m4 joined in view 3: m1-1 reached it as state.
	want := map[string][]string{"m1": {"m9-9"}, "m2": {"m4-1", "m1-4", "m9-9"}, "m4": {"m9-9"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Missing = %v, want %v", got, want)
	}
}

func TestCheckIncarnations(t *testing.T) {
	h := good()
	views := Views(h)
	for _, tc := range []struct {
		name         string
		id           uint64
		incarnations [][]Event
		want         string
	}{
		{name: "one incarnation", id: 1, incarnations: [][]Event{h["m1"]}},
		{name: "excluded and back", id: 3, incarnations: [][]Event{h["m3"][:4], {view(3, 6, 1, 2, 4)}},
			want: "incarnation 2 installed view 3, which does not contain it"},
		{name: "rejoined after exclusion", id: 3, incarnations: [][]Event{h["m3"][:4], nil}},
		{name: "ended though still a member", id: 2, incarnations: [][]Event{h["m2"][:6], {view(3, 6, 1, 2, 4)}},
			want: "ended after view 2, but view 3 contains it"},
		{name: "back too early", id: 3, incarnations: [][]Event{h["m3"][:4], {view(2, 4, 1, 2)}},
			want: "starts in view 2, not after view 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckIncarnations(tc.id, tc.incarnations, views)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckIncarnations: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("CheckIncarnations found nothing, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("CheckIncarnations: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}
