package orderproc

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/ordering"
)

// Environment variables that describe a member to a child process.
const (
	envMember  = "ORDERPROC_MEMBER"  // this member's id
	envMembers = "ORDERPROC_MEMBERS" // id=host:port,... in rank order
	envMode    = "ORDERPROC_MODE"    // atomic, total or unordered
	envCount   = "ORDERPROC_COUNT"   // messages each member sends
)

// summaryPrefix starts the line on which a member reports its summary;
// the test framework's own output shares the stream.
const summaryPrefix = "orderproc-summary "

// checkpointEvery is how many deliveries apart a member records its
// running hash, so that the test can tell where two members diverge.
const checkpointEvery = 64

// headerBytes is the part of a message that identifies it: the sender's
// id and the message's sequence number. The rest is a pattern derived
// from both.
const headerBytes = 16

// summary is what a member reports about its deliveries.
type summary struct {
	Member convoy.NodeID `json:"member"`
	Count  int           `json:"count"`
	// PerSender counts the messages delivered from each member, by rank.
	PerSender []uint64 `json:"per_sender"`
	// Hash is the FNV-1a hash of the delivered (sender, seq) sequence;
	// Checkpoints its value after every checkpointEvery deliveries.
	Hash        uint64   `json:"hash"`
	Checkpoints []uint64 `json:"checkpoints"`
	// Err describes the first delivery that broke a guarantee: a sender's
	// messages out of order, lost or duplicated, or a damaged message.
	Err string `json:"err,omitempty"`
}

// memberSpec is a child process's part, read from its environment.
type memberSpec struct {
	self    convoy.NodeID
	members []convoy.Member
	mode    convoy.Mode
	count   int
}

func memberSpecFromEnv() (memberSpec, error) {
	var s memberSpec
	id, err := strconv.ParseUint(os.Getenv(envMember), 10, 64)
	if err != nil {
		return s, fmt.Errorf("%s: %w", envMember, err)
	}
	s.self = convoy.NodeID(id)
	for _, kv := range strings.Split(os.Getenv(envMembers), ",") {
		k, addr, ok := strings.Cut(kv, "=")
		mid, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil {
			return s, fmt.Errorf("%s: bad entry %q", envMembers, kv)
		}
		s.members = append(s.members, convoy.Member{ID: convoy.NodeID(mid), Addr: addr})
	}
	if s.mode, err = ordering.ParseMode(os.Getenv(envMode)); err != nil {
		return s, fmt.Errorf("%s: %w", envMode, err)
	}
	if s.count, err = strconv.Atoi(os.Getenv(envCount)); err != nil || s.count < 1 {
		return s, fmt.Errorf("%s: want a positive count, got %q", envCount, os.Getenv(envCount))
	}
	return s, nil
}

// encodeSpec is the inverse of memberSpecFromEnv: the environment of
// member self.
func encodeSpec(self convoy.NodeID, members []convoy.Member, mode convoy.Mode, count int) []string {
	list := make([]string, len(members))
	for i, m := range members {
		list[i] = fmt.Sprintf("%d=%s", m.ID, m.Addr)
	}
	return []string{
		fmt.Sprintf("%s=%d", envMember, self),
		envMembers + "=" + strings.Join(list, ","),
		envMode + "=" + mode.String(),
		fmt.Sprintf("%s=%d", envCount, count),
	}
}

// messageSize is the size of message seq: mostly small ones on the
// batched path, and now and then one large enough to be cut into blocks.
func messageSize(seq uint64) int {
	if seq%25 == 0 {
		return 100 << 10
	}
	return headerBytes + int(seq*7%200)
}

// newMessage returns message seq of sender.
func newMessage(sender convoy.NodeID, seq uint64) []byte {
	p := make([]byte, messageSize(seq))
	binary.BigEndian.PutUint64(p[0:8], uint64(sender))
	binary.BigEndian.PutUint64(p[8:16], seq)
	for i := headerBytes; i < len(p); i++ {
		p[i] = byte(uint64(i) + seq*31 + uint64(sender)*7)
	}
	return p
}

// checkMessage returns an error unless d carries exactly the message its
// sender and sequence number name.
func checkMessage(d convoy.Delivery) error {
	want := newMessage(d.Sender, d.Seq)
	if len(d.Payload) != len(want) {
		return fmt.Errorf("message %d#%d has %d bytes, want %d", d.Sender, d.Seq, len(d.Payload), len(want))
	}
	for i := range want {
		if d.Payload[i] != want[i] {
			return fmt.Errorf("message %d#%d differs at byte %d", d.Sender, d.Seq, i)
		}
	}
	return nil
}

