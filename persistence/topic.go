package persistence

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// TopicEntry is one delivered message of a topic in the log. A member logs
// the messages of the topics it subscribes to besides the group's (the
// entries), in a sequence of its own: a topic's messages reach its
// subscribers only, so no global index numbers them.
type TopicEntry struct {
	// Pos numbers the member's topic entries, from 1, without gaps: the
	// order in which it delivered them.
	Pos uint64
	// After is the index of the last group message (Entry) the member
	// delivered before this one (0: none): replaying the entries and the
	// topic entries by Index and After gives the member's delivery order.
	After uint64
	// Topic is the topic's name, Index the message's index on it (the
	// same at every subscriber).
	Topic string
	Index uint64
	// Epoch, Sender and Seq are as in Entry (Seq numbers the sender's
	// messages on the topic).
	Epoch, Sender, Seq uint64
	// Payload is the message. Topic entries returned by ScanTopics own
	// their payload.
	Payload []byte
}

// prefixTopic holds the topic entries, by Pos. It sorts after the
// entries.
const prefixTopic = 't'

// topicFixedLen is the header, after, index, epoch, sender, seq and the
// topic name's length.
const topicFixedLen = headerLen + 5*8 + 2

// maxTopicName bounds a topic entry's topic name, in bytes.
const maxTopicName = math.MaxUint16

// encodeTopicEntry returns the key and value of e.
func encodeTopicEntry(e *TopicEntry) (key, value []byte) {
	key = makeKey(prefixTopic, e.Pos)
	value = make([]byte, topicFixedLen+len(e.Topic)+len(e.Payload))
	b := value[headerLen:]
	for i, n := range []uint64{e.After, e.Index, e.Epoch, e.Sender, e.Seq} {
		binary.BigEndian.PutUint64(b[8*i:], n)
	}
	binary.BigEndian.PutUint16(b[40:], uint16(len(e.Topic)))
	copy(b[42:], e.Topic)
	copy(b[42+len(e.Topic):], e.Payload)
	seal(key, value)
	return key, value
}

// decodeTopicEntry decodes and verifies a topic entry record. The
// returned entry does not alias value.
func decodeTopicEntry(key, value []byte) (TopicEntry, error) {
	pos, ok := parseKey(prefixTopic, key)
	if !ok {
		return TopicEntry{}, fmt.Errorf("malformed topic entry key %x", key)
	}
	body, err := open(key, value)
	if err != nil {
		return TopicEntry{}, err
	}
	if len(body) < topicFixedLen-headerLen {
		return TopicEntry{}, fmt.Errorf("topic entry record length %d", len(value))
	}
	n := int(binary.BigEndian.Uint16(body[40:]))
	if len(body) < 42+n {
		return TopicEntry{}, fmt.Errorf("topic entry record length %d, topic name of %d bytes", len(value), n)
	}
	e := TopicEntry{
		Pos:    pos,
		After:  binary.BigEndian.Uint64(body),
		Index:  binary.BigEndian.Uint64(body[8:]),
		Epoch:  binary.BigEndian.Uint64(body[16:]),
		Sender: binary.BigEndian.Uint64(body[24:]),
		Seq:    binary.BigEndian.Uint64(body[32:]),
		Topic:  string(body[42 : 42+n]),
	}
	if p := body[42+n:]; len(p) > 0 {
		e.Payload = append([]byte(nil), p...)
	}
	return e, nil
}

// recoverTopics reads the first and last topic entries' positions from
// disk and checks the last entry.
func (l *Log) recoverTopics() error {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixTopic},
		UpperBound: []byte{prefixTopic + 1},
	})
	if err != nil {
		return fmt.Errorf("persistence: recovery: %w", err)
	}
	defer it.Close()
	first, last := uint64(1), uint64(0)
	if it.First() {
		pos, ok := parseKey(prefixTopic, it.Key())
		if !ok {
			return fmt.Errorf("%w: malformed topic entry key %x", ErrCorrupt, it.Key())
		}
		first = pos
	}
	if it.Last() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("persistence: recovery: %w", readErr(err))
		}
		e, err := decodeTopicEntry(it.Key(), v)
		if err != nil {
			return fmt.Errorf("%w: last topic entry: %v", ErrCorrupt, err)
		}
		last = e.Pos
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("persistence: recovery: %w", readErr(err))
	}
	if first > last+1 {
		return fmt.Errorf("%w: topic entries from %d to %d", ErrCorrupt, first, last)
	}
	l.mu.firstTopic, l.mu.lastTopic = first, last
	l.topicSynced.Store(last)
	return nil
}

