package memlog

import (
	"maps"

	"github.com/convoy-gcs/convoy/persistence"
)

// image is the log's durable state: what a restart finds, and what reads
// are served from.
//
// Elements of entries are never modified once appended, and trims only
// reslice it, so a reader may keep a copy of the slice and read it
// without the log's lock while writers append.
type image struct {
	// entries are contiguous: entries[i].Index == entries[0].Index+i.
	entries []persistence.Entry
	// trim is the trim point (every entry below it was deleted); 0 if the
	// log was never trimmed.
	trim uint64
	// snap is the last snapshot recorded, if hasSnap, with its parts (nil
	// for one recorded without any). Parts are never modified once
	// committed.
	hasSnap   bool
	snapAt    uint64
	snapMeta  []byte
	snapParts [][]byte
	// views holds the view records, JSON-encoded as persistence.Log
	// encodes them, by epoch.
	views map[uint64][]byte
	// mark is the durable mark last written.
	mark uint64
	// topics are the topic entries kept, in position order, without
	// gaps. Like entries, they are never modified once appended.
	topics []persistence.TopicEntry
}

// bounds returns the first and last index the image holds, as Open finds
// them: an empty log holds [trim, trim-1] (at least [1, 0]).
func (img *image) bounds() (first, last uint64) {
	if n := len(img.entries); n > 0 {
		return img.entries[0].Index, img.entries[n-1].Index
	}
	first = max(img.trim, 1)
	return first, first - 1
}

// clone returns a copy of img that shares no mutable state with it: its
// entries may grow without touching img's.
func (img *image) clone() image {
	c := *img
	c.entries = img.entries[:len(img.entries):len(img.entries)]
	c.topics = img.topics[:len(img.topics):len(img.topics)]
	c.views = maps.Clone(img.views)
	return c
}

// kind is what a write does.
type kind uint8

const (
	writeEntry     kind = iota + 1 // appends entry
	writeView                      // records view (JSON) for epoch
	writeTrim                      // deletes the entries below index, the trim point
	writeSnapshot                  // records the snapshot (index, meta, parts)
	writeInstall                   // replaces everything with the snapshot (index, meta)
	writeMark                      // records nothing but the durable mark
	writeTopic                     // appends topic
	writeTopicTrim                 // deletes the topic entries up to index
)

// write is one unit of what a crash keeps or loses: an entry, or one
// synchronous write whole.
type write struct {
	kind  kind
	entry persistence.Entry
	topic persistence.TopicEntry
	epoch uint64
	index uint64
	data  []byte
	parts [][]byte
	// setMark makes the write record the durable mark too, as
	// persistence.Log does in the batch of a synchronous write (always
	// for writeMark and writeInstall).
	setMark bool
	mark    uint64
}

// apply carries out w on img. Every write was validated against the
// log's state when it was made, so it applies cleanly in order.
func (img *image) apply(w *write) {
	switch w.kind {
	case writeEntry:
		img.entries = append(img.entries, w.entry)
	case writeView:
		if img.views == nil {
			img.views = make(map[uint64][]byte)
		}
		img.views[w.epoch] = w.data
	case writeTrim:
		if len(img.entries) > 0 && w.index > img.entries[0].Index {
			img.entries = img.entries[min(w.index-img.entries[0].Index, uint64(len(img.entries))):]
		}
		img.trim = w.index
	case writeSnapshot:
		img.hasSnap, img.snapAt, img.snapMeta, img.snapParts = true, w.index, w.data, w.parts
	case writeTopic:
		img.topics = append(img.topics, w.topic)
	case writeTopicTrim:
		n := 0
		for n < len(img.topics) && img.topics[n].Pos <= w.index {
			n++
		}
		img.topics = img.topics[n:]
	case writeInstall:
		img.entries = nil
		img.hasSnap, img.snapAt, img.snapMeta, img.snapParts = true, w.index, w.data, nil
		img.trim = w.index + 1
	}
	if w.setMark {
		img.mark = w.mark
	}
}