// recorder folds one member's deliveries into its summary. Its methods are
// safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	sum   summary
	next  []uint64 // by sender rank: the sequence number due next
	h     hash.Hash64
	total int
	done  chan struct{} // closed once total messages are delivered
}

func newRecorder(self convoy.NodeID, members, total int) *recorder {
	r := &recorder{
		sum:   summary{Member: self, PerSender: make([]uint64, members)},
		next:  make([]uint64, members),
		h:     fnv.New64a(),
		total: total,
		done:  make(chan struct{}),
	}
	for i := range r.next {
		r.next[i] = 1
	}
	return r
}

// deliver is the member's handler. Member ids are rank+1.
func (r *recorder) deliver(d convoy.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sum.Err != "" {
		return
	}
	if err := r.check(d); err != nil {
		r.sum.Err = fmt.Sprintf("delivery %d: %v", r.sum.Count+1, err)
		return
	}
	rank := int(d.Sender) - 1
	r.next[rank]++
	r.sum.PerSender[rank]++
	r.sum.Count++
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], uint64(d.Sender))
	binary.BigEndian.PutUint64(b[8:16], d.Seq)
	r.h.Write(b[:])
	r.sum.Hash = r.h.Sum64()
	if r.sum.Count%checkpointEvery == 0 {
		r.sum.Checkpoints = append(r.sum.Checkpoints, r.sum.Hash)
	}
	if r.sum.Count == r.total {
		close(r.done)
	}
}

// check returns an error if d breaks per-sender FIFO order, is lost,
// duplicated or damaged, or is delivered past the expected total.
// REQUIRES: r.mu.
func (r *recorder) check(d convoy.Delivery) error {
	rank := int(d.Sender) - 1
	switch {
	case rank < 0 || rank >= len(r.next):
		return fmt.Errorf("message from %d, not a member", d.Sender)
	case d.Seq != r.next[rank]:
		return fmt.Errorf("message %d#%d, but #%d was due from that sender", d.Sender, d.Seq, r.next[rank])
	case d.Index != uint64(r.sum.Count)+1:
		return fmt.Errorf("message %d#%d has index %d, want %d", d.Sender, d.Seq, d.Index, r.sum.Count+1)
	case r.sum.Count == r.total:
		return fmt.Errorf("message %d#%d beyond the %d sent", d.Sender, d.Seq, r.total)
	}
	return checkMessage(d)
}

func (r *recorder) summary() summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	s.PerSender = append([]uint64(nil), s.PerSender...)
	s.Checkpoints = append([]uint64(nil), s.Checkpoints...)
	return s
}

// runMember is the body of a member process: it opens the group, sends
// its messages, waits for every member's, prints its summary on out and
// then waits for in to end (the test's signal that every member is done)
// before closing the group. Closing earlier would make the group fail on
// members still delivering.
func runMember(ctx context.Context, s memberSpec, in io.Reader, out io.Writer) error {
	rec := newRecorder(s.self, len(s.members), s.count*len(s.members))
	g, err := convoy.Open(ctx, convoy.Config{
		Self:    s.self,
		Members: s.members,
		Mode:    s.mode,
	}, rec.deliver)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer g.Close()

	for seq := uint64(1); seq <= uint64(s.count); seq++ {
		if _, err := g.Send(ctx, newMessage(s.self, seq)); err != nil {
			return fmt.Errorf("send of message %d: %w", seq, err)
		}
	}
	select {
	case <-rec.done:
	case <-ctx.Done():
		sum := rec.summary()
		err := fmt.Errorf("delivered %d of %d messages: %w", sum.Count, rec.total, context.Cause(ctx))
		if sum.Err != "" {
			err = fmt.Errorf("%w; %s", err, sum.Err)
		}
		if gerr := g.Err(); gerr != nil {
			err = fmt.Errorf("%w; %w", err, gerr)
		}
		return err
	}
	line, err := json.Marshal(rec.summary())
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s%s\n", summaryPrefix, line); err != nil {
		return err
	}

	// Wait for the test to close our stdin.
	eof := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, bufio.NewReader(in))
		eof <- err
	}()
	select {
	case err := <-eof:
		if err != nil && !errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("reading stdin: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the other members: %w", context.Cause(ctx))
	}
}

// memberTimeout bounds a member process's whole run: less than
// groupTimeout, so that a stuck member reports how far it got. It only
// catches a hang: a run takes about a second on an idle machine, and
// many times that on a loaded one.
const memberTimeout = 2 * time.Minute
