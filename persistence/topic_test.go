package persistence

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func topicEntryFor(pos uint64) TopicEntry {
	return TopicEntry{
		Pos: pos, After: pos / 2, Topic: fmt.Sprintf("t%d", pos%3), Index: pos/3 + 1,
		Epoch: 1 + pos/10, Sender: pos % 4, Seq: pos * 7, Payload: []byte(fmt.Sprintf("topic payload %d", pos)),
		Mark: pos - 1,
	}
}

// scanTopics returns the synced topic entries from position from on.
func scanTopics(t *testing.T, l *Log, from uint64) []TopicEntry {
	t.Helper()
	var out []TopicEntry
	if err := l.ScanTopics(context.Background(), from, func(e TopicEntry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("ScanTopics(%d): %v", from, err)
	}
	return out
}

// TestTopicEntries: topic entries round-trip beside the entries, in their
// own numbering: they are synced and read back, survive a reopen with
// their positions and their durable mark (written with the durable mark,
// or carried by the last entry), TruncateTopics deletes the ones beyond a
// position for good, InstallSnapshot keeps them, and out-of-order
// positions are refused.
func TestTopicEntries(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := openLog(t, fs, "db")
	if err := l.Append(entryFor(1), entryFor(2)); err != nil {
		t.Fatal(err)
	}
	for pos := uint64(1); pos <= 20; pos++ {
		if err := l.AppendTopic(topicEntryFor(pos)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.AppendTopic(topicEntryFor(22)); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("AppendTopic past a gap: %v, want ErrOutOfOrder", err)
	}
	if err := l.Append(entryFor(3)); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitSynced(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if l.TopicSynced() != 20 || l.LastTopic() != 20 {
		t.Fatalf("TopicSynced %d, LastTopic %d; want 20", l.TopicSynced(), l.LastTopic())
	}
	got := scanTopics(t, l, 5)
	if len(got) != 16 {
		t.Fatalf("ScanTopics(5) read %d entries, want 16", len(got))
	}
	for i, e := range got {
		want := topicEntryFor(uint64(5 + i))
		if fmt.Sprint(e) != fmt.Sprint(want) {
			t.Fatalf("topic entry %d: %+v, want %+v", 5+i, e, want)
		}
	}
	scanAll(t, l, 1, 3)
	l.SetDurable(2)
	l.SetTopicDurable(12)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, fs, "db")
	if l.LastTopic() != 20 || l.TopicSynced() != 20 || l.TopicDurable() != 19 || l.Durable() != 2 {
		t.Fatalf("reopened: LastTopic %d, TopicSynced %d, TopicDurable %d, Durable %d; want 20, 20, 19 (the last entry's mark), 2",
			l.LastTopic(), l.TopicSynced(), l.TopicDurable(), l.Durable())
	}
	if err := l.TruncateTopics(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if l.LastTopic() != 15 || l.TopicSynced() != 15 || l.TopicDurable() != 15 {
		t.Fatalf("truncated: LastTopic %d, TopicSynced %d, TopicDurable %d; want 15", l.LastTopic(), l.TopicSynced(), l.TopicDurable())
	}
	e := topicEntryFor(16)
	e.Payload, e.Mark = []byte("again"), 3
	if err := l.AppendTopic(e); err != nil {
		t.Fatal(err)
	}
	if err := l.InstallSnapshot(ctx, 100, []byte("meta")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, fs, "db")
	defer l.Close()
	got = scanTopics(t, l, 1)
	if len(got) != 16 || string(got[15].Payload) != "again" || l.TopicDurable() != 15 {
		t.Fatalf("after truncating, appending and installing a snapshot: %d topic entries, the last %q, mark %d; want 16, \"again\", 15",
			len(got), got[len(got)-1].Payload, l.TopicDurable())
	}
	if l.First() != 101 {
		t.Fatalf("First %d after the snapshot, want 101", l.First())
	}
}

// TestWriteMarks: WriteMarks writes both marks with the next batch, as
// they stand when it is written, without a synchronous write or Close.
func TestWriteMarks(t *testing.T) {
	ctx := context.Background()
	l := openLog(t, vfs.NewMem(), "db")
	defer l.Close()
	if err := l.AppendTopic(topicEntryFor(1), topicEntryFor(2)); err != nil {
		t.Fatal(err)
	}
	l.SetDurable(3)
	l.SetTopicDurable(2)
	l.WriteMarks()
	l.WriteMarks() // one queued is enough
	if err := l.Append(entryFor(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitSynced(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d, data, err := l.getMetaAt(prefixMark, metaDurable)
	if err != nil {
		t.Fatal(err)
	}
	if td, err := parseMarkData(data); err != nil || d != 3 || td != 2 {
		t.Fatalf("marks on disk: %d and %d (%v), want 3 and 2", d, td, err)
	}
}
