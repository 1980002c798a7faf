package topicproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// Environment variables that describe a member to a child process.
const (
	envMember  = "TOPICPROC_MEMBER"  // this member's id
	envMembers = "TOPICPROC_MEMBERS" // id=host:port,... in rank order
	envCount   = "TOPICPROC_COUNT"   // messages each member publishes on each topic
)

// summaryPrefix starts the line on which a member reports what it
// delivered; the test framework's own output shares the stream.
const summaryPrefix = "topicproc-summary "

// The topics of the group: their subscribers by member id (members 1 to
// 4), and modes.
var testTopics = []convoy.Topic{
	{Name: "a", Subscribers: []convoy.NodeID{1, 2}},
	{Name: "b", Subscribers: []convoy.NodeID{2, 3, 4}, Mode: convoy.TotalOrder},
	{Name: "c", Subscribers: []convoy.NodeID{4}},
	{Name: "d"},
	{Name: "e", Subscribers: []convoy.NodeID{1, 2}}, // the set of "a"
}

// delivery is one message a member delivered, as it reports it.
type delivery struct {
	Topic  string `json:"t,omitempty"`
	Index  uint64 `json:"i"`
	Sender uint64 `json:"s"`
	Seq    uint64 `json:"q"`
	TS     uint64 `json:"ts"`
	ID     string `json:"id"` // the payload: sender/topic/k
}

// summary is what a member reports.
type summary struct {
	Member     uint64     `json:"member"`
	Deliveries []delivery `json:"deliveries"`
}

// memberTimeout bounds a member process's whole run; it only catches a
// hang.
const memberTimeout = 2 * time.Minute

// TestMain runs the tests, or, in a process started as a member (see
// TestProcesses), the member.
func TestMain(m *testing.M) {
	testproc.Run(envMember, memberTimeout, memberFromEnv)
	os.Exit(m.Run())
}

// memberFromEnv runs the member the environment describes.
func memberFromEnv(ctx context.Context) error {
	id, err1 := strconv.ParseUint(os.Getenv(envMember), 10, 64)
	count, err2 := strconv.Atoi(os.Getenv(envCount))
	var members []convoy.Member
	for _, kv := range strings.Split(os.Getenv(envMembers), ",") {
		k, addr, _ := strings.Cut(kv, "=")
		mid, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", envMembers, err)
		}
		members = append(members, convoy.Member{ID: convoy.NodeID(mid), Addr: addr})
	}
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if err := runMember(ctx, convoy.NodeID(id), members, count, os.Stdin, os.Stdout); err != nil {
		return fmt.Errorf("member %d: %w", id, err)
	}
	return nil
}

// expected returns how many messages member self receives when every
// member publishes count on each topic and sends count to the group.
func expected(self convoy.NodeID, members, count int) int {
	n := members * count // the group's
	for _, tp := range testTopics {
		if slices.Contains(tp.Subscribers, self) {
			n += members * count
		}
	}
	return n
}

// runMember opens the group, publishes and sends, waits for everything
// addressed to it, prints its summary, then waits for in to end before
// closing the group (closing earlier would make the group fail on
// members still delivering).
func runMember(ctx context.Context, self convoy.NodeID, members []convoy.Member, count int, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	var sum summary
	sum.Member = uint64(self)
	want := expected(self, len(members), count)
	done := make(chan struct{})
	g, err := convoy.Open(ctx, convoy.Config{Self: self, Members: members, Topics: testTopics}, func(d convoy.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		sum.Deliveries = append(sum.Deliveries, delivery{Topic: d.Topic, Index: d.Index, Sender: uint64(d.Sender), Seq: d.Seq, TS: d.Timestamp, ID: string(d.Payload)})
		if len(sum.Deliveries) == want {
			close(done)
		}
	})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer g.Close()
	for k := range count {
		for _, tp := range testTopics {
			if _, err := g.Publish(ctx, tp.Name, fmt.Appendf(nil, "%d/%s/%d", self, tp.Name, k)); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
		}
		if _, err := g.Send(ctx, fmt.Appendf(nil, "%d//%d", self, k)); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		n := len(sum.Deliveries)
		mu.Unlock()
		return fmt.Errorf("delivered %d of %d messages: %w (group: %v)", n, want, ctx.Err(), g.Err())
	}
	mu.Lock()
	line, err := json.Marshal(sum)
	mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s%s\n", summaryPrefix, line); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, bufio.NewReader(in))
	return err
}

