package memlog_test

import (
	"errors"
	"testing"

	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/persistence"
)

// topicPositions returns the positions ScanTopics reads.
func topicPositions(t *testing.T, l *memlog.Log) []uint64 {
	t.Helper()
	var got []uint64
	if err := l.ScanTopics(ctx, 1, func(e persistence.TopicEntry) error {
		got = append(got, e.Pos)
		return nil
	}); err != nil {
		t.Fatalf("ScanTopics: %v", err)
	}
	return got
}

// TestTopicEntries: topic entries sync with the log's other writes, a
// crash keeps the synced ones and the oldest of the others as it keeps
// entries, the topic durable mark is written with the durable mark or
// recovered from the last entry, and TruncateTopics deletes the ones
// beyond a position.
func TestTopicEntries(t *testing.T) {
	l := memlog.New()
	for pos := uint64(1); pos <= 4; pos++ {
		if err := l.AppendTopic(persistence.TopicEntry{Pos: pos, Topic: "t", Index: pos, Mark: pos - 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.AppendTopic(persistence.TopicEntry{Pos: 6}); !errors.Is(err, persistence.ErrOutOfOrder) {
		t.Fatalf("AppendTopic past a gap: %v, want ErrOutOfOrder", err)
	}
	if l.TopicSynced() != 0 || l.LastTopic() != 4 || len(topicPositions(t, l)) != 0 {
		t.Fatalf("before a sync: TopicSynced %d, LastTopic %d", l.TopicSynced(), l.LastTopic())
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.TopicSynced() != 4 || len(topicPositions(t, l)) != 4 {
		t.Fatalf("after a sync: TopicSynced %d, %d entries read", l.TopicSynced(), len(topicPositions(t, l)))
	}
	for pos := uint64(5); pos <= 7; pos++ {
		if err := l.AppendTopic(persistence.TopicEntry{Pos: pos, Topic: "t", Index: pos, Mark: 3}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetTopicDurable(2)
	l = l.Crash(func(int) int { return 1 })
	if l.LastTopic() != 5 || l.TopicSynced() != 5 || l.TopicDurable() != 3 {
		t.Fatalf("after a crash keeping one write: LastTopic %d, TopicSynced %d, TopicDurable %d; want 5, 5, 3 (entry 5's mark)",
			l.LastTopic(), l.TopicSynced(), l.TopicDurable())
	}
	if err := l.TruncateTopics(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := topicPositions(t, l); len(got) != 2 || l.LastTopic() != 2 || l.TopicDurable() != 2 {
		t.Fatalf("truncated after 2: positions %v, LastTopic %d, TopicDurable %d", got, l.LastTopic(), l.TopicDurable())
	}
	l = l.Crash(nil)
	if got := topicPositions(t, l); len(got) != 2 || l.TopicDurable() != 2 {
		t.Fatalf("after a crash: positions %v, TopicDurable %d", got, l.TopicDurable())
	}
}

// TestWriteMarks: WriteMarks writes both marks, as they stand at the
// next sync, and a crash keeps them once synced.
func TestWriteMarks(t *testing.T) {
	l := memlog.New()
	l.WriteMarks()
	l.SetDurable(4)
	l.SetTopicDurable(2)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l = l.Crash(nil)
	if l.Durable() != 4 || l.TopicDurable() != 2 {
		t.Fatalf("after a crash: marks %d and %d, want 4 and 2", l.Durable(), l.TopicDurable())
	}
}