// AppendTopic queues topic entries for writing, in final order: each Pos
// must be LastTopic plus one. It returns once they are queued, without
// waiting for their fsync (TopicSynced says how far that went; OnSynced's
// function runs after every synced batch), and blocks while too many
// bytes are queued, as Append does. Either all of es are queued or none.
//
// Errors: ErrOutOfOrder, ErrClosed, or an error wrapping ErrFailed.
func (l *Log) AppendTopic(es ...TopicEntry) error {
	if len(es) == 0 {
		return nil
	}
	ops := make([]op, len(es))
	size := 0
	for i := range es {
		if len(es[i].Topic) > maxTopicName {
			return fmt.Errorf("persistence: topic entry %d: %d-byte topic name", es[i].Pos, len(es[i].Topic))
		}
		if i > 0 && es[i].Pos != es[i-1].Pos+1 {
			return fmt.Errorf("%w: topic entry %d follows %d", ErrOutOfOrder, es[i].Pos, es[i-1].Pos)
		}
		k, v := encodeTopicEntry(&es[i])
		ops[i] = op{key: k, value: v, topicPos: es[i].Pos}
		size += ops[i].size()
	}
	l.mu.Lock()
	for l.mu.queued > 0 && l.mu.queued+size > l.mu.maxQueued && l.mu.err == nil && !l.mu.closing {
		l.mu.space.Wait()
	}
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	if es[0].Pos != l.mu.lastTopic+1 {
		last := l.mu.lastTopic
		l.mu.Unlock()
		return fmt.Errorf("%w: topic entry %d does not follow the last topic entry %d", ErrOutOfOrder, es[0].Pos, last)
	}
	l.mu.lastTopic = es[len(es)-1].Pos
	l.enqueueLocked(ops...)
	l.mu.Unlock()
	return nil
}

// TopicSynced returns the highest topic entry position known fsynced:
// every topic entry up to it survives a crash.
func (l *Log) TopicSynced() uint64 { return l.topicSynced.Load() }

// LastTopic returns the position of the last topic entry appended
// (whether synced yet or not); after Open, the last one on disk. It is 0
// if there is none.
func (l *Log) LastTopic() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.lastTopic
}

// ScanTopics calls fn for every synced topic entry kept from position from
// on, in order, verifying each checksum. It stops at fn's first error
// and returns it. fn must not call Close. Errors: ErrCorrupt (a corrupt
// record or a gap), ctx's, ErrClosed.
func (l *Log) ScanTopics(ctx context.Context, from uint64, fn func(TopicEntry) error) error {
	l.mu.Lock()
	from = max(from, l.mu.firstTopic)
	l.mu.Unlock()
	to := l.topicSynced.Load()
	if from > to {
		return nil
	}
	return scanRecords(ctx, l, prefixTopic, "topic entry", from, to, makeKey(prefixTopic, to+1), decodeTopicEntry, fn,
		func(next uint64) error { return fmt.Errorf("%w: topic entry %d is missing (gap)", ErrCorrupt, next) })
}

// FirstTopic returns the position of the first topic entry kept (see
// TrimTopics): 1 until a trim, LastTopic+1 if none is kept.
func (l *Log) FirstTopic() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.firstTopic
}

// TrimTopics deletes the topic entries up to position through, at most
// the last one synced, with the next batch, and returns at once: a
// trim lost in a crash leaves the entries, as if it had not been asked
// for. ScanTopics no longer reads them. Errors: ErrClosed, or an error
// wrapping ErrFailed.
func (l *Log) TrimTopics(through uint64) error {
	through = min(through, l.topicSynced.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return err
	}
	if through < l.mu.firstTopic {
		return nil
	}
	// The last entry stays on disk: it numbers the next one after a
	// restart.
	through = min(through, l.mu.lastTopic-1)
	if through < l.mu.firstTopic {
		return nil
	}
	l.enqueueLocked(op{key: makeKey(prefixTopic, 0), end: makeKey(prefixTopic, through+1)})
	l.mu.firstTopic = through + 1
	return nil
}
