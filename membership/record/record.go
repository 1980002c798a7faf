// Package record holds the view records of a Convoy group: the data that
// package membership commits in etcd, one record per epoch, and that a
// member's durable log (package persistence) keeps. It depends on nothing
// but the standard library, so that the log does not compile the etcd
// client.
package record

import "fmt"

// ID identifies a member process (the transport's node id). A member that
// restarts, or rejoins after being excluded, keeps its ID and takes a new
// Incarnation.
type ID = uint64

// Member is one incarnation of a member.
type Member struct {
	ID          ID     `json:"id"`
	Incarnation uint64 `json:"incarnation"`
	// Addr is the member's transport address (host:port).
	Addr string `json:"addr"`
}

func (m Member) String() string { return fmt.Sprintf("%d.%d", m.ID, m.Incarnation) }

// SenderCut says how many of one sender's messages of a view are
// delivered in that view: its messages 1..Seq (by its sequence numbers in
// that view) are, every later one is not.
type SenderCut struct {
	ID  ID     `json:"id"`
	Seq uint64 `json:"seq"`
}

// View is a committed view record: view Epoch with its Members in rank
// order, together with the cut that ended the previous view. It is the
// unit the store commits, one per epoch, and never changes once committed.
type View struct {
	Epoch uint64 `json:"epoch"`
	// Members lists the view in rank order: the members of the previous
	// view that stay, in their previous order, then the joiners.
	Members []Member `json:"members"`
	// Cut ends the previous view: for every member of the previous view
	// (including those excluded now), in the previous view's rank order,
	// how many of its messages of that view are delivered. Empty for the
	// first view.
	Cut []SenderCut `json:"cut,omitempty"`
	// Start is the global delivery index of the previous view's last
	// message: this view's first message gets index Start+1. Zero for the
	// first view.
	Start uint64 `json:"start"`
	// Sent gives, for every member of this view in rank order, how many of
	// its messages were delivered in earlier views. A member's messages
	// are numbered across views: its message #s in this view is its
	// message Sent[rank]+s overall (per incarnation; zero for joiners).
	Sent []uint64 `json:"sent"`
	// Joining lists the members admitted by this view that must receive
	// state before they count towards a majority (until then they hold
	// none of the group's state).
	Joining []ID `json:"joining,omitempty"`
	// Recovered marks a view that restarts the group from its members'
	// logs after most of the previous view failed (see DecideRecovery):
	// its members are new incarnations, Start is the end of the log
	// chosen to go on from, and Cut counts that log's messages of the
	// previous view per sender. Its members not in Joining hold that
	// log; the others receive the state.
	Recovered bool `json:"recovered,omitempty"`
	// Suffixes lists the joiners whose own logs hold the group's
	// sequence up to From-1: each receives the messages From..Start from
	// its Donor's log instead of a snapshot of the state.
	Suffixes []Suffix `json:"suffixes,omitempty"`
	// Topics are the view's topics (pub/sub within the group), in the
	// order that numbers them in the view (from 1). A topic stays listed
	// from the view that creates it on, in its place, subscribed to or
	// not.
	Topics []Topic `json:"topics,omitempty"`
}

// Topic is one topic of a view: its name, how its messages are
// delivered and to whom, where its sequence starts, the cut that ended
// the previous view's messages on it, and how many of each member's
// messages on it earlier views delivered.
type Topic struct {
	Name string `json:"name"`
	// Mode is how its messages are delivered: "atomic" (once every
	// subscriber holds one) or "total" (best-effort total order).
	Mode string `json:"mode"`
	// Subscribers lists the members of the view that receive it, by
	// increasing ID.
	Subscribers []ID `json:"subscribers,omitempty"`
	// Start is the topic index of its last message delivered before this
	// view: the view's first message on it gets index Start+1.
	Start uint64 `json:"start,omitempty"`
	// Cut ends the previous view's messages on the topic: for every
	// member of the previous view, in its rank order, how many of its
	// messages on the topic are delivered. Empty in the view that
	// creates the topic.
	Cut []SenderCut `json:"cut,omitempty"`
	// Sent gives, for every member of this view in rank order, how many
	// of its messages on the topic earlier views delivered (per
	// incarnation, as View.Sent); empty when all are zero.
	Sent []uint64 `json:"sent,omitempty"`
}

// Topic returns the topic of v named name, and its number in v (from
// 1); 0 if v has none of that name.
func (v *View) Topic(name string) (*Topic, int) {
	for i := range v.Topics {
		if v.Topics[i].Name == name {
			return &v.Topics[i], i + 1
		}
	}
	return nil, 0
}

// Suffix says that joiner ID receives the group's messages From..Start
// (the view's Start) from member Donor's log.
type Suffix struct {
	ID    ID     `json:"id"`
	From  uint64 `json:"from"`
	Donor ID     `json:"donor"`
}

// LogPos identifies the last entry of a restarted member's log: its
// index and the message there. A member that asks to join with it may
// receive only the messages after it (View.Suffixes).
type LogPos struct {
	Last   uint64 `json:"last"`
	Epoch  uint64 `json:"epoch"`
	Sender ID     `json:"sender"`
	Seq    uint64 `json:"seq"`
}

// SuffixOf returns the suffix transfer of joiner id in v, if any.
func (v *View) SuffixOf(id ID) (Suffix, bool) {
	for _, s := range v.Suffixes {
		if s.ID == id {
			return s, true
		}
	}
	return Suffix{}, false
}

// Rank returns the rank of member id in v, or -1.
func (v *View) Rank(id ID) int {
	for i, m := range v.Members {
		if m.ID == id {
			return i
		}
	}
	return -1
}
