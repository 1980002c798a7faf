package multicast

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/convoy-gcs/convoy/rdma"
)

// Errors returned by groups. Errors passed to Callbacks.Failed wrap
// ErrGroupFailed.
var (
	// ErrGroupFailed is returned by Send after the group failed.
	ErrGroupFailed = errors.New("multicast: group failed")
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("multicast: group closed")
	// ErrNotRoot is returned by Send on a member that is not the root.
	ErrNotRoot = errors.New("multicast: only the root sends")
	// ErrTooLarge is returned by Send for a message above MaxMessageBytes.
	ErrTooLarge = errors.New("multicast: message too large")
	// ErrBackpressure is returned by Send when the send queue is full and
	// GroupConfig.NoWait is set.
	ErrBackpressure = errors.New("multicast: send queue full")
)

// Defaults for GroupConfig fields left zero.
const (
	// DefaultBlockBytes is the block size: large enough that per-block
	// overhead is small, small enough that the steps a schedule adds to
	// a unicast (n−2 blocks for the chain, about log2 n for the binomial
	// pipeline) cost little of a large message's time.
	DefaultBlockBytes = 512 << 10
	// DefaultSmallThreshold: messages up to this size take the batched path.
	DefaultSmallThreshold = 4 << 10
	// DefaultBatchBytes bounds one batch frame of small messages.
	DefaultBatchBytes = 64 << 10
	// DefaultBatchCredits is how many batch buffers each receiver keeps
	// posted: the number of batches the root may have in flight to it.
	DefaultBatchCredits = 8
	// maxBatchCredits bounds BatchCredits, and so a grant of credits a
	// receiver may make at once.
	maxBatchCredits = 1 << 16
	// DefaultMaxMessageBytes bounds one message.
	DefaultMaxMessageBytes = 1 << 30
	// DefaultMaxQueuedBytes bounds the bytes the root holds in its send
	// queue (messages accepted by Send but not yet complete at the root).
	DefaultMaxQueuedBytes = 256 << 20
	// DefaultMaxQueuedMessages bounds the messages in the send queue.
	DefaultMaxQueuedMessages = 64 << 10
)

// GroupConfig describes one group. All members must use the same ID,
// Members, Root, Algorithm, BlockBytes, SmallThreshold and BatchBytes.
type GroupConfig struct {
	// ID identifies the group; it must be below 1<<60 and unique among the
	// live groups sharing the members' endpoints.
	ID uint64
	// Members lists the group's nodes in rank order (the root is moved to
	// rank 0; the others keep their relative order). No duplicates.
	Members []rdma.NodeID
	// Root is the member that sends.
	Root rdma.NodeID
	// Algorithm for large messages; the zero value is BinomialPipeline.
	Algorithm Algorithm
	// BlockBytes is the block size for large messages.
	BlockBytes int
	// SmallThreshold: messages of at most this many bytes take the batched
	// path. Negative disables the small path.
	SmallThreshold int
	// BatchBytes bounds a batch frame; must exceed SmallThreshold.
	BatchBytes int
	// BatchCredits is the number of batch buffers each receiver posts,
	// the batch frames the root may have in flight to it: 1 to 65536.
	BatchCredits int
	// MaxMessageBytes bounds a message; larger sends fail with ErrTooLarge
	// and a larger announced size fails the group on receivers.
	MaxMessageBytes int
	// MaxQueuedBytes and MaxQueuedMessages bound the root's send queue.
	MaxQueuedBytes    int
	MaxQueuedMessages int
	// NoWait makes Send return ErrBackpressure instead of waiting when the
	// send queue is full.
	NoWait bool
	// Logger receives the group's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the group's counts (see NewMetrics); nil means
	// the group counts nothing.
	Metrics *Metrics
}

// Callbacks are the application's hooks, called from transport goroutines.
// Complete and Failed are called one at a time per group, in order; they
// must not block for long and must not call the group's Close, but may call
// Send. Alloc may run concurrently with them and must not call any method of
// the group.
type Callbacks struct {
	// Alloc returns the buffer, of length size, that an incoming message
	// of that size is received into. It is called on receivers when a
	// message starts to arrive (for large messages possibly before earlier
	// small ones are complete). Nil, or a nil result, makes the group
	// allocate the buffer.
	Alloc func(size int) []byte
	// Complete is called on every member, in send order, once per message:
	// on receivers when msg (the buffer from Alloc) holds the whole
	// message; on the root when the root's part is done and the buffer
	// passed to Send may be reused.
	Complete func(msg []byte)
	// Failed is called at most once, when the group fails (not after
	// Close). No Alloc or Complete call follows it.
	Failed func(err error)
}

func (c *GroupConfig) withDefaults() (GroupConfig, error) {
	cfg := *c
	if cfg.ID >= 1<<60 {
		return cfg, fmt.Errorf("multicast: group id %d out of range", cfg.ID)
	}
	if len(cfg.Members) == 0 {
		return cfg, errors.New("multicast: group has no members")
	}
	seen := make(map[rdma.NodeID]bool, len(cfg.Members))
	rootFound := false
	for _, m := range cfg.Members {
		if seen[m] {
			return cfg, fmt.Errorf("multicast: member %d listed twice", m)
		}
		seen[m] = true
		rootFound = rootFound || m == cfg.Root
	}
	if !rootFound {
		return cfg, fmt.Errorf("multicast: root %d is not a member", cfg.Root)
	}
	if cfg.Algorithm < BinomialPipeline || cfg.Algorithm > BinomialTree {
		return cfg, fmt.Errorf("multicast: unknown algorithm %d", cfg.Algorithm)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.BlockBytes, DefaultBlockBytes)
	def(&cfg.SmallThreshold, DefaultSmallThreshold)
	def(&cfg.BatchBytes, DefaultBatchBytes)
	def(&cfg.BatchCredits, DefaultBatchCredits)
	def(&cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	def(&cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)
	def(&cfg.MaxQueuedMessages, DefaultMaxQueuedMessages)
	switch {
	case cfg.BlockBytes < 0:
		return cfg, errors.New("multicast: negative BlockBytes")
	case cfg.SmallThreshold >= 0 && cfg.BatchBytes < cfg.SmallThreshold+batchRecordOverhead+batchHeaderBytes:
		return cfg, fmt.Errorf("multicast: BatchBytes %d too small for SmallThreshold %d", cfg.BatchBytes, cfg.SmallThreshold)
	case cfg.BatchCredits < 1 || cfg.BatchCredits > maxBatchCredits:
		return cfg, fmt.Errorf("multicast: BatchCredits must be from 1 to %d", maxBatchCredits)
	case cfg.MaxMessageBytes < 0, cfg.MaxQueuedBytes < 0, cfg.MaxQueuedMessages < 0:
		return cfg, errors.New("multicast: negative limit")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Members = append([]rdma.NodeID(nil), cfg.Members...)
	return cfg, nil
}
