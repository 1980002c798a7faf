package check

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// KVKind is an operation on the key-value store.
type KVKind string

// Operations on the key-value store.
const (
	Get    KVKind = "get"
	Put    KVKind = "put"
	CAS    KVKind = "cas"
	Delete KVKind = "delete"
)

// KVOp is one operation on the key-value store, from its invocation to
// its completion. Values are strings: the workload writes printable
// values.
type KVOp struct {
	// Client numbers the client that ran the operation, from 0.
	Client int `json:"client"`
	// RequestID is the operation's idempotency key, the same on every
	// retry; unique among the operations that carry one.
	RequestID string `json:"request_id,omitempty"`
	Kind      KVKind `json:"kind"`
	Key       string `json:"key"`
	// Value is the value a put or cas writes.
	Value string `json:"value,omitempty"`
	// Expect is the value a cas expects; nil expects the key absent.
	Expect *string `json:"expect,omitempty"`
	// Invoke and Complete are the times of the first invocation and of
	// the completion; Complete is ignored when the outcome is Unknown.
	Invoke   int64   `json:"invoke"`
	Complete int64   `json:"complete"`
	Outcome  Outcome `json:"outcome"`
	// The result of an operation whose outcome is OK. Found: a get found
	// the key, or a delete found it to remove; Read: the value a get
	// read; Swapped: a cas swapped.
	Found   bool   `json:"found,omitempty"`
	Read    string `json:"read,omitempty"`
	Swapped bool   `json:"swapped,omitempty"`
}

// Files CheckKV writes to KVOptions.ReportDir when the history is not
// linearizable.
const (
	// KVVisualisation is porcupine's HTML view of the keys that failed.
	KVVisualisation = "kv.html"
	// KVHistory is the whole history, as JSON lines of KVOp.
	KVHistory = "kv-history.jsonl"
)

// KVOptions tune CheckKV.
type KVOptions struct {
	// ReportDir, if set, receives KVVisualisation and KVHistory when the
	// history is not linearizable. It is created if need be.
	ReportDir string
	// Timeout bounds the linearizability check of each key; zero means
	// no bound. A key whose check runs out of time is reported as
	// Inconclusive.
	Timeout time.Duration
}

// CheckKV checks a history of the key-value store for linearizability,
// each key on its own as a register (absent, or holding a value):
//
//   - an operation whose outcome is Fail, and a get whose outcome is not
//     OK, took no effect and is left out;
//   - a put, cas or delete whose outcome is Unknown may take effect at any
//     time after its invocation, or never (porcupine sees it return at
//     the end of time, with an output that any state accepts);
//   - every other operation took effect, once, between its invocation and
//     its completion, and returned what is recorded.
//
// Malformed operations (an unknown kind or outcome, a completion before
// the invocation, a request id used twice, a negative client) are
// reported as Wellformed and left out of the check.
func CheckKV(ops []KVOp, opts KVOptions) Result {
	c := newCollector("kv")
	byKey := make(map[string][]porcupine.Operation)
	ids := make(map[string]int)
	for i, op := range ops {
		where := fmt.Sprintf("operation %d (client %d, %s %q)", i, op.Client, op.Kind, op.Key)
		if bad := kvMalformed(op); bad != "" {
			c.add(Wellformed, where, "%s", bad)
			continue
		}
		if op.RequestID != "" {
			if j, ok := ids[op.RequestID]; ok {
				c.add(Wellformed, where, "request id %q already used by operation %d", op.RequestID, j)
				continue
			}
			ids[op.RequestID] = i
		}
		if op.Outcome == Fail || op.Kind == Get && op.Outcome != OK {
			continue
		}
		pop := porcupine.Operation{
			ClientId: op.Client,
			Input:    kvInput{kind: op.Kind, key: op.Key, value: op.Value, expect: op.Expect},
			Call:     op.Invoke,
			Return:   op.Complete,
			Output:   kvOutput{found: op.Found, read: op.Read, swapped: op.Swapped},
		}
		if op.Outcome == Unknown {
			pop.Return, pop.Output = math.MaxInt64, kvOutput{unknown: true}
		}
		byKey[op.Key] = append(byKey[op.Key], pop)
	}

	var failed []porcupine.Operation
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		h := byKey[key]
		switch porcupine.CheckOperationsTimeout(registerModel, h, opts.Timeout) {
		case porcupine.Illegal:
			failed = append(failed, h...)
			first, last := h[0].Call, h[0].Return
			for _, op := range h {
				first = min(first, op.Call)
				if op.Return != math.MaxInt64 {
					last = max(last, op.Return)
				}
			}
			c.add(Linearizable, fmt.Sprintf("key %q", key),
				"no linearization of its %d operations (invoked from %d, completed up to %d) as a register", len(h), first, last)
		case porcupine.Unknown:
			c.add(Inconclusive, fmt.Sprintf("key %q", key), "the check of its %d operations ran out of time (%v)", len(h), opts.Timeout)
		}
	}
	r := c.result()
	if len(failed) > 0 && opts.ReportDir != "" {
		files, err := writeKVReport(opts.ReportDir, ops, failed)
		r.Report = files
		if err != nil {
			r.ReportError = err.Error()
		}
	}
	return r
}

