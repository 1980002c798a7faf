package pubsub

import (
	"fmt"
	"sync"
)

// Event is one message of a topic, as a member delivered it.
type Event struct {
	// Index places the message in the topic's sequence, the same on
	// every subscriber; Epoch is the view it was delivered in.
	Index uint64 `json:"index"`
	Epoch uint64 `json:"epoch"`
	// Sender is the member that published it, Seq its number among that
	// member's messages on the topic.
	Sender uint64 `json:"sender"`
	Seq    uint64 `json:"seq"`
	Data   []byte `json:"data"`
}

// topicLog keeps the last messages of a topic that this member
// delivered, for event streams to start in and wait on.
type topicLog struct {
	mu sync.Mutex
	// events are consecutive by index, oldest first; grown is closed and
	// replaced when one is added.
	events []Event
	grown  chan struct{}
}

func newTopicLog() *topicLog { return &topicLog{grown: make(chan struct{})} }

// add keeps ev, and at most retain events in all. An index that does not
// follow the last (the member subscribed again after a gap, or every
// subscriber of the topic failed and its indexes went back) starts the
// kept events afresh.
func (l *topicLog) add(ev Event, retain int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.events); n > 0 && l.events[n-1].Index+1 != ev.Index {
		clear(l.events)
		l.events = l.events[:0]
	}
	l.events = append(l.events, ev)
	if over := len(l.events) - retain; over > 0 {
		clear(l.events[:over])
		l.events = l.events[over:]
	}
	close(l.grown)
	l.grown = make(chan struct{})
}

// read returns the kept events from index from on (from 0: none, only
// the wait for the next), the index to read from next, and a channel
// closed when more are kept. It returns ErrTrimmed for a from below the
// kept prefix.
func (l *topicLog) read(from uint64, max int) ([]Event, uint64, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		return nil, from, l.grown, nil
	}
	first, last := l.events[0].Index, l.events[len(l.events)-1].Index
	switch {
	case from == 0:
		return nil, last + 1, l.grown, nil
	case from < first:
		return nil, from, nil, fmt.Errorf("%w: index %d, this member keeps the topic from %d", ErrTrimmed, from, first)
	case from > last:
		return nil, from, l.grown, nil
	}
	out := l.events[from-first:]
	if len(out) > max {
		out = out[:max]
	}
	return append([]Event(nil), out...), from + uint64(len(out)), l.grown, nil
}

// bounds returns the first and last index kept (zeros if none).
func (l *topicLog) bounds() (first, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		return 0, 0
	}
	return l.events[0].Index, l.events[len(l.events)-1].Index
}
