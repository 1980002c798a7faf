package check

import (
	"fmt"
	"strings"
)

// Property names a guarantee a checker verifies.
type Property string

// The properties the checkers verify.
const (
	// Wellformed: the history itself is in shape (known operations and
	// outcomes, completion not before invocation, unique request ids...).
	// A violation of it says the recorder is wrong, not the system.
	Wellformed Property = "well-formed"

	// Linearizable: the key-value operations on one key are linearizable
	// as a register.
	Linearizable Property = "linearizable"
	// Inconclusive: the linearizability check ran out of time.
	Inconclusive Property = "inconclusive"

	// UniquePosition: two acknowledged appends got the same position, or
	// one entry sits at two positions.
	UniquePosition Property = "unique position"
	// Dense: a member's log has a gap, or a position twice.
	Dense Property = "dense"
	// AckedAppend: an acknowledged append is missing from a member's
	// log, or holds other bytes there.
	AckedAppend Property = "acknowledged append"
	// NoPhantom: a member's log holds an entry nobody appended, or one
	// whose append certainly failed.
	NoPhantom Property = "no phantom entry"
	// Immutable: a position's contents differ between reads, appends and
	// the members' logs.
	Immutable Property = "immutable position"
	// ReadConsistent: a read, range or tail answered something that
	// contradicts what was acknowledged before it began or what the
	// members' logs hold at the end.
	ReadConsistent Property = "read consistency"
	// TailMonotonic: a tail is below the position of an append
	// acknowledged before the tail was asked for, or above what was
	// appended.
	TailMonotonic Property = "tail"
	// StreamFiltered: a stream read does not return exactly the log's
	// entries of that stream.
	StreamFiltered Property = "stream"
	// TrimRespected: a member's log keeps entries below an acknowledged
	// trim, or a read reports trimmed a position no trim reached.
	TrimRespected Property = "trim"

	// TotalOrder: two histories deliver different messages at one index,
	// or install different views with one epoch, or one history breaks
	// its own sequence (a gap in the indexes, a view out of place).
	TotalOrder Property = "total order"
	// VirtualSynchrony: members that install view e+1 delivered
	// different sets of messages in view e, or a message of view e is
	// delivered beyond the cut.
	VirtualSynchrony Property = "virtual synchrony"
	// FIFO: a sender's messages are delivered out of their order.
	FIFO Property = "FIFO"
	// NoDuplicate: a message is delivered twice.
	NoDuplicate Property = "no duplicate"
	// NoCreation: a message is delivered that was never sent, whose send
	// certainly failed, or that names another sender than its send.
	NoCreation Property = "no creation"
	// Fencing: a message is delivered in a view without its sender, or a
	// message of an incarnation after the view that excluded it.
	Fencing Property = "fencing"
	// Delivery: a history that lasted to the end misses a message whose
	// sender was told it was delivered or stable, or one that its own
	// incarnation sent and the group accepted.
	Delivery Property = "delivery"
	// Durability: a message reported durable is missing, or at another
	// position, in a history after recovery.
	Durability Property = "durability"
)

// Violation is one broken guarantee.
type Violation struct {
	Property Property `json:"property"`
	// Where is the part of the history concerned: a key, a position, a
	// member's incarnation, an operation.
	Where string `json:"where"`
	// What says what broke.
	What string `json:"what"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s: %s", v.Property, v.Where, v.What)
}

// MaxViolations bounds the violations a Result lists.
const MaxViolations = 50

// Result is what a checker found.
type Result struct {
	// Workload is "kv", "log" or "group".
	Workload string `json:"workload"`
	// OK says that no violation was found.
	OK bool `json:"ok"`
	// Violations lists the first MaxViolations violations found.
	Violations []Violation `json:"violations,omitempty"`
	// Omitted counts the violations found beyond those listed.
	Omitted int `json:"omitted,omitempty"`
	// Report lists the files the checker wrote, if any (the kv checker's
	// visualisation and history).
	Report []string `json:"report,omitempty"`
	// ReportError says why writing the report failed, if it did.
	ReportError string `json:"report_error,omitempty"`
}

// Has reports whether the result holds a violation of p.
func (r Result) Has(p Property) bool {
	for _, v := range r.Violations {
		if v.Property == p {
			return true
		}
	}
	return false
}

// String describes the result, one violation a line.
func (r Result) String() string {
	if r.OK {
		return r.Workload + ": ok"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d violations", r.Workload, len(r.Violations)+r.Omitted)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  %v", v)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "\n  and %d more", r.Omitted)
	}
	for _, f := range r.Report {
		fmt.Fprintf(&b, "\n  report: %s", f)
	}
	if r.ReportError != "" {
		fmt.Fprintf(&b, "\n  report not written: %s", r.ReportError)
	}
	return b.String()
}

// collector gathers violations into a Result, up to MaxViolations.
type collector struct{ r Result }

func newCollector(workload string) *collector {
	return &collector{r: Result{Workload: workload}}
}

func (c *collector) add(p Property, where, format string, args ...any) {
	if len(c.r.Violations) == MaxViolations {
		c.r.Omitted++
		return
	}
	c.r.Violations = append(c.r.Violations, Violation{Property: p, Where: where, What: fmt.Sprintf(format, args...)})
}

// omit counts n violations found and left out.
func (c *collector) omit(n int) { c.r.Omitted += n }

func (c *collector) result() Result {
	c.r.OK = len(c.r.Violations) == 0
	return c.r
}

// Outcome is how an operation ended.
type Outcome string

// Outcomes.
const (
	// OK: the operation completed and its result is recorded.
	OK Outcome = "ok"
	// Fail: the operation certainly did not take effect (the request was
	// refused).
	Fail Outcome = "fail"
	// Unknown: the operation may or may not have taken effect, at any
	// time after its invocation (a timeout, a connection error, a 503).
	Unknown Outcome = "unknown"
)

func (o Outcome) valid() bool { return o == OK || o == Fail || o == Unknown }