// kvMalformed says what is wrong with op's shape, or "".
func kvMalformed(op KVOp) string {
	switch {
	case op.Kind != Get && op.Kind != Put && op.Kind != CAS && op.Kind != Delete:
		return fmt.Sprintf("unknown kind %q", op.Kind)
	case !op.Outcome.valid():
		return fmt.Sprintf("unknown outcome %q", op.Outcome)
	case op.Outcome != Unknown && op.Complete < op.Invoke:
		return fmt.Sprintf("completed at %d, before its invocation at %d", op.Complete, op.Invoke)
	case op.Client < 0:
		return fmt.Sprintf("negative client %d", op.Client)
	}
	return ""
}

// writeKVReport writes porcupine's visualisation of the failed
// operations and the whole history to dir.
func writeKVReport(dir string, ops []KVOp, failed []porcupine.Operation) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	// The keys that failed are checked again, verbose, for the
	// visualisation; they failed before, so no timeout is needed.
	_, info := porcupine.CheckOperationsVerbose(registerModel, failed, 0)
	html := filepath.Join(dir, KVVisualisation)
	if err := porcupine.VisualizePath(registerModel, info, html); err != nil {
		return files, fmt.Errorf("visualisation: %w", err)
	}
	files = append(files, html)
	hist := filepath.Join(dir, KVHistory)
	f, err := os.Create(hist)
	if err != nil {
		return files, err
	}
	err = WriteLines(f, ops)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return files, fmt.Errorf("history: %w", err)
	}
	return append(files, hist), nil
}

// kvInput is an operation as the model sees it.
type kvInput struct {
	kind       KVKind
	key, value string
	expect     *string
}

// kvOutput is what an operation returned; unknown: its outcome is not
// known, and any state accepts it.
type kvOutput struct {
	found, swapped, unknown bool
	read                    string
}

// register is the state of one key.
type register struct {
	value  string
	exists bool
}

// registerModel is the key-value store, partitioned by key: each key is
// a register checked on its own.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		for _, op := range history {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(byKey))
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(register), input.(kvInput), output.(kvOutput)
		switch in.kind {
		case Get:
			return out.found == st.exists && (!st.exists || out.read == st.value), st
		case Put:
			return true, register{value: in.value, exists: true}
		case Delete:
			return out.unknown || out.found == st.exists, register{}
		case CAS:
			match := st.exists == (in.expect != nil) && (in.expect == nil || *in.expect == st.value)
			if !out.unknown && out.swapped != match {
				return false, st
			}
			if match {
				return true, register{value: in.value, exists: true}
			}
			return true, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		res := fmt.Sprintf("found=%v", out.found)
		switch {
		case out.unknown:
			res = "unknown"
		case in.kind == Get && out.found:
			res = fmt.Sprintf("%q", out.read)
		case in.kind == Get:
			res = "absent"
		case in.kind == CAS:
			res = fmt.Sprintf("swapped=%v", out.swapped)
		case in.kind == Put:
			res = "ok"
		}
		switch in.kind {
		case Get:
			return fmt.Sprintf("get(%s) -> %s", in.key, res)
		case Put:
			return fmt.Sprintf("put(%s, %q) -> %s", in.key, in.value, res)
		case CAS:
			expect := "absent"
			if in.expect != nil {
				expect = fmt.Sprintf("%q", *in.expect)
			}
			return fmt.Sprintf("cas(%s, %s, %q) -> %s", in.key, expect, in.value, res)
		}
		return fmt.Sprintf("delete(%s) -> %s", in.key, res)
	},
	DescribeState: func(state any) string {
		st := state.(register)
		if !st.exists {
			return "absent"
		}
		return fmt.Sprintf("%q", st.value)
	},
}
