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
// entries, and TrimTopics deletes a prefix of the synced ones, never the
// last, with the next sync.
func TestTopicEntries(t *testing.T) {
	l := memlog.New()
	for pos := uint64(1); pos <= 4; pos++ {
		if err := l.AppendTopic(persistence.TopicEntry{Pos: pos, Topic: "t", Index: pos}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.AppendTopic(persistence.TopicEntry{Pos: 6}); !errors.Is(err, persistence.ErrOutOfOrder) {
		t.Fatalf("AppendTopic past a gap: %v, want ErrOutOfOrder", err)
	}
	if l.TopicSynced() != 0 || l.LastTopic() != 4 || len(topicPositions(t, l)) != 0 {
		t.Fatalf("before a sync: TopicSynced %d, LastTopic %d", l.TopicSynced(), l.LastTopic())
	}
	if err := l.TrimTopics(3); err != nil || l.FirstTopic() != 1 {
		t.Fatalf("trim before a sync: %v, FirstTopic %d; want nothing trimmed", err, l.FirstTopic())
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.TopicSynced() != 4 || len(topicPositions(t, l)) != 4 {
		t.Fatalf("after a sync: TopicSynced %d, %d entries read", l.TopicSynced(), len(topicPositions(t, l)))
	}
	for pos := uint64(5); pos <= 7; pos++ {
		if err := l.AppendTopic(persistence.TopicEntry{Pos: pos, Topic: "t", Index: pos}); err != nil {
			t.Fatal(err)
		}
	}
	l = l.Crash(func(int) int { return 1 })
	if l.LastTopic() != 5 || l.TopicSynced() != 5 || l.FirstTopic() != 1 {
		t.Fatalf("after a crash keeping one write: LastTopic %d, TopicSynced %d, FirstTopic %d; want 5, 5, 1",
			l.LastTopic(), l.TopicSynced(), l.FirstTopic())
	}
	if err := l.TrimTopics(2); err != nil {
		t.Fatal(err)
	}
	l = l.Crash(nil) // the trim is lost with its sync
	if got := topicPositions(t, l); len(got) != 5 || l.FirstTopic() != 1 {
		t.Fatalf("trim lost in a crash: positions %v, FirstTopic %d", got, l.FirstTopic())
	}
	if err := l.TrimTopics(9); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l = l.Crash(nil)
	if got := topicPositions(t, l); len(got) != 1 || got[0] != 5 || l.FirstTopic() != 5 || l.LastTopic() != 5 {
		t.Fatalf("trimmed through the end: positions %v, FirstTopic %d, LastTopic %d; want [5], 5, 5", got, l.FirstTopic(), l.LastTopic())
	}
}
