package check

import "fmt"

// LogKind is an operation on the shared log.
type LogKind string

// Operations on the shared log.
const (
	// Append appends Data to the log and to Streams; it returns
	// Position.
	Append LogKind = "append"
	// Read reads Position; it returns Status and, if found, Data.
	Read LogKind = "read"
	// ReadRange reads the positions in [From, To); it returns Entries.
	ReadRange LogKind = "range"
	// Tail asks for the next position to be written; it returns Tail.
	Tail LogKind = "tail"
	// Trim drops the positions before Before; it returns TrimPoint.
	Trim LogKind = "trim"
	// ReadStream reads Stream from position From on; it returns Entries.
	ReadStream LogKind = "stream"
)

// ReadStatus is what a read of one position found.
type ReadStatus string

// Read statuses.
const (
	Found     ReadStatus = "found"
	Unwritten ReadStatus = "unwritten"
	Trimmed   ReadStatus = "trimmed"
)

// Entry is one entry of the log.
type Entry struct {
	Position uint64 `json:"position"`
	Data     []byte `json:"data"`
}

// LogOp is one operation on the shared log, from its invocation to its
// completion. The fields after Outcome are the operation's arguments and,
// if its outcome is OK, its result; each kind uses those its
// documentation names.
//
// The checker tells entries apart by their bytes: the data of every
// append must be unique in the history.
type LogOp struct {
	// Client numbers the client that ran the operation, from 0.
	Client int `json:"client"`
	// RequestID is a write's idempotency key, the same on every retry;
	// unique among the operations that carry one.
	RequestID string  `json:"request_id,omitempty"`
	Kind      LogKind `json:"kind"`
	// Invoke and Complete are the times of the first invocation and of
	// the completion; Complete is ignored when the outcome is Unknown.
	Invoke   int64   `json:"invoke"`
	Complete int64   `json:"complete"`
	Outcome  Outcome `json:"outcome"`

	// Data is the entry an append writes, or the one a read found.
	Data    []byte   `json:"data,omitempty"`
	Streams []string `json:"streams,omitempty"`
	// Position is the position an append got, or the one a read reads.
	Position uint64     `json:"position,omitempty"`
	Status   ReadStatus `json:"status,omitempty"`
	// From and To bound a range read, [From, To); From starts a stream
	// read.
	From    uint64  `json:"from,omitempty"`
	To      uint64  `json:"to,omitempty"`
	Stream  string  `json:"stream,omitempty"`
	Entries []Entry `json:"entries,omitempty"`
	Tail    uint64  `json:"tail,omitempty"`
	// Before is the position a trim asks to trim before; TrimPoint the
	// trim point it reported: the log's trim point once it applied (a
	// trim past the tail trims up to it; one below the trim point
	// changes nothing).
	Before    uint64 `json:"before,omitempty"`
	TrimPoint uint64 `json:"trim_point,omitempty"`
}

// LogDump is one member's log at the end of a run, once the faults are
// healed and the members have caught up.
type LogDump struct {
	// Member names the member.
	Member string `json:"member"`
	// Trim is the first position kept, Tail the next to be written.
	Trim uint64 `json:"trim"`
	Tail uint64 `json:"tail"`
	// Entries are the positions from Trim to Tail-1, in order.
	Entries []Entry `json:"entries"`
}

// logMalformed says what is wrong with op's shape, or "".
func logMalformed(op LogOp) string {
	switch op.Kind {
	case Append, Read, ReadRange, Tail, Trim, ReadStream:
	default:
		return fmt.Sprintf("unknown kind %q", op.Kind)
	}
	switch {
	case !op.Outcome.valid():
		return fmt.Sprintf("unknown outcome %q", op.Outcome)
	case op.Outcome != Unknown && op.Complete < op.Invoke:
		return fmt.Sprintf("completed at %d, before its invocation at %d", op.Complete, op.Invoke)
	case op.Client < 0:
		return fmt.Sprintf("negative client %d", op.Client)
	case op.Kind == Read && op.Outcome == OK && op.Status != Found && op.Status != Unwritten && op.Status != Trimmed:
		return fmt.Sprintf("unknown read status %q", op.Status)
	case op.Kind == ReadRange && op.To < op.From:
		return fmt.Sprintf("range [%d, %d) ends before it starts", op.From, op.To)
	case op.Kind == ReadStream && op.Stream == "":
		return "stream read without a stream"
	}
	return ""
}

func (op LogOp) describe(i int) string {
	var arg string
	switch op.Kind {
	case Append:
		arg = fmt.Sprintf(" %q", op.Data)
	case Read:
		arg = fmt.Sprintf(" %d", op.Position)
	case ReadRange:
		arg = fmt.Sprintf(" [%d, %d)", op.From, op.To)
	case Trim:
		arg = fmt.Sprintf(" before %d", op.Before)
	case ReadStream:
		arg = fmt.Sprintf(" %s from %d", op.Stream, op.From)
	}
	return fmt.Sprintf("operation %d (client %d, %s%s)", i, op.Client, op.Kind, arg)
}