// TestProcesses runs a group of four member processes with five topics —
// subscribed by two, three, one and no members, two sharing a subscriber
// set, one in total order mode — every member publishing on every topic
// and sending to the group at once, and checks the guarantees of topics
// on what each delivered.
func TestProcesses(t *testing.T) {
	const n, count = 4, 1000
	sums := runGroup(t, n, count)
	checkTopics(t, sums, n, count)
}

// checkTopics checks the members' sequences (see the package
// documentation).
func checkTopics(t *testing.T, sums []summary, n, count int) {
	t.Helper()
	ref := make(map[string][]string) // per topic, one subscriber's sequence
	for _, s := range sums {
		self := convoy.NodeID(s.Member)
		seen := make(map[string]bool)
		next := make(map[string]uint64)
		perTopic := make(map[string][]string)
		for k, d := range s.Deliveries {
			sender, topic, _ := strings.Cut(d.ID, "/")
			topic, _, _ = strings.Cut(topic, "/")
			switch {
			case topic != d.Topic || sender != strconv.FormatUint(d.Sender, 10):
				t.Fatalf("member %d delivered %q as %+v", self, d.ID, d)
			case d.Topic != "" && !slices.Contains(topicSubs(d.Topic), self):
				t.Fatalf("member %d delivered %q of a topic it does not subscribe to", self, d.ID)
			case seen[d.ID]:
				t.Fatalf("member %d delivered %q twice", self, d.ID)
			}
			seen[d.ID] = true
			ch := sender + "/" + d.Topic
			if d.Seq != next[ch]+1 {
				t.Fatalf("member %d: %q is #%d of %s after #%d", self, d.ID, d.Seq, ch, next[ch])
			}
			next[ch] = d.Seq
			if k > 0 {
				p := s.Deliveries[k-1]
				if p.TS > d.TS || p.TS == d.TS && p.Sender >= d.Sender {
					t.Fatalf("member %d delivered %q (stamp %d) after %q (stamp %d)", self, d.ID, d.TS, p.ID, p.TS)
				}
			}
			perTopic[d.Topic] = append(perTopic[d.Topic], d.ID)
			if d.Index != uint64(len(perTopic[d.Topic])) {
				t.Fatalf("member %d: %q has index %d, is the topic's delivery %d", self, d.ID, d.Index, len(perTopic[d.Topic]))
			}
		}
		if len(s.Deliveries) != expected(self, n, count) {
			t.Fatalf("member %d delivered %d messages, want %d", self, len(s.Deliveries), expected(self, n, count))
		}
		for topic, seq := range perTopic {
			if r, ok := ref[topic]; ok && !slices.Equal(r, seq) {
				t.Fatalf("topic %q: member %d's sequence differs from another subscriber's", topic, self)
			}
			ref[topic] = seq
		}
	}
	for i, a := range sums {
		for _, b := range sums[i+1:] {
			inB := make(map[string]bool)
			for _, d := range b.Deliveries {
				inB[d.ID] = true
			}
			var ca, cb []string
			for _, d := range a.Deliveries {
				if inB[d.ID] {
					ca = append(ca, d.ID)
				}
			}
			inA := make(map[string]bool)
			for _, d := range a.Deliveries {
				inA[d.ID] = true
			}
			for _, d := range b.Deliveries {
				if inA[d.ID] {
					cb = append(cb, d.ID)
				}
			}
			if !slices.Equal(ca, cb) {
				t.Fatalf("members %d and %d deliver the messages both deliver in different orders", a.Member, b.Member)
			}
		}
	}
}

func topicSubs(name string) []convoy.NodeID {
	for _, tp := range testTopics {
		if tp.Name == name {
			return tp.Subscribers
		}
	}
	return nil
}

// groupTimeout bounds one group's run, from starting the processes to
// their exit.
const groupTimeout = memberTimeout + 30*time.Second

// runGroup starts n member processes and returns their summaries, by
// rank.
func runGroup(t *testing.T, n, count int) []summary {
	t.Helper()
	var list []string
	for i, addr := range testproc.FreeAddrs(t, n) {
		list = append(list, fmt.Sprintf("%d=%s", i+1, addr))
	}
	sums := testproc.Summaries[summary](t, groupTimeout, n, summaryPrefix, func(i int) []string {
		return []string{fmt.Sprintf("%s=%d", envMember, i+1), envMembers + "=" + strings.Join(list, ","), fmt.Sprintf("%s=%d", envCount, count)}
	})
	for i, s := range sums {
		if s.Member != uint64(i+1) {
			t.Fatalf("member %d's summary names member %d", i+1, s.Member)
		}
	}
	return sums
}
