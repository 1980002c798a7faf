package paxos

import (
	"fmt"
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

// kvInput is an operation of the history; kvOutput what it returned.
type kvInput struct {
	op    string // "get", "put", "delete" or "cas"
	key   string
	value string // put: the value; cas: the new value
	// cas: the expected value, or absent if !hasOld.
	old    string
	hasOld bool
}

type kvOutput struct {
	// get: the value and whether it exists; delete: found is whether
	// it existed; cas: ok is whether it swapped.
	value string
	found bool
	ok    bool
	// unknown: the call failed, it may or may not have taken effect. Its
	// return time is the end of the history, so it may take effect at
	// any point after its call, or not at all.
	unknown bool
}

// register is the state of one key.
type register struct {
	value  string
	exists bool
}

// kvModel is a key-value store, partitioned by key: each key is a
// register checked on its own.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(register), input.(kvInput), output.(kvOutput)
		switch in.op {
		case "get":
			return out.found == st.exists && out.value == st.value, st
		case "put":
			return true, register{value: in.value, exists: true}
		case "delete":
			return out.unknown || out.found == st.exists, register{}
		case "cas":
			match := st.exists == in.hasOld && st.value == in.old
			if !out.unknown && out.ok != match {
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
		res := fmt.Sprintf("found=%v ok=%v", out.found, out.ok)
		if out.unknown {
			res = "unknown"
		}
		switch in.op {
		case "get":
			return fmt.Sprintf("get(%s) -> %q %s", in.key, out.value, res)
		case "cas":
			return fmt.Sprintf("cas(%s, %q/%v, %q) -> %s", in.key, in.old, in.hasOld, in.value, res)
		}
		return fmt.Sprintf("%s(%s, %q) -> %s", in.op, in.key, in.value, res)
	},
	DescribeState: func(state any) string {
		st := state.(register)
		if !st.exists {
			return "absent"
		}
		return fmt.Sprintf("%q", st.value)
	},
}

// never is the return time of operations whose outcome is unknown.
const never = math.MaxInt64

// hop builds a history entry for tests of the model.
func hop(client int, call, ret int64, in kvInput, out kvOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func getOp(key string) kvInput    { return kvInput{op: "get", key: key} }
func putOp(key, v string) kvInput { return kvInput{op: "put", key: key, value: v} }
func delOp(key string) kvInput    { return kvInput{op: "delete", key: key} }
func casOp(key, old, v string) kvInput {
	return kvInput{op: "cas", key: key, old: old, hasOld: true, value: v}
}
func seen(v string) kvOutput            { return kvOutput{value: v, found: true} }
func absent() kvOutput                  { return kvOutput{} }
func unknown() kvOutput                 { return kvOutput{unknown: true} }
func casAbsentOp(key, v string) kvInput { return kvInput{op: "cas", key: key, value: v} }

// TestKVModel: the model accepts linearizable histories and rejects the
// rest, stale reads first among them — so that the check of the real
// store's history means something.
func TestKVModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{{
		name: "sequential",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(0, 2, 3, getOp("x"), seen("a")),
			hop(0, 4, 5, casOp("x", "a", "b"), kvOutput{ok: true}),
			hop(0, 6, 7, casOp("x", "a", "c"), kvOutput{ok: false}),
			hop(0, 8, 9, delOp("x"), kvOutput{found: true}),
			hop(0, 10, 11, getOp("x"), absent()),
			hop(0, 12, 13, casAbsentOp("x", "d"), kvOutput{ok: true}),
		},
		want: porcupine.Ok,
	}, {
		name: "stale read: a read misses a write acknowledged before it began",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(0, 2, 3, putOp("x", "b"), kvOutput{}),
			hop(1, 4, 5, getOp("x"), seen("a")),
		},
		want: porcupine.Illegal,
	}, {
		name: "a read misses the first write",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(1, 2, 3, getOp("x"), absent()),
		},
		want: porcupine.Illegal,
	}, {
		name: "reads go back in time",
		history: []porcupine.Operation{
			hop(0, 0, 10, putOp("x", "a"), kvOutput{}),
			hop(1, 1, 2, getOp("x"), seen("a")),
			hop(2, 3, 4, getOp("x"), absent()),
		},
		want: porcupine.Illegal,
	}, {
		name: "concurrent write: either answer",
		history: []porcupine.Operation{
			hop(0, 0, 10, putOp("x", "a"), kvOutput{}),
			hop(1, 1, 2, getOp("x"), absent()),
			hop(2, 3, 4, getOp("x"), seen("a")),
		},
		want: porcupine.Ok,
	}, {
		name: "cas succeeding on the wrong value",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(0, 2, 3, casOp("x", "z", "b"), kvOutput{ok: true}),
		},
		want: porcupine.Illegal,
	}, {
		name: "delete finding a key that is absent",
		history: []porcupine.Operation{
			hop(0, 0, 1, delOp("x"), kvOutput{found: true}),
		},
		want: porcupine.Illegal,
	}, {
		name: "a failed write seen later took effect",
		history: []porcupine.Operation{
			hop(0, 0, never, putOp("x", "a"), unknown()),
			hop(1, 5, 6, getOp("x"), seen("a")),
		},
		want: porcupine.Ok,
	}, {
		name: "a failed write never seen may not have happened",
		history: []porcupine.Operation{
			hop(0, 0, never, putOp("x", "a"), unknown()),
			hop(1, 5, 6, getOp("x"), absent()),
		},
		want: porcupine.Ok,
	}, {
		name: "a failed write cannot take effect before it was called",
		history: []porcupine.Operation{
			hop(1, 0, 1, getOp("x"), seen("a")),
			hop(0, 2, never, putOp("x", "a"), unknown()),
		},
		want: porcupine.Illegal,
	}, {
		name: "keys are independent",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(0, 2, 3, getOp("y"), absent()),
			hop(0, 4, 5, getOp("x"), seen("a")),
		},
		want: porcupine.Ok,
	}, {
		name: "one key's violation fails the whole history",
		history: []porcupine.Operation{
			hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
			hop(0, 2, 3, putOp("y", "b"), kvOutput{}),
			hop(0, 4, 5, getOp("y"), seen("a")),
		},
		want: porcupine.Illegal,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(kvModel, tc.history, 0); got != tc.want {
				t.Fatalf("check: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestKVModelWrong: a deliberately wrong model (deletes change nothing)
// rejects a history the right one accepts.
func TestKVModelWrong(t *testing.T) {
	history := []porcupine.Operation{
		hop(0, 0, 1, putOp("x", "a"), kvOutput{}),
		hop(0, 2, 3, delOp("x"), kvOutput{found: true}),
		hop(0, 4, 5, getOp("x"), absent()),
	}
	if !porcupine.CheckOperations(kvModel, history) {
		t.Fatal("the model rejects a linearizable history")
	}
	wrong := kvModel
	step := kvModel.Step
	wrong.Step = func(state, input, output any) (bool, any) {
		ok, next := step(state, input, output)
		if input.(kvInput).op == "delete" {
			return ok, state
		}
		return ok, next
	}
	if porcupine.CheckOperations(wrong, history) {
		t.Fatal("the wrong model accepts the history")
	}
}
