package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func topicEntryFor(pos uint64) TopicEntry {
	return TopicEntry{
		Pos: pos, After: pos / 2, Topic: fmt.Sprintf("t%d", pos%3), Index: pos/3 + 1,
		Epoch: 1 + pos/10, Sender: pos % 4, Seq: pos * 7, Payload: []byte(fmt.Sprintf("topic payload %d", pos)),
	}
}

// TestTopicSyncedBeforeSynced checks that a commit raises the topic
// entries' synced mark before the entries': Synced and WaitSynced read
// synced without the lock, so a caller that sees an entry synced must
// also see synced the topic entries queued before it, which the same
// batch wrote.
func TestTopicSyncedBeforeSynced(t *testing.T) {
	ctx := context.Background()
	// An idle writer waits an hour for company: the topic entries and
	// the entry stay queued until PutView's fsync takes them in one batch.
	l, err := Open(ctx, Options{Dir: "db", FS: vfs.NewMem(), MaxDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for pos := uint64(1); pos <= 20; pos++ {
		if err := l.AppendTopic(topicEntryFor(pos)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(entryFor(1)); err != nil {
		t.Fatal(err)
	}
	var seen [][2]uint64 // (Synced, TopicSynced) as synced rose
	l.syncedRaised = func() { seen = append(seen, [2]uint64{l.Synced(), l.TopicSynced()}) }
	if err := l.PutView(ctx, membershipViewFor(7)); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != [2]uint64{1, 20} {
		t.Fatalf("(Synced, TopicSynced) as synced rose: %v, want [[1 20]] (one batch)", seen)
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
// their positions, TrimTopics deletes a prefix for good (never the last
// entry, which numbers the next after a reopen), InstallSnapshot keeps
// them, and out-of-order positions are refused.
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
	if l.TopicSynced() != 20 || l.LastTopic() != 20 || l.FirstTopic() != 1 {
		t.Fatalf("TopicSynced %d, LastTopic %d, FirstTopic %d; want 20, 20, 1", l.TopicSynced(), l.LastTopic(), l.FirstTopic())
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
	if err := l.TrimTopics(4); err != nil {
		t.Fatal(err)
	}
	if got := scanTopics(t, l, 1); l.FirstTopic() != 5 || len(got) != 16 || got[0].Pos != 5 {
		t.Fatalf("trimmed through 4: FirstTopic %d, ScanTopics(1) from %d, %d entries; want 5, 5, 16", l.FirstTopic(), got[0].Pos, len(got))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, fs, "db")
	if l.LastTopic() != 20 || l.TopicSynced() != 20 || l.FirstTopic() != 5 {
		t.Fatalf("reopened: LastTopic %d, TopicSynced %d, FirstTopic %d; want 20, 20, 5", l.LastTopic(), l.TopicSynced(), l.FirstTopic())
	}
	// A trim through the end keeps the last entry.
	if err := l.TrimTopics(100); err != nil {
		t.Fatal(err)
	}
	if l.FirstTopic() != 20 {
		t.Fatalf("trimmed through the end: FirstTopic %d, want 20", l.FirstTopic())
	}
	e := topicEntryFor(21)
	e.Payload = []byte("again")
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
	if len(got) != 2 || got[0].Pos != 20 || string(got[1].Payload) != "again" || l.FirstTopic() != 20 || l.LastTopic() != 21 {
		t.Fatalf("after trimming, appending and installing a snapshot: %d topic entries from %d, the last %q, FirstTopic %d, LastTopic %d; want 2 from 20, \"again\", 20, 21",
			len(got), got[0].Pos, got[len(got)-1].Payload, l.FirstTopic(), l.LastTopic())
	}
	if l.First() != 101 {
		t.Fatalf("First %d after the snapshot, want 101", l.First())
	}
}

// FuzzDecodeTopicEntry feeds arbitrary keys and values to the topic entry
// decoder: it must never panic, and whatever it accepts must re-encode to
// exactly the same record.
func FuzzDecodeTopicEntry(f *testing.F) {
	for _, e := range []TopicEntry{
		{Pos: 1, Topic: "t"},
		topicEntryFor(42),
	} {
		k, v := encodeTopicEntry(&e)
		f.Add(k, v)
	}
	f.Add([]byte{prefixTopic}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		e, err := decodeTopicEntry(key, value)
		if err != nil {
			return
		}
		k, v := encodeTopicEntry(&e)
		if !bytes.Equal(k, key) || !bytes.Equal(v, value) {
			t.Fatalf("accepted %x=%x, which re-encodes as %x=%x", key, value, k, v)
		}
	})
}
