package membership

import (
	"cmp"
	"fmt"
	"slices"
)

// TopicRequest is a member's wish about a topic (pub/sub within the
// group): to be a subscriber of it or not, creating the topic, in Mode,
// if the group lacks it. Requests are standing wishes: a view change
// makes the next view's topics agree with them, and a request that the
// current view already agrees with asks for nothing. Only the requests of
// the current incarnation of a member of the next view count.
type TopicRequest struct {
	Member    Member `json:"member"`
	Topic     string `json:"topic"`
	Mode      string `json:"mode,omitempty"`
	Subscribe bool   `json:"subscribe"`
}

// Topic modes, as view records name them.
const (
	TopicAtomic = "atomic"
	TopicTotal  = "total"
)

// MaxTopicName bounds a topic's name in bytes.
const MaxTopicName = 255

// checkTopicRequest returns why r cannot be applied, or nil.
func checkTopicRequest(r *TopicRequest) error {
	switch {
	case r.Topic == "" || len(r.Topic) > MaxTopicName:
		return fmt.Errorf("membership: topic name of %d bytes", len(r.Topic))
	case r.Mode != "" && r.Mode != TopicAtomic && r.Mode != TopicTotal:
		return fmt.Errorf("membership: topic %q in mode %q", r.Topic, r.Mode)
	}
	return nil
}

// topicRequests returns, from reqs, the requests that count for a view
// of members next: those of the members' incarnations there, valid, the
// last one per member and topic, in (topic, member) order.
func topicRequests(reqs []TopicRequest, next []Member) []TopicRequest {
	in := make(map[Member]bool, len(next))
	for _, m := range next {
		in[Member{ID: m.ID, Incarnation: m.Incarnation}] = true
	}
	last := make(map[[2]string]TopicRequest)
	for _, r := range reqs {
		if !in[Member{ID: r.Member.ID, Incarnation: r.Member.Incarnation}] || checkTopicRequest(&r) != nil {
			continue
		}
		last[[2]string{r.Topic, idKey(r.Member.ID)}] = r
	}
	out := make([]TopicRequest, 0, len(last))
	for _, r := range last {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b TopicRequest) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Member.ID, b.Member.ID))
	})
	return out
}

// subscribersNext returns the subscribers of every topic in a view of
// members next that follows cur: cur's subscribers that stay (same
// incarnation), as the requests change them, and the topics requests
// create, with their modes, after cur's in name order.
func subscribersNext(cur *View, next []Member, reqs []TopicRequest) (names []string, modes map[string]string, subs map[string][]ID) {
	stay := make(map[ID]bool, len(next))
	for _, m := range next {
		if r := cur.Rank(m.ID); r >= 0 && cur.Members[r].Incarnation == m.Incarnation {
			stay[m.ID] = true
		}
	}
	modes = make(map[string]string)
	set := make(map[string]map[ID]bool)
	for _, t := range cur.Topics {
		names = append(names, t.Name)
		modes[t.Name] = t.Mode
		set[t.Name] = make(map[ID]bool)
		for _, id := range t.Subscribers {
			if stay[id] {
				set[t.Name][id] = true
			}
		}
	}
	var created []string
	for _, r := range topicRequests(reqs, next) {
		if set[r.Topic] == nil {
			set[r.Topic] = make(map[ID]bool)
			created = append(created, r.Topic)
			modes[r.Topic] = cmp.Or(r.Mode, TopicAtomic)
		}
		if r.Subscribe {
			set[r.Topic][r.Member.ID] = true
		} else {
			delete(set[r.Topic], r.Member.ID)
		}
	}
	slices.Sort(created)
	names = append(names, created...)
	subs = make(map[string][]ID, len(names))
	for _, n := range names {
		for id := range set[n] {
			subs[n] = append(subs[n], id)
		}
		slices.Sort(subs[n])
	}
	return names, modes, subs
}

// topicsWanted reports whether the requests ask the next view's topics to
// differ from cur's, for members next: a topic to create, or a member of
// cur that stays and is to subscribe or stop.
func topicsWanted(cur *View, next []Member, reqs []TopicRequest) bool {
	names, _, subs := subscribersNext(cur, next, reqs)
	if len(names) != len(cur.Topics) {
		return true
	}
	stay := make(map[ID]bool, len(next))
	for _, m := range next {
		stay[m.ID] = true
	}
	for _, t := range cur.Topics {
		var was []ID
		for _, id := range t.Subscribers {
			if stay[id] {
				was = append(was, id)
			}
		}
		if !slices.Equal(was, subs[t.Name]) {
			return true
		}
	}
	return false
}

// topicsNext returns the topics of view next, which follows cur with
// members next (in next's rank order), ending cur's messages on each
// topic at a cut: for every sender of cur, the lowest count that a
// continuing member holding the sender's messages on the topic reported
// (a subscriber, or the sender itself), zero if none did. A topic's
// sequence goes on where the cut ends it (Start), and each member's
// numbering of its messages on it where the cut ends its own (Sent).
func topicsNext(cur *View, next []Member, staying []Member, reports map[ID]Report, reqs []TopicRequest) []Topic {
	names, modes, subs := subscribersNext(cur, next, reqs)
	out := make([]Topic, 0, len(names))
	for i, name := range names {
		t := Topic{Name: name, Mode: modes[name], Subscribers: subs[name]}
		if i < len(cur.Topics) {
			old := &cur.Topics[i]
			t.Start = old.Start
			t.Cut = topicCut(cur, i, staying, reports)
			for _, c := range t.Cut {
				t.Start += c.Seq
			}
			t.Sent = make([]uint64, len(next))
			for k, m := range next {
				r := cur.Rank(m.ID)
				if r < 0 || cur.Members[r].Incarnation != m.Incarnation {
					continue
				}
				if len(old.Sent) == len(cur.Members) {
					t.Sent[k] = old.Sent[r]
				}
				t.Sent[k] += t.Cut[r].Seq
			}
			if !slices.ContainsFunc(t.Sent, func(s uint64) bool { return s != 0 }) {
				t.Sent = nil
			}
		}
		out = append(out, t)
	}
	return out
}

// topicCut returns the cut of cur's topic number i (from 0): for every
// sender of cur, in rank order, the lowest count reported by a staying
// member that holds its messages on the topic.
func topicCut(cur *View, i int, staying []Member, reports map[ID]Report) []SenderCut {
	t := &cur.Topics[i]
	cut := make([]SenderCut, len(cur.Members))
	for s, m := range cur.Members {
		cut[s].ID = m.ID
		first := true
		for _, k := range staying {
			r, ok := reports[k.ID]
			if !ok || k.ID != m.ID && !slices.Contains(t.Subscribers, k.ID) {
				continue
			}
			if held := r.TopicHeld[i][s]; first || held < cut[s].Seq {
				cut[s].Seq, first = held, false
			}
		}
	}
	return cut
}
